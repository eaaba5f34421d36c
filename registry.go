package sandboxkit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
)

// The built-in backends: the one list that wires backend packages into the
// default registry. A backend that is not in this list is not compiled into
// sbx. Keep it sorted.
func registerBuiltins(r *Registry) {
	r.Register(lite.Name, BackendFactory{
		NewConfig: func() any { return new(lite.Config) },
		Open:      openLite,
	})
	r.Alias("agentdocker-lite", lite.Name)
	r.Register(k8s.Name, BackendFactory{
		NewConfig: func() any { return new(k8s.Config) },
		Open:      openK8s,
	})
	r.Register(local.Name, BackendFactory{
		NewConfig: func() any { return new(local.Config) },
		Open:      openLocal,
	})
	r.Register(native.Name, BackendFactory{
		NewConfig: func() any { return new(native.Config) },
		Open:      openNative,
	})
	r.Register(opensandbox.Name, BackendFactory{
		NewConfig: func() any { return new(opensandbox.Config) },
		Open:      openOpenSandbox,
		DefaultTTL: func(backendCfg any) time.Duration {
			c, _ := backendConfig[opensandbox.Config](opensandbox.Name, backendCfg)
			return c.DefaultTTL()
		},
		EntryTTLKey: "opensandbox_timeout_sec",
	})
	r.Register(remotedocker.Name, BackendFactory{
		NewConfig:       func() any { return new(remotedocker.Config) },
		Open:            openRemoteDocker,
		RemoteHostPaths: true,
	})
}

// plannedBackends are backends that OpenSage or this project's roadmap use
// but that are not built into this version (agentdocker-lite and nitrobox
// are OpenSage's names for the lite backend). Their [sandbox.NAME] tables
// are accepted without checking (with a warning) so that such config files
// still load, and naming one as the backend fails at Open with a clear
// message instead of at parse time.
var plannedBackends = []string{"nitrobox"}

// backendConfig returns the decoded [sandbox.NAME] table a factory's
// NewConfig made (the zero config when the file has none).
func backendConfig[T any](name string, backendCfg any) (T, error) {
	var zero T
	switch p := backendCfg.(type) {
	case nil:
		return zero, nil
	case *T:
		if p == nil {
			return zero, nil
		}
		return *p, nil
	}
	return zero, invalidf("%s backend: config is %T, want *%T", name, backendCfg, zero)
}

// hostPathKey resolves a host path from the config (~, relative to the
// config file's folder), naming key in errors.
func hostPathKey(key, p, dir string) (string, error) {
	if p == "" {
		return "", nil
	}
	abs, err := resolveHostPath(p, dir)
	if err != nil {
		return "", invalidf("%s: %v", key, err)
	}
	return abs, nil
}

func openLocal(_ context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	c, err := backendConfig[local.Config](local.Name, backendCfg)
	if err != nil {
		return nil, err
	}
	if c.StateDir, err = hostPathKey("sandbox.local.state_dir", c.StateDir, cfg.Dir); err != nil {
		return nil, err
	}
	return local.New(c, local.WithLogger(logger))
}

func openLite(_ context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	c, err := backendConfig[lite.Config](lite.Name, backendCfg)
	if err != nil {
		return nil, err
	}
	for key, val := range map[string]*string{
		"sandbox.lite.state_dir":    &c.StateDir,
		"sandbox.lite.image_dir":    &c.ImageDir,
		"sandbox.lite.runtime_root": &c.RuntimeRoot,
		"sandbox.lite.sbxd_path":    &c.SbxdPath,
	} {
		if *val, err = hostPathKey(key, *val, cfg.Dir); err != nil {
			return nil, err
		}
	}
	// A runtime given as a path (not a bare name) resolves like other paths.
	if strings.Contains(c.Runtime, "/") {
		if c.Runtime, err = hostPathKey("sandbox.lite.runtime", c.Runtime, cfg.Dir); err != nil {
			return nil, err
		}
	}
	c.DefaultImage = cfg.Sandbox.DefaultImage
	return lite.New(c, lite.WithLogger(logger))
}

func openNative(_ context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	c, err := backendConfig[native.Config](native.Name, backendCfg)
	if err != nil {
		return nil, err
	}
	if c.Host == "" {
		c.Host = cfg.Sandbox.DockerHost // native refuses ssh:// and points to remotedocker
	}
	if c.SbxdPath, err = hostPathKey("sandbox.native.sbxd_path", c.SbxdPath, cfg.Dir); err != nil {
		return nil, err
	}
	return native.New(c, native.WithLogger(logger))
}

