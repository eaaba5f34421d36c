package config

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Registry maps backend names to their factories (backend.Factory): the
// catalog a config file is parsed and its backend opened with. It is safe for
// concurrent use. This package keeps no default registry: sandboxkit's root
// package fills one with every built-in backend (its registry.go), and a
// program that wants fewer backends, so as to link fewer, builds its own:
//
//	reg := config.NewRegistry()
//	reg.Register(local.Factory)
//	cfg, err := reg.LoadConfig("sandbox.toml")
type Registry struct {
	mu        sync.RWMutex
	factories map[string]backend.Factory
	aliases   map[string]string // alias -> registered name
	// planned are backends known by name but not built in (their tables
	// load with a warning; selecting one fails with a clear message).
	planned []string
	// elsewhere are backends another build of the same program links
	// (see Elsewhere), by name and alias.
	elsewhere map[string]backend.Factory
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{factories: map[string]backend.Factory{}, aliases: map[string]string{}}
}

// Register adds a backend under f.Name and f.Aliases. It panics if a name is
// empty or already taken, is a key of the [sandbox] table (its settings
// table could not be told apart), or f.Open is nil: all are programming
// errors, as with database/sql.Register.
func (r *Registry) Register(f backend.Factory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkNames("Register", f)
	if f.Open == nil {
		panic("config: Register backend " + f.Name + " with a nil Open")
	}
	r.factories[f.Name] = f
	for _, a := range f.Aliases {
		r.aliases[a] = f.Name
	}
}

// checkNames panics unless f's name and aliases can be claimed by verb
// ("Register", "Elsewhere"): none empty, reserved, a [sandbox] key, or
// taken by a registered backend, an alias or another build's backend. The
// caller holds r.mu.
func (r *Registry) checkNames(verb string, f backend.Factory) {
	if f.Name == "" {
		panic("config: " + verb + " with an empty backend name")
	}
	for _, name := range slices.Concat([]string{f.Name}, f.Aliases) {
		if name == "" {
			panic("config: " + verb + " backend " + f.Name + " with an empty alias")
		}
		if name == AutoBackend {
			panic("config: backend name " + name + " is reserved for backend = \"auto\"")
		}
		if slices.Contains(sandboxKeys(), name) {
			panic("config: backend name " + name + " clashes with the [sandbox] key of the same name")
		}
		_, isName := r.factories[name]
		_, isAlias := r.aliases[name]
		_, isElsewhere := r.elsewhere[name]
		if isName || isAlias || isElsewhere {
			panic("config: " + verb + " backend " + f.Name + ": the name " + name + " is already taken")
		}
	}
}

// Plan names backends that a config file may mention although they are not
// built in (OpenSage's roadmap names): their [sandbox.NAME] tables load with
// a warning, and selecting one fails at Open with a clear message instead of
// at parse time.
func (r *Registry) Plan(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.planned = append(r.planned, names...)
}

// resolve returns the registered name for name or an alias of it.
func (r *Registry) resolve(name string) (string, backend.Factory, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if target, ok := r.aliases[name]; ok {
		name = target
	}
	f, ok := r.factories[name]
	return name, f, ok
}

// Elsewhere names a backend that another build of the same program links
// and this one does not (sbx links the backends that start fast; sbx-full
// links every one and takes over a config that names another): f carries
// the backend's name, aliases and [extra] keys, not its code (f.Open and
// f.NewConfig are not used). A config whose backend, --backend or
// [sandbox.NAME] table names it fails to parse with an *ElsewhereError, and
// so does SetBackend; Lookup and Open refuse it the same way. Messages that
// list the known backends, and the [extra] warnings, count it as known, so
// both builds say the same of a config neither hands over.
func (r *Registry) Elsewhere(f backend.Factory) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkNames("Elsewhere", f)
	if r.elsewhere == nil {
		r.elsewhere = map[string]backend.Factory{}
	}
	for _, name := range slices.Concat([]string{f.Name}, f.Aliases) {
		r.elsewhere[name] = f
	}
}

