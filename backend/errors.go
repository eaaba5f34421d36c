package backend

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sandboxkit/sandboxkit/internal/errdefs"
)

// Sentinel errors. Backends wrap them (usually in an *OpError) so callers can
// test with errors.Is whatever the backend. A capability or option a backend
// lacks is reported with errors.ErrUnsupported.
var (
	// ErrNotFound: the sandbox (or image, volume, ...) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a resource with that name or ID exists already.
	ErrAlreadyExists = errors.New("already exists")
	// ErrUnavailable: the backend cannot be reached (daemon down, link
	// dropped). Retrying later may work.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrInvalidConfig: the request or configuration is malformed (the
	// same value as the agent's, internal/errdefs).
	ErrInvalidConfig error = errdefs.ErrInvalidConfig
)

// IsContractError reports whether err already speaks the contract: it
// wraps one of the sentinels above or errors.ErrUnsupported, or an
// *OpError or *fs.PathError. A backend that translates its SDK's errors
// passes these on as they are.
func IsContractError(err error) bool {
	for _, s := range []error{ErrNotFound, ErrAlreadyExists, ErrUnavailable, ErrInvalidConfig, errors.ErrUnsupported, ErrClaimed, ErrNotDetachable} {
		if errors.Is(err, s) {
			return true
		}
	}
	_, isPath := errors.AsType[*fs.PathError](err)
	_, isOp := errors.AsType[*OpError](err)
	return isPath || isOp
}

// OpError records a failed backend operation.
type OpError struct {
	Op      string // "create", "exec", "destroy", "read", ...
	Backend string
	Sandbox string // sandbox ID, when there is one
	Err     error
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString(e.Backend)
	if e.Backend == "" {
		b.WriteString("backend")
	}
	b.WriteString(": ")
	b.WriteString(e.Op)
	if e.Sandbox != "" {
		b.WriteString(" sandbox ")
		b.WriteString(e.Sandbox)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// WrapOp returns err wrapped in an *OpError, or nil when err is nil. An
// error that already is an *OpError for the same sandbox is returned as is,
// so layers do not stack the same prefix twice.
func WrapOp(op, backendName, sandboxID string, err error) error {
	if err == nil {
		return nil
	}
	if oe, ok := errors.AsType[*OpError](err); ok && oe.Backend == backendName && oe.Sandbox == sandboxID {
		return err
	}
	return &OpError{Op: op, Backend: backendName, Sandbox: sandboxID, Err: err}
}

// invalidConfigError is a configuration problem whose text names the key
// and the fix without repeating ErrInvalidConfig's text.
type invalidConfigError struct{ msg string }

func (e *invalidConfigError) Error() string { return e.msg }
func (e *invalidConfigError) Unwrap() error { return ErrInvalidConfig }

// InvalidConfigf returns an error wrapping ErrInvalidConfig with the
// formatted text (which should name the key and the fix).
func InvalidConfigf(format string, args ...any) error {
	return &invalidConfigError{msg: fmt.Sprintf(format, args...)}
}

// ErrNotRegular is what a read of something other than a regular file or a
// directory wraps (in an *fs.PathError): a named pipe, a socket or a
// device. Reading one could block until a writer comes, or never end, so
// the file operations refuse it at once instead. It is the agent's
// sentinel too (internal/errdefs), the same value.
var ErrNotRegular error = errdefs.ErrNotRegular
