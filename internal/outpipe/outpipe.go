// Package outpipe copies a command's stdout or stderr through a pipe of its
// own. os/exec's pipes for non-file writers close WaitDelay after the
// command exits, losing output that a starved copy goroutine had not read
// yet (seen on a loaded 2-core machine: `echo x` returning nothing). Here
// the reader drains everything the pipe holds when the grace period ends,
// and only output written after that (by background children that keep the
// pipe open) is left out.
package outpipe

import (
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/childpipe"
)

// Pipe is one output stream of a command.
type Pipe struct {
	r, w *os.File
	dst  io.Writer
	done chan struct{}
	// settle, when set, asks the copy to report (by closing the channel)
	// that it drained the pipe at its read deadline, and to go on.
	settle atomic.Pointer[chan struct{}]
}

// New makes a pipe whose output goes to dst. Give W() to the command,
// call Started after starting it (or Close when it did not start), and
// Finish after it exited.
func New(dst io.Writer) (*Pipe, error) {
	r, w, err := childpipe.ForOutput()
	if err != nil {
		return nil, err
	}
	return &Pipe{r: r, w: w, dst: dst, done: make(chan struct{})}, nil
}

// Done is closed when the copy ended: every holder of the write end closed
// it, dst failed, or Finish stopped it.
func (p *Pipe) Done() <-chan struct{} { return p.done }

// W is the end the command writes to.
func (p *Pipe) W() *os.File { return p.w }

// Started closes this process's copy of the write end and starts copying.
func (p *Pipe) Started() {
	p.w.Close()
	go p.copy()
}

// Close releases the pipe of a command that did not start.
func (p *Pipe) Close() {
	p.w.Close()
	p.r.Close()
}

// Finish passes on output for up to grace more (background children may
// hold the pipes), then what the pipes still buffer, and waits for the
// copies to end.
func Finish(grace time.Duration, pipes ...*Pipe) {
	deadline := time.Now().Add(grace)
	for _, p := range pipes {
		p.r.SetReadDeadline(deadline)
	}
	for _, p := range pipes {
		<-p.done
	}
}

// Settle, called after the command exited, waits until everything the
// command wrote has reached dst, and lets the copy go on for background
// children that still hold the pipe (unlike Finish). The copy runs freely
// for up to grace, then drains what the pipe holds at that moment, which
// includes all the command's own output: a slow copy loses nothing and a
// background child holds nothing up.
func (p *Pipe) Settle(grace time.Duration) {
	settled := make(chan struct{})
	p.settle.Store(&settled)
	p.r.SetReadDeadline(time.Now().Add(grace))
	select {
	case <-settled:
	case <-p.done:
	}
}

func (p *Pipe) copy() {
	defer close(p.done)
	defer p.r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := p.r.Read(buf)
		if n > 0 {
			if _, werr := p.dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !p.drain(buf) {
				return
			}
			if settled := p.settle.Swap(nil); settled != nil {
				close(*settled)
				continue
			}
			return
		}
		if err != nil {
			return
		}
	}
}

// drain copies what the (non-blocking) pipe holds right now, and reports
// whether dst took it all.
func (p *Pipe) drain(buf []byte) bool {
	rc, err := p.r.SyscallConn()
	if err != nil {
		return false
	}
	// A raw read refuses to run past the deadline; the callback below
	// never waits, so none is needed.
	p.r.SetReadDeadline(time.Time{})
	// Bounded: a background child may keep writing.
	for range 64 {
		var n int
		rc.Read(func(fd uintptr) bool {
			n, _ = syscall.Read(int(fd), buf)
			return true
		})
		if n <= 0 {
			return true
		}
		if _, err := p.dst.Write(buf[:n]); err != nil {
			return false
		}
	}
	return true
}
