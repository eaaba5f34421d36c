package lite

import (
	"context"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/attach"
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
	cmd.Stderr = req.Stderr
	warmExec(m) // ends by itself: the command outlives this call
	stdin, stdout, err := attach.Start(cmd)
	if err != nil {
		cleanup()
		return nil, s.opErr("attach", err)
	}
	// The kill reaches every process carrying the command's marker (sbxd
	// exec and everything it started), again until the command is gone.
	proc := attach.New(ctx, stdin, stdout, func(done <-chan struct{}) {
		go func() {
			for {
				s.killMarked(m, execID)
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
	})
	go func() {
		defer cleanup()
		err := cmd.Wait()
		if rerr := runtimeFailure(logFile); rerr != nil {
			err = s.opErr("attach", s.execFailure(rerr))
		} else {
			err = attach.Failed(err)
		}
		stdin.Close()
		proc.Exit(backendkit.ExitCode(cmd.ProcessState), err)
	}()
	return proc, nil
}
