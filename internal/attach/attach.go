// Package attach is what backends return from Attach: a backend.Process
// made of the caller's ends of a command's stdin and stdout, the exit the
// backend reports, and a kill that runs once, also when the caller's
// context ends first.
package attach

import (
	"context"
	"io"
	"os"
	"os/exec"
	"sync"
)

// Process is a backend.Process.
type Process struct {
	stdin  io.WriteCloser
	stdout io.Reader
	kill   func(done <-chan struct{})

	done     chan struct{}
	code     int
	err      error
	killOnce sync.Once
}

// New returns the process of a started command. kill ends the command and
// everything it started (done is closed once the command's end is
// recorded); Kill runs it at most once, and so does the end of ctx before
// the command's.
func New(ctx context.Context, stdin io.WriteCloser, stdout io.Reader, kill func(done <-chan struct{})) *Process {
	p := &Process{stdin: stdin, stdout: stdout, kill: kill, done: make(chan struct{})}
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	go func() { <-p.done; stop() }()
	return p
}

// Exit records the command's end: Wait returns code and err from now on.
// Call it once.
func (p *Process) Exit(code int, err error) {
	p.code, p.err = code, err
	close(p.done)
}

func (p *Process) Stdin() io.WriteCloser { return p.stdin }
func (p *Process) Stdout() io.Reader     { return p.stdout }

// Wait waits for Exit and returns what it recorded.
func (p *Process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

// Kill runs the kill function (once).
func (p *Process) Kill() error {
	p.killOnce.Do(func() { p.kill(p.done) })
	return nil
}

// Start starts cmd with its stdin and stdout on OS pipes (stderr stays
// cmd.Stderr) and returns the caller's ends; the stdout reader releases
// its descriptor at EOF. Not cmd.StdinPipe and StdoutPipe: Wait closes
// those, racing with a caller still reading output.
func Start(cmd *exec.Cmd) (io.WriteCloser, io.Reader, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, nil, err
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, nil, err
	}
	return inW, &closeAtEOF{outR}, nil
}

// closeAtEOF releases the pipe's descriptor once everything was read.
type closeAtEOF struct{ f *os.File }

func (c *closeAtEOF) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	if err == io.EOF {
		c.f.Close()
	}
	return n, err
}

// Failed is the error of a command that exited: nil when it ran and exited
// with a status (which the exit code says), else err.
func Failed(err error) error {
	if _, ok := err.(interface{ ExitCode() int }); ok {
		return nil
	}
	return err
}
