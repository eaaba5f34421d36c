package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sandboxkit/sandboxkit/backend"
)

// translate turns a client-go or API error into one wrapping the contract's
// sentinels, keeping the server's message but not its types, so callers
// never depend on client-go.
func (b *Backend) translate(err error) error {
	if err == nil || isOurs(err) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := err.Error()
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s", backend.ErrNotFound, msg)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%w: %s", backend.ErrAlreadyExists, msg)
	case apierrors.IsForbidden(err) && strings.Contains(msg, "RuntimeClass") && strings.Contains(msg, "not found"):
		// The RuntimeClass admission plugin's refusal, not RBAC's.
		return fmt.Errorf("%w: %s (the cluster has no such RuntimeClass: create it with the node's handler for that runtime, "+
			"e.g. name gvisor, handler runsc, or remove the runtime from the entry and from [sandbox.k8s] runtime_classes)", backend.ErrInvalidConfig, msg)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s (the kubeconfig's user needs RBAC rights on pods, pods/exec, pods/portforward, events and persistentvolumeclaims in namespace %q (services with service = true, networkpolicies for network = \"none\"): bind it a Role, or pick another namespace or context)",
			msg, b.ns)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s (the kubeconfig's credentials for %s were refused: refresh them or pick another context)", msg, b.host)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%w: %s", backend.ErrInvalidConfig, msg)
	case apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err), isConnError(err):
		return fmt.Errorf("%w: the Kubernetes API server at %s: %s (is the cluster up? check the kubeconfig's server, or scripts/k8s-harness.sh status for the test cluster)",
			backend.ErrUnavailable, b.host, msg)
	}
	return errors.New(msg)
}

func isConnError(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) {
		return true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "EOF") || strings.Contains(msg, "broken pipe")
}

// isOurs reports whether err was already made in contract terms, or is a
// pod's start failure. (backend.IsContractError does not know ErrClaimed.)
func isOurs(err error) bool {
	return backend.IsContractError(err) || errors.Is(err, backend.ErrClaimed) || errors.Is(err, errStartFailed)
}

func (b *Backend) opErr(op, id string, err error) error {
	if err == nil {
		return nil
	}
	return backend.WrapOp(op, Name, id, b.translate(err))
}
