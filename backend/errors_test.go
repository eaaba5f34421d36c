package backend_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// IsContractError knows the sentinels, OpError and PathError, also wrapped,
// and nothing else.
func TestIsContractError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{backend.ErrNotFound, true},
		{fmt.Errorf("image x: %w", backend.ErrAlreadyExists), true},
		{backend.ErrUnavailable, true},
		{backend.ErrInvalidConfig, true},
		{fmt.Errorf("%w: gpus", errors.ErrUnsupported), true},
		{&backend.OpError{Op: "exec", Backend: "b", Err: errors.New("x")}, true},
		{fmt.Errorf("reading: %w", &fs.PathError{Op: "read", Path: "/x", Err: fs.ErrNotExist}), true},
		{errors.New("engine said no"), false},
		{context.Canceled, false},
	} {
		if got := backend.IsContractError(c.err); got != c.want {
			t.Errorf("IsContractError(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
