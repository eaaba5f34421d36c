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
	"syscall"
	"time"
)

// Pipe is one output stream of a command.
type Pipe struct {
	r, w *os.File
	dst  io.Writer
	done chan struct{}
}

// New makes a pipe whose output goes to dst. Give W() to the command,
// call Started after starting it (or Close when it did not start), and
// Finish after it exited.
func New(dst io.Writer) (*Pipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &Pipe{r: r, w: w, dst: dst, done: make(chan struct{})}, nil
}

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
			p.drain(buf)
			return
		}
		if err != nil {
			return
		}
	}
}

// drain copies what the (non-blocking) pipe holds right now.
func (p *Pipe) drain(buf []byte) {
	rc, err := p.r.SyscallConn()
	if err != nil {
		return
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
			return
		}
		if _, err := p.dst.Write(buf[:n]); err != nil {
			return
		}
	}
}