// ElsewhereError is the error for a config that selects, or configures, a
// backend this build does not link but another one does (see
// Registry.Elsewhere): the program hands the whole command over to that
// build.
type ElsewhereError struct {
	Backend string // the backend's registered name
}

func (e *ElsewhereError) Error() string {
	return fmt.Sprintf("the %s backend is not linked into this build (another build of it is)", e.Backend)
}

func (e *ElsewhereError) Unwrap() error { return backend.ErrInvalidConfig }

// elsewhereName returns the registered name of an Elsewhere backend name
// or alias, else "".
func (r *Registry) elsewhereName(name string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.elsewhere[name].Name
}

// knownNames are the names a message lists as known: the registered ones
// and those of other builds, sorted.
func (r *Registry) knownNames() []string {
	names := r.Names()
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, f := range r.elsewhere {
		if !slices.Contains(names, f.Name) {
			names = append(names, f.Name)
		}
	}
	slices.Sort(names)
	return names
}

func (r *Registry) isPlanned(name string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Contains(r.planned, name)
}

func (r *Registry) plannedNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.planned)
}

// Lookup returns the factory registered under name (or an alias of it). An
// unknown name gives an error wrapping backend.ErrInvalidConfig that lists
// the known names.
func (r *Registry) Lookup(name string) (backend.Factory, error) {
	if _, f, ok := r.resolve(name); ok {
		return f, nil
	}
	if e := r.elsewhereName(name); e != "" {
		return backend.Factory{}, &ElsewhereError{Backend: e}
	}
	known := strings.Join(r.knownNames(), ", ")
	if r.isPlanned(name) {
		return backend.Factory{}, invalidf("backend %q is not built into this version of sandboxkit (known: %s)", name, known)
	}
	return backend.Factory{}, invalidf("unknown backend %q (known: %s)", name, known)
}

// Names returns the registered backend names (not aliases), sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.factories))
}

// extraKeyOwners maps each [extra] key some registered backend reads per
// entry (its EntryExtraKeys and EntryTTLKey) to those backends' names,
// sorted.
func (r *Registry) extraKeyOwners() map[string][]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	owners := map[string][]string{}
	all := maps.Clone(r.factories)
	for _, f := range r.elsewhere {
		all[f.Name] = f
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		f := all[name]
		for _, k := range f.EntryExtraKeys {
			owners[k] = append(owners[k], name)
		}
		if f.EntryTTLKey != "" && !slices.Contains(f.EntryExtraKeys, f.EntryTTLKey) {
			owners[f.EntryTTLKey] = append(owners[f.EntryTTLKey], name)
		}
	}
	return owners
}

// Open opens the backend cfg.Sandbox.Backend names, handing it the decoded
// [sandbox.NAME] table and the file's shared settings. logger may be nil
// (discard).
func (r *Registry) Open(ctx context.Context, cfg *Config, logger *slog.Logger) (backend.Backend, error) {
	if cfg == nil {
		return nil, invalidf("config: Open with a nil config")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	name := cmp.Or(cfg.Sandbox.Backend, DefaultBackend)
	if name == AutoBackend {
		return r.openAuto(ctx, cfg, logger)
	}
	f, err := r.Lookup(name)
	if err != nil {
		return nil, err
	}
	canonical, _, _ := r.resolve(name)
	return openFactory(ctx, canonical, f, cfg, logger)
}

// openFactory opens one backend with its decoded table.
func openFactory(ctx context.Context, name string, f backend.Factory, cfg *Config, logger *slog.Logger) (backend.Backend, error) {
	var table any
	if f.NewConfig != nil {
		table = cfg.BackendConfig(name)
		if table == nil {
			table = f.NewConfig()
		}
	}
	b, err := f.Open(ctx, backend.OpenRequest{Table: table, Settings: settings{cfg}, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("open backend %s: %w", name, err)
	}
	return b, nil
}
