package sbxd

import (
	"context"
	"errors"
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Backend wraps a backend.Backend so that every sandbox it creates or gets
// is a *Client (started lazily, on its first call). Everything else is the
// wrapped backend's, including its volumes (backend.VolumeManager).
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
	c, err := Wrap(ctx, sb, b.opts...)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ backend.VolumeManager = (*Backend)(nil)

// CreateVolume is the wrapped backend's, or an error wrapping
// errors.ErrUnsupported when it has no volumes of its own.
func (b *Backend) CreateVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	vm, err := b.volumes()
	if err != nil {
		return "", err
	}
	return vm.CreateVolume(ctx, spec)
}

func (b *Backend) RemoveVolume(ctx context.Context, name string) error {
	vm, err := b.volumes()
	if err != nil {
		return err
	}
	return vm.RemoveVolume(ctx, name)
}

func (b *Backend) ListVolumes(ctx context.Context, filter backend.Filter) ([]backend.VolumeInfo, error) {
	vm, err := b.volumes()
	if err != nil {
		return nil, err
	}
	return vm.ListVolumes(ctx, filter)
}

func (b *Backend) volumes() (backend.VolumeManager, error) {
	if vm, ok := b.Backend.(backend.VolumeManager); ok {
		return vm, nil
	}
	return nil, &backend.OpError{Op: "volume", Backend: b.Name(), Err: fmt.Errorf("%w: the %s backend has no volumes of its own", errors.ErrUnsupported, b.Name())}
}
