package sandboxkit

import (
	"context"
	"log/slog"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/catalog"
	"github.com/sandboxkit/sandboxkit/config"
)

// registerBuiltins wires the backends of the catalog (package catalog,
// the one list) into the default registry.
func registerBuiltins(r *config.Registry) { catalog.Backends(r) }

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
