package remotedocker

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Session networks and logs are native's, on the remote engine.
var (
	_ backend.NetworkManager = (*Backend)(nil)
	_ backend.LogReader      = (*Sandbox)(nil)
)

// CreateNetwork makes a session network on the remote engine.
func (b *Backend) CreateNetwork(ctx context.Context, spec backend.NetworkSpec) (string, error) {
	if err := b.ready(ctx); err != nil {
		return "", b.opErr("create network", "", err)
	}
	name, err := b.nat.CreateNetwork(ctx, spec)
	return name, b.opErr("create network", "", err)
}

func (b *Backend) RemoveNetwork(ctx context.Context, name string) error {
	if err := b.ready(ctx); err != nil {
		return b.opErr("remove network", "", err)
	}
	return b.opErr("remove network", "", b.nat.RemoveNetwork(ctx, name))
}

func (b *Backend) ListNetworks(ctx context.Context, filter backend.Filter) ([]backend.NetworkInfo, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("list networks", "", err)
	}
	nets, err := b.nat.ListNetworks(ctx, filter)
	return nets, b.opErr("list networks", "", err)
}

// Logs returns the container's output.
func (s *Sandbox) Logs(ctx context.Context, tail int) ([]byte, error) {
	var out []byte
	err := s.call(ctx, "logs", func() error {
		lr, err := capability[backend.LogReader](s, "logs")
		if err != nil {
			return err
		}
		out, err = lr.Logs(ctx, tail)
		return err
	})
	return out, err
}
