package backend

import (
	"context"
	"log/slog"
	"time"
)

// Factory is how a config file configures and opens one backend. Each
// backend package exports its own (local.Factory, native.Factory, ...): it
// owns the backend's [sandbox.NAME] table, the OpenSage [extra] keys and
// host-path keys the backend reads, and turns them into the backend's own
// config. A catalog (sandboxkit's registry.go, or a program's own
// config.Registry) lists the factories it wants; nothing registers itself.
//
// A factory never sees the config package's types: what it may read of the
// file besides its own table comes through [Settings].
type Factory struct {
	// Name is the backend's name, the value of [sandbox] backend and the
	// name of its settings table. Required.
	Name string
	// Aliases are other names for the backend (OpenSage's
	// "agentdocker-lite" for lite), accepted wherever Name is.
	Aliases []string
	// NewConfig returns a pointer to the backend's zero config struct; the
	// [sandbox.NAME] table is decoded into it strictly (unknown keys are
	// errors naming the key). nil: the backend has no table.
	NewConfig func() any
	// Open opens the backend. Required.
	Open func(ctx context.Context, req OpenRequest) (Backend, error)
	// DefaultTTL, when set, gives the [sandbox] default_ttl of files that
	// select this backend and do not write default_ttl themselves, from the
	// backend's table (OpenSandbox's default_timeout_sec). table is as
	// OpenRequest.Table.
	DefaultTTL func(table any) time.Duration
	// EntryTTLKey, when set, names an [...extra] key whose value (seconds)
	// is the TTL of entries that select this backend and set no ttl
	// (OpenSage's opensandbox_timeout_sec).
	EntryTTLKey string
	// EntryExtraKeys are the [sandbox.sandboxes.NAME.extra] keys the backend
	// reads (through Settings.Extras) besides EntryTTLKey. Initializers
	// leave them alone when they decode an entry's extra table, so
	// an entry may carry them whichever backend the file selects.
	EntryExtraKeys []string
	// EntrySpec, when set, applies the EntryExtraKeys the backend honours
	// per sandbox (lite's cpu_max, memory_max, ...) to the Spec of an entry
	// whose [extra] table is extra, when the file selects this backend.
	// Errors name the key as "KEY: problem" (KEY relative to the extra
	// table); the config package adds the entry's path. Keys of
	// EntryExtraKeys are ignored while another backend is selected (as in
	// OpenSage); the config package warns, naming the key and its reader.
	EntrySpec func(extra map[string]any, spec *Spec) error
	// AutoRank makes the backend a candidate of backend = "auto", which
	// opens the candidate of highest rank that opens and passes Probe on
	// this machine. 0: never chosen by auto. The built-in ranks: native 30
	// (a Docker or Podman daemon), lite 20 (runc), local 10 (no isolation).
	AutoRank int
	// Probe, when set, checks quickly that an opened backend can make
	// sandboxes here now (a daemon that answers). Open alone may succeed
	// without contacting anything; auto calls Probe before choosing.
	Probe func(ctx context.Context, b Backend) error
	// RemoteHostPaths says that the host paths of volume specs name
	// folders on another machine (remotedocker's server): they must be
	// absolute and are not looked up (or skipped when missing) here.
	RemoteHostPaths bool
	// NoHostFolders says that the backend cannot mount a folder of the
	// machine the config names host paths on into its sandboxes (local runs
	// host processes without a mount namespace; OpenSandbox's host volumes
	// are folders of the server's machine). OpenSage's [sandbox]
	// host_shared_mem_dir, mounted into every sandbox, is then refused by
	// name when a sandbox is made, instead of being dropped.
	NoHostFolders bool
	// RuntimeKind says what kind of runtime names Spec.Runtime takes
	// besides the levels (RuntimeGVisor, ...): RuntimeKindDocker (an
	// engine's runtime names) or RuntimeKindKubernetes (RuntimeClass
	// names). OpenSandbox's [secure_runtime] table names the runtime of its
	// type for each kind (docker_runtime, k8s_runtime_class), and the
	// config gives those names to backends of that kind.
	RuntimeKind string
}

// Runtime kinds (Factory.RuntimeKind).
const (
	RuntimeKindDocker     = "docker"
	RuntimeKindKubernetes = "kubernetes"
)

// OpenRequest is what Factory.Open gets.
type OpenRequest struct {
	// Table is the decoded [sandbox.NAME] table: the pointer NewConfig
	// returned, filled (a fresh zero one when the file has no table; nil
	// when NewConfig is nil). Read it with [TableAs].
	Table any
	// Settings are the facts of the config file shared by backends.
	Settings Settings
	// Logger is never nil.
	Logger *slog.Logger
}

// Settings are the few facts of a config file that a backend may read
// besides its own table: the [sandbox] keys OpenSage puts there for
// backends, and the entries' [extra] values.
type Settings interface {
	// HostPath resolves a host path written in the file under key ("~"
	// expanded, relative paths against the config file's folder; "" stays
	// ""). Errors wrap ErrInvalidConfig and name key.
	HostPath(key, path string) (string, error)
	// DefaultImage is [sandbox] default_image.
	DefaultImage() string
	// DockerHost and DockerRemoteHost are [sandbox] docker_host and
	// docker_remote_host.
	DockerHost() string
	DockerRemoteHost() string
	// Tolerations are [sandbox] tolerations, as written.
	Tolerations() []map[string]any
	// Extras returns, for each entry whose [extra] table sets key, the
	// entry's name and the value.
	Extras(key string) map[string]any
}

// TableAs returns the decoded table of an OpenRequest as T (the zero T
// when there is none). A table of another type is a programming error in
// the catalog, reported as ErrInvalidConfig naming the backend.
func TableAs[T any](name string, table any) (T, error) {
	var zero T
	switch p := table.(type) {
	case nil:
		return zero, nil
	case *T:
		if p == nil {
			return zero, nil
		}
		return *p, nil
	}
	return zero, InvalidConfigf("%s backend: config is %T, want *%T", name, table, zero)
}

// HostPathField is a host path a factory reads from its table: the key as
// the file names it (for errors) and the field holding the path.
type HostPathField struct {
	Key  string
	Path *string
}

// ResolveHostPaths resolves each field in place with s.HostPath, in order,
// stopping at the first error.
func ResolveHostPaths(s Settings, fields ...HostPathField) error {
	for _, f := range fields {
		p, err := s.HostPath(f.Key, *f.Path)
		if err != nil {
			return err
		}
		*f.Path = p
	}
	return nil
}
