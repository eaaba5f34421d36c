package backend

import (
	"context"
	"time"
)

// Backend makes and finds sandboxes in one place (a Docker engine, a cluster,
// host processes, ...). Implementations are safe for concurrent use.
type Backend interface {
	// Name is the backend's registry name ("local", "native", ...), used in
	// errors and in the sandboxkit.backend label.
	Name() string
	// Create makes a sandbox from spec and returns it running. Options the
	// backend cannot honour are refused before anything is made.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Get reattaches to an existing sandbox by ID. An unknown ID returns an
	// error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Sandbox, error)
	// List returns the sandboxes this backend manages that match filter,
	// including expired ones (so a reaper can find them), sorted by ID.
	List(ctx context.Context, filter Filter) ([]Info, error)
	// Capabilities describes what Create can honour.
	Capabilities() Capabilities
	// Close releases the backend's connections. Sandboxes keep running.
	Close() error
}

// Sandbox is one isolated place to run commands.
type Sandbox interface {
	// ID is the backend-wide unique identifier that Backend.Get accepts.
	ID() string
	// Info reports the sandbox's current state and labels.
	Info(ctx context.Context) (Info, error)
	// Exec runs one command and waits for it. See ExecRequest for the
	// semantics every backend honours.
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	// Destroy removes the sandbox and everything it made; destroying a
	// sandbox that is already gone returns nil.
	Destroy(ctx context.Context) error
}

// State is a sandbox's lifecycle state as the backend reports it.
type State string

const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateExited   State = "exited"
	// StateRemoving: Destroy began and did not finish (its caller may have
	// died); Destroy, sbx rm and sbx gc finish it.
	StateRemoving State = "removing"
	StateUnknown  State = "unknown"
)

// Info describes a sandbox as the backend records it.
type Info struct {
	ID      string
	Backend string
	Name    string // the entry name, e.g. "main"
	Session string
	Image   string
	State   State
	Owner   string // see LabelOwner; empty when no process owns it
	Labels  map[string]string
	// CreatedAt is when the sandbox was made; ExpiresAt is when its TTL runs
	// out (zero: never).
	CreatedAt time.Time
	ExpiresAt time.Time
	// WorkDir is the default working directory of Exec.
	WorkDir string
	// Isolation is what the sandbox's runtime gives ("": the backend's
	// Capabilities say).
	Isolation Isolation
}

// Expired reports whether the sandbox's TTL has run out at now.
func (i Info) Expired(now time.Time) bool {
	return !i.ExpiresAt.IsZero() && !now.Before(i.ExpiresAt)
}

// Filter selects sandboxes in Backend.List. Empty fields match everything;
// all set fields must match.
type Filter struct {
	Session string
	Name    string
	// Labels must all be present with equal values.
	Labels map[string]string
}

// Match reports whether info passes the filter. Backends that cannot filter
// server-side use it on what they fetched.
func (f Filter) Match(info Info) bool {
	if f.Session != "" && info.Session != f.Session {
		return false
	}
	if f.Name != "" && info.Name != f.Name {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := info.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// MatchLabels reports whether a resource known by its labels alone (a
// snapshot, an image) matches f: Session against its LabelSession, and
// Labels; Name is ignored.
func (f Filter) MatchLabels(labels map[string]string) bool {
	return Filter{Session: f.Session, Labels: f.Labels}.Match(Info{Session: labels[LabelSession], Labels: labels})
}

// Labels every backend puts on every resource it makes.
const (
	LabelPrefix    = "sandboxkit."
	LabelID        = "sandboxkit.id"
	LabelBackend   = "sandboxkit.backend"
	LabelSession   = "sandboxkit.session"
	LabelName      = "sandboxkit.name"
	LabelExpiresAt = "sandboxkit.expires-at" // RFC 3339, UTC
	// LabelOwner names the process that owns the sandbox, as
	// "host:pid:start", so a reaper can remove sandboxes whose creator died
	// (sbx run without --keep). Sandboxes meant to outlive their creator
	// (sbx up) have no owner and live until their TTL.
	LabelOwner = "sandboxkit.owner"
	// LabelCreator, where a backend reports it, names the process still
	// creating the sandbox (an owner string, as LabelOwner): a sandbox in
	// StateCreating whose creator is gone was cut short and is reaped.
	LabelCreator = "sandboxkit.creator"
	// LabelRuntime, where a backend records it, is the runtime the
	// sandbox runs with (an engine's runtime name; see RuntimeIsolation).
	LabelRuntime = "sandboxkit.runtime"
)
