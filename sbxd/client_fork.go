package sbxd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// A Client implements backend.Forker itself, because forks must come back
// wrapped as their parent is; it does not implement backend.Snapshotter,
// which backend.As finds through Unwrap: a snapshot is an image of the
// backend's, and the agent has nothing to add to it.
var _ backend.Forker = (*Client)(nil)

// Fork forks the wrapped sandbox (see backend.Forker) and returns each fork
// as a Client made by Wrap with the options this one was made with, so a
// fork starts its own agent (at once, or on its first call under
// WithLazyStart) and keeps its job records apart from the parent's. The
// parent's agent and background jobs are processes and are not carried
// over. When the wrapped sandbox is not a backend.Forker, Fork returns an
// error wrapping errors.ErrUnsupported that names its backend.
func (c *Client) Fork(ctx context.Context, req backend.ForkRequest) ([]backend.Sandbox, error) {
	f, ok := backend.As[backend.Forker](c.sb)
	if !ok {
		name := "its backend"
		if info, err := c.sb.Info(ctx); err == nil && info.Backend != "" {
			name = "backend " + info.Backend
		}
		return nil, c.opErr("fork", fmt.Errorf("%w: %s cannot fork sandboxes (not a backend.Forker)", errors.ErrUnsupported, name))
	}
	forks, err := f.Fork(ctx, req)
	if err != nil {
		return nil, err
	}
	out := make([]backend.Sandbox, len(forks))
	errs := make([]error, len(forks))
	var wg sync.WaitGroup
	for i, fk := range forks {
		wg.Go(func() {
			var w *Client
			if w, errs[i] = Wrap(ctx, fk, c.with...); errs[i] == nil {
				out[i] = w
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		// All or none, as Forker promises.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forkCleanupTimeout)
		defer cancel()
		for i, fk := range forks {
			if out[i] != nil {
				out[i].Destroy(dctx)
			} else {
				fk.Destroy(dctx)
			}
		}
		return nil, c.opErr("fork", err)
	}
	return out, nil
}

// forkCleanupTimeout bounds destroying the forks of a Fork that failed.
const forkCleanupTimeout = time.Minute
