package lite

import (
	"context"
	"io"
	"os"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// Attach starts a long-lived command (how sbxd's stream mode is started)
// with its stdin and stdout connected to the caller through pipes that the
// runtime hands straight to the process: no copy in between.
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest) (backend.Process, error) {
	argv, err := req.Argv()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	m, err := s.meta()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	execID, err := newExecID(s.id)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	p, err := s.execProcess(m, argv, req.Env, req.WorkDir, req.User, execID, 0)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	cmd, logFile, cleanup, err := s.runtimeExec(m, p, execID)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	// Plain OS pipes rather than cmd.StdinPipe/StdoutPipe: those are closed
	// by Wait, which would race with the caller still reading output.
	inR, inW, err := os.Pipe()
	if err != nil {
		cleanup()
		return nil, s.opErr("attach", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		cleanup()
		inR.Close()
		inW.Close()
		return nil, s.opErr("attach", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, req.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		cleanup()
		inW.Close()
		outR.Close()
		return nil, s.opErr("attach", err)
	}
	proc := &process{stdin: inW, stdout: &closeAtEOF{outR}, execID: execID, done: make(chan struct{})}
	go func() {
		defer cleanup()
		err := cmd.Wait()
		proc.code = exitCode(cmd.ProcessState)
		if rerr := runtimeFailure(logFile); rerr != nil {
			proc.err = s.opErr("attach", s.execFailure(rerr))
		} else if _, ok := err.(interface{ ExitCode() int }); !ok {
			proc.err = err
		}
		inW.Close()
		close(proc.done)
	}()
	stop := context.AfterFunc(ctx, func() { proc.Kill() })
	go func() { <-proc.done; stop() }()
	return proc, nil
}

type process struct {
	stdin  io.WriteCloser
	stdout io.Reader
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

// Kill kills every process carrying the command's marker (sbxd exec and
// everything it started).
func (p *process) Kill() error {
	p.killOnce.Do(func() {
		go func() {
			for {
				procfs.KillByEnv(envExecID, p.execID)
				select {
				case <-p.done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	})
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
