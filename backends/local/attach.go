package local

import (
	"context"
	"io"
	"os"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Attach starts a long-lived process with its stdin and stdout connected to
// the caller (how sbxd is started).
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest) (backend.Process, error) {
	argv, err := req.Argv()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	m, err := s.meta()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	execID, err := statedir.NewID()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	cmd, err := s.command(m, argv, req.Env, req.WorkDir, req.User, execID)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	// Plain OS pipes rather than cmd.StdinPipe/StdoutPipe: those are closed
	// by Wait, which would race with the caller still reading output.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, s.opErr("attach", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, req.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, s.opErr("attach", err)
	}
	stdin, stdout := inW, &closeAtEOF{outR}
	p := &process{stdin: stdin, stdout: stdout, pid: cmd.Process.Pid, execID: execID, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.code, p.err = exitCode(cmd.ProcessState), err
		if _, ok := err.(interface{ ExitCode() int }); ok {
			p.err = nil
		}
		inW.Close()
		close(p.done)
	}()
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	go func() { <-p.done; stop() }()
	return p, nil
}

type process struct {
	stdin  io.WriteCloser
	stdout io.Reader
	pid    int
	execID string

	done     chan struct{}
	code     int
	err      error
	killOnce sync.Once
}

func (p *process) Stdin() io.WriteCloser { return p.stdin }
func (p *process) Stdout() io.Reader     { return p.stdout }

func (p *process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

func (p *process) Kill() error {
	p.killOnce.Do(func() { killTree(p.pid, p.execID) })
	return nil
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
