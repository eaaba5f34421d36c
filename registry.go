package sandboxkit

import (
	"context"
	"log/slog"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
	"github.com/sandboxkit/sandboxkit/config"
)

// The catalog: the one list that wires backend packages into the default
// registry, in the manner of Nomad's plugin catalog. This is the only file
// of the module that imports every backend; a backend that is not in this
// list is not compiled into sbx. Each backend's Factory owns its settings
// table, the [extra] keys it reads and how it opens. Keep the list sorted.
func registerBuiltins(r *config.Registry) {
	r.Register(k8s.Factory)
	r.Register(lite.Factory) // also "agentdocker-lite", OpenSage's name
	r.Register(local.Factory)
	r.Register(native.Factory)
	r.Register(opensandbox.Factory)
	r.Register(remotedocker.Factory)
	// Known to OpenSage but not built into this version: their
	// [sandbox.NAME] tables load with a warning, and selecting one fails
	// at Open with a clear message.
	r.Plan("nitrobox")
}

var defaultRegistry = sync.OnceValue(func() *config.Registry {
	r := config.NewRegistry()
	registerBuiltins(r)
	return r
})

// DefaultRegistry returns the registry of the built-in backends that the
// package-level functions use.
func DefaultRegistry() *config.Registry { return defaultRegistry() }

// Register adds a backend to the default registry; see
// config.Registry.Register.
func Register(f backend.Factory) { DefaultRegistry().Register(f) }

// Names returns the default registry's backend names, sorted.
func Names() []string { return DefaultRegistry().Names() }

// Open opens cfg's backend from the default registry; see
// config.Registry.Open.
func Open(ctx context.Context, cfg *config.Config, logger *slog.Logger) (backend.Backend, error) {
	return DefaultRegistry().Open(ctx, cfg, logger)
}

// LoadConfig finds and loads the config with the default registry; see
// config.Registry.LoadConfig.
func LoadConfig(path string) (*config.Config, error) { return DefaultRegistry().LoadConfig(path) }

// ParseConfig parses a config with the default registry; see
// config.Registry.ParseConfig.
func ParseConfig(data []byte, path string) (*config.Config, error) {
	return DefaultRegistry().ParseConfig(data, path)
}