// BackendFactory is how the registry configures and opens one backend.
type BackendFactory struct {
	// NewConfig returns a pointer to the backend's zero config struct; the
	// [sandbox.NAME] table is decoded into it strictly (unknown keys are
	// errors). nil: the backend has no table.
	NewConfig func() any
	// Open opens the backend. backendCfg is the filled pointer NewConfig
	// returned (a fresh zero one when the file has no table; nil when
	// NewConfig is nil). logger is never nil.
	Open func(ctx context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error)
	// DefaultTTL, when set, gives the [sandbox] default_ttl of files that
	// select this backend and do not write default_ttl themselves (from
	// its own table, e.g. OpenSandbox's default_timeout_sec). backendCfg is
	// as for Open.
	DefaultTTL func(backendCfg any) time.Duration
	// EntryTTLKey, when set, names an [...extra] key whose value (seconds)
	// is the TTL of entries that select this backend and set no ttl
	// (OpenSage's opensandbox_timeout_sec).
	EntryTTLKey string
	// RemoteHostPaths says that the host paths of volume specs name
	// folders on another machine (remotedocker's server): they must be
	// absolute and are not looked up (or skipped when missing) here.
	RemoteHostPaths bool
}

// Registry maps backend names to factories. It is safe for concurrent use.
// Programs normally use the default registry through the package-level
// functions; tests and embedders that want other wiring build their own with
// NewRegistry.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]BackendFactory
	aliases   map[string]string // alias -> registered name
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]BackendFactory{}, aliases: map[string]string{}}
}

// Register adds a backend. It panics if name is empty, already registered
// (or an alias), is a key of the [sandbox] table (its settings table could
// not be told apart), or if f.Open is nil: all are programming errors, as
// with database/sql.Register.
func (r *Registry) Register(name string, f BackendFactory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case name == "":
		panic("sandboxkit: Register with an empty backend name")
	case f.Open == nil:
		panic("sandboxkit: Register backend " + name + " with a nil Open")
	case slices.Contains(sandboxKeys(), name):
		panic("sandboxkit: backend name " + name + " clashes with the [sandbox] key of the same name")
	}
	if _, dup := r.factories[name]; dup {
		panic("sandboxkit: Register called twice for backend " + name)
	}
	if _, dup := r.aliases[name]; dup {
		panic("sandboxkit: Register backend " + name + ": the name is already an alias")
	}
	r.factories[name] = f
}

// Alias makes alias another name for the registered backend name, both as a
// value of [sandbox] backend and as the name of its settings table. It panics
// if alias is empty or taken, or name is not registered.
func (r *Registry) Alias(alias, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if alias == "" {
		panic("sandboxkit: Alias with an empty name")
	}
	if _, ok := r.factories[name]; !ok {
		panic("sandboxkit: Alias " + alias + " for unregistered backend " + name)
	}
	_, isName := r.factories[alias]
	_, isAlias := r.aliases[alias]
	if isName || isAlias || slices.Contains(sandboxKeys(), alias) {
		panic("sandboxkit: Alias " + alias + " is already taken")
	}
	r.aliases[alias] = name
}

// resolve returns the registered name for name or an alias of it.
func (r *Registry) resolve(name string) (string, BackendFactory, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if target, ok := r.aliases[name]; ok {
		name = target
	}
	f, ok := r.factories[name]
	return name, f, ok
}

// Lookup returns the factory registered under name (or an alias of it). An
// unknown name gives an error wrapping backend.ErrInvalidConfig that lists
// the known names.
func (r *Registry) Lookup(name string) (BackendFactory, error) {
	if _, f, ok := r.resolve(name); ok {
		return f, nil
	}
	known := strings.Join(r.Names(), ", ")
	if slices.Contains(plannedBackends, name) {
		return BackendFactory{}, invalidf("backend %q is not built into this version of sandboxkit (known: %s)", name, known)
	}
	return BackendFactory{}, invalidf("unknown backend %q (known: %s)", name, known)
}

// Names returns the registered backend names (not aliases), sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.factories))
}

