package backendtest

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
)

// HideCapabilities returns a sandbox that exposes only the core Sandbox
// methods of sb, so callers such as sbfiles.ReadFile or fileops take their
// generic, Exec-based path. It deliberately has no Unwrap method.
func HideCapabilities(sb backend.Sandbox) backend.Sandbox { return plain{sb} }

type plain struct{ sb backend.Sandbox }

func (p plain) ID() string                                     { return p.sb.ID() }
func (p plain) Info(ctx context.Context) (backend.Info, error) { return p.sb.Info(ctx) }
func (p plain) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	return p.sb.Exec(ctx, req)
}
func (p plain) Destroy(ctx context.Context) error { return p.sb.Destroy(ctx) }
