package initializers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// GenericType is the initializer of entries whose type names no other: a
// plain sandbox from the entry's keys, as in OpenSage.
const GenericType = "generic"

// Builtins is the one list of the built-in initializers. Keep it sorted.
func Builtins(r *Registry) {
	r.Register(CodeQLType, CodeQLFactory())
	r.Register(CoverageType, CoverageFactory())
	r.Register(FuzzType, FuzzFactory())
	r.Register(GDBMCPType, GDBMCPFactory())
	r.Register(GenericType, GenericFactory())
	r.Register(JoernType, JoernFactory())
	r.Register(MainType, MainFactory())
	r.Register(Neo4jType, Neo4jFactory())
}

// Registry maps initializer types to factories. It is safe for concurrent
// use.
type Registry struct {
	mu        sync.RWMutex
	factories map[string]Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{factories: map[string]Factory{}} }

var defaultRegistry = sync.OnceValue(func() *Registry {
	r := NewRegistry()
	Builtins(r)
	return r
})

// Default returns the registry of the built-in initializers and of those
// registered with Register. Sessions use it unless their Launcher names
// another, so sbx config check, sbx up and sbx serve know every one of them.
func Default() *Registry { return defaultRegistry() }

// Register adds an initializer type to the default registry. An
// initializer in a package of its own calls it from its init function, as
// database/sql drivers do, so that a program links it with one import: for
// sbx, a blank import in package catalog's list. It panics as
// Registry.Register does (an empty or taken type, a nil New).
func Register(typ string, f Factory) { Default().Register(typ, f) }

// Register adds an initializer type. It panics when typ is empty or taken,
// or f.New is nil: programming errors, as with database/sql.Register.
func (r *Registry) Register(typ string, f Factory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case typ == "":
		panic("initializers: Register with an empty type")
	case f.New == nil:
		panic("initializers: Register " + typ + " with a nil New")
	}
	if _, dup := r.factories[typ]; dup {
		panic("initializers: Register called twice for " + typ)
	}
	r.factories[typ] = f
}

// Lookup returns the factory for typ. A type with no initializer gets the
// generic one when the registry has it (fallback reports that), else an
// error wrapping backend.ErrInvalidConfig listing the known types.
func (r *Registry) Lookup(typ string) (f Factory, fallback bool, err error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if f, ok := r.factories[typ]; ok {
		return f, false, nil
	}
	if f, ok := r.factories[GenericType]; ok {
		return f, true, nil
	}
	return Factory{}, false, fmt.Errorf("%w: unknown initializer type %q (known: %s)", backend.ErrInvalidConfig, typ,
		strings.Join(slices.Sorted(maps.Keys(r.factories)), ", "))
}

// Names returns the registered types, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.factories))
}
