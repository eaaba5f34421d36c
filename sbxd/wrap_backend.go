package sbxd

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Backend wraps a backend.Backend so that every sandbox it creates or gets
// is a *Client (started lazily, on its first call). Everything else is the
// wrapped backend's: Backend implements no backend-level optional interface
// itself, so backend.AsBackend finds the wrapped backend's VolumeManager or
// NetworkManager when it has one, and nothing when it has none.
type Backend struct {
	backend.Backend
	opts []Option
}

// WrapBackend returns b with its sandboxes wrapped by Wrap(opts...).
func WrapBackend(b backend.Backend, opts ...Option) *Backend {
	return &Backend{Backend: b, opts: append([]Option{WithLazyStart()}, opts...)}
}

// Unwrap returns the wrapped backend.
func (b *Backend) Unwrap() backend.Backend { return b.Backend }

func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return b.wrap(ctx, sb)
}

func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	sb, err := b.Backend.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return b.wrap(ctx, sb)
}

// wrap never fails for a lazily started client; the check keeps a nil
// *Client out of the interface all the same.
func (b *Backend) wrap(ctx context.Context, sb backend.Sandbox) (backend.Sandbox, error) {
	opts := b.opts
	if !b.Backend.Capabilities().User {
		opts = append(opts[:len(opts):len(opts)], func(o *options) { o.noUsers = true })
	}
	c, err := Wrap(ctx, sb, opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}
