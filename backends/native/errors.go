package native

import (
	"context"
	"errors"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/backend"
)

// translate turns an engine or client error into one wrapping the contract's
// sentinels, keeping the engine's message but not its types, so callers
// never depend on the Docker SDK.
func (b *Backend) translate(err error) error {
	if err == nil || backend.IsContractError(err) {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("%w: cannot reach the Docker engine at %s: %s (start it, e.g. scripts/docker-setup.sh or `sudo systemctl start docker`, or point docker_host / DOCKER_HOST at a running one)",
			backend.ErrUnavailable, b.cli.DaemonHost(), err.Error())
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s", backend.ErrNotFound, err.Error())
	case cerrdefs.IsAlreadyExists(err),
		cerrdefs.IsConflict(err) && (strings.Contains(err.Error(), "already in use") || strings.Contains(err.Error(), "already exists")):
		return fmt.Errorf("%w: %s", backend.ErrAlreadyExists, err.Error())
	case cerrdefs.IsInvalidArgument(err):
		return fmt.Errorf("%w: %s", backend.ErrInvalidConfig, err.Error())
	case cerrdefs.IsUnavailable(err):
		return fmt.Errorf("%w: %s", backend.ErrUnavailable, err.Error())
	case cerrdefs.IsNotImplemented(err):
		return fmt.Errorf("%w: %s", errors.ErrUnsupported, err.Error())
	case strings.Contains(err.Error(), "no such container"):
		// Podman, for a container its own auto-remove took away while
		// the call ran (a kill of a stopping --rm container): status 500
		// with libpod's "no such container".
		return fmt.Errorf("%w: %s", backend.ErrNotFound, err.Error())
	}
	return errors.New(err.Error())
}

func (b *Backend) opErr(op, id string, err error) error {
	if err == nil {
		return nil
	}
	return backend.WrapOp(op, Name, id, b.translate(err))
}
