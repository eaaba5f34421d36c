package local

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
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
	p, err := backendkit.Attach(ctx, cmd, req.Stderr, backendkit.Marker{Key: EnvExecID, Value: execID})
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	return p, nil
}
