package local

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/attach"
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
	cmd.Stderr = req.Stderr
	stdin, stdout, err := attach.Start(cmd)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	pid := cmd.Process.Pid
	p := attach.New(ctx, stdin, stdout, func(<-chan struct{}) { killTree(pid, execID) })
	go func() {
		err := cmd.Wait()
		stdin.Close()
		p.Exit(exitCode(cmd.ProcessState), attach.Failed(err))
	}()
	return p, nil
}
