// Package errdefs holds the sentinel errors that package backend's
// contract and the in-sandbox agent (sbxd, its file helpers and the egress
// enforcer) share. backend re-exports them (backend.ErrNotRegular holds
// errdefs.ErrNotRegular), so errors.Is works across the boundary, while
// the agent links this leaf instead of backend: a change to backend alone
// does not change the agent's binary. It imports only the standard library.
package errdefs

// Error is a sentinel error. It is a value, not a pointer, so that the
// copy a package keeps in a variable of its own is the same error
// (errors.Is compares with ==) and is initialised statically: the package
// that re-exports it runs no code at initialisation for it.
type Error string

func (e Error) Error() string { return string(e) }

const (
	// ErrInvalidConfig: the request or configuration is malformed.
	ErrInvalidConfig = Error("invalid configuration")
	// ErrNotRegular: a read of something other than a regular file or a
	// directory (a named pipe, a socket, a device).
	ErrNotRegular = Error("not a regular file")
)