// Open opens the backend cfg.Sandbox.Backend names ("local" when empty),
// handing it the decoded [sandbox.NAME] table. logger may be nil (discard).
func (r *Registry) Open(ctx context.Context, cfg *Config, logger *slog.Logger) (backend.Backend, error) {
	if cfg == nil {
		return nil, invalidf("sandboxkit.Open: nil config")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	name := cfg.Sandbox.Backend
	if name == "" {
		name = DefaultBackend
	}
	f, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	canonical, _, _ := r.resolve(name)
	var bc any
	if f.NewConfig != nil {
		bc = cfg.BackendConfig(canonical)
		if bc == nil {
			bc = f.NewConfig()
		}
	}
	b, err := f.Open(ctx, cfg, bc, logger)
	if err != nil {
		return nil, fmt.Errorf("open backend %s: %w", canonical, err)
	}
	return b, nil
}

var defaultRegistry = sync.OnceValue(func() *Registry {
	r := NewRegistry()
	registerBuiltins(r)
	return r
})

// DefaultRegistry returns the registry of the built-in backends that the
// package-level functions use.
func DefaultRegistry() *Registry { return defaultRegistry() }

// Register adds a backend to the default registry; see Registry.Register.
func Register(name string, f BackendFactory) { DefaultRegistry().Register(name, f) }

// Names returns the default registry's backend names, sorted.
func Names() []string { return DefaultRegistry().Names() }

// Open opens cfg's backend from the default registry; see Registry.Open.
func Open(ctx context.Context, cfg *Config, logger *slog.Logger) (backend.Backend, error) {
	return DefaultRegistry().Open(ctx, cfg, logger)
}

// LoadConfig finds and loads the config with the default registry; see
// Registry.LoadConfig.
func LoadConfig(path string) (*Config, error) { return DefaultRegistry().LoadConfig(path) }

// ParseConfig parses a config with the default registry; see
// Registry.ParseConfig.
func ParseConfig(data []byte, path string) (*Config, error) {
	return DefaultRegistry().ParseConfig(data, path)
}

func openRemoteDocker(_ context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	c, err := backendConfig[remotedocker.Config](remotedocker.Name, backendCfg)
	if err != nil {
		return nil, err
	}
	// OpenSage writes both under [sandbox]; the backend's own table wins.
	c.Host = cmp.Or(c.Host, cfg.Sandbox.DockerHost)
	c.RemoteHost = cmp.Or(c.RemoteHost, cfg.Sandbox.DockerRemoteHost)
	// Paths on this machine resolve like other host paths; remote_socket
	// is a path on the remote host and stays as written.
	for key, val := range map[string]*string{
		"sandbox.remotedocker.known_hosts":   &c.KnownHosts,
		"sandbox.remotedocker.identity_file": &c.IdentityFile,
		"sandbox.remotedocker.sbxd_path":     &c.SbxdPath,
	} {
		if *val, err = hostPathKey(key, *val, cfg.Dir); err != nil {
			return nil, err
		}
	}
	if c.SSHConfig != "none" {
		if c.SSHConfig, err = hostPathKey("sandbox.remotedocker.ssh_config", c.SSHConfig, cfg.Dir); err != nil {
			return nil, err
		}
	}
	return remotedocker.New(c, remotedocker.WithLogger(logger))
}

func openOpenSandbox(_ context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	c, err := backendConfig[opensandbox.Config](opensandbox.Name, backendCfg)
	if err != nil {
		return nil, err
	}
	return opensandbox.New(c, opensandbox.WithLogger(logger))
}

// openK8s fills [sandbox.k8s] keys left empty from OpenSage's places: the
// entries' extra.namespace / extra.k8s_context / extra.kubeconfig (or under
// extra.k8s; one backend serves one namespace and context, so entries that
// set one must agree) and [sandbox] tolerations.
func openK8s(_ context.Context, cfg *Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	c, err := backendConfig[k8s.Config](k8s.Name, backendCfg)
	if err != nil {
		return nil, err
	}
	for _, a := range []struct {
		extra string
		dst   *string
	}{{"namespace", &c.Namespace}, {"k8s_context", &c.Context}, {"kubeconfig", &c.Kubeconfig}} {
		if *a.dst == "" {
			if *a.dst, err = agreedExtra(cfg, a.extra); err != nil {
				return nil, err
			}
		}
	}
	if c.Kubeconfig, err = hostPathKey("sandbox.k8s.kubeconfig", c.Kubeconfig, cfg.Dir); err != nil {
		return nil, err
	}
	if c.SbxdPath, err = hostPathKey("sandbox.k8s.sbxd_path", c.SbxdPath, cfg.Dir); err != nil {
		return nil, err
	}
	if len(c.Tolerations) == 0 && len(cfg.Sandbox.Tolerations) > 0 {
		if c.Tolerations, err = k8s.TolerationsFromMaps(cfg.Sandbox.Tolerations); err != nil {
			return nil, err
		}
	}
	return k8s.New(c, logger)
}

// agreedExtra is the value the entries give extra.KEY (or extra.k8s.KEY),
// "" when none does; entries that disagree are an error.
func agreedExtra(cfg *Config, key string) (string, error) {
	val, from := "", ""
	for _, name := range cfg.SandboxNames() {
		e := cfg.Sandbox.Sandboxes[name]
		v, ok := e.Extra[key].(string)
		if !ok {
			if sub, isMap := e.Extra["k8s"].(map[string]any); isMap {
				v, ok = sub[key].(string)
			}
		}
		if !ok || v == "" {
			continue
		}
		if val != "" && v != val {
			return "", invalidf("sandbox.sandboxes.%s.extra.%s = %q differs from %q in entry %s: the k8s backend uses one %s for every entry (set it once in [sandbox.k8s])", name, key, v, val, from, key)
		}
		val, from = v, name
	}
	return val, nil
}
