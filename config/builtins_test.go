package config

import "sync"

// registerCatalog registers the real built-in backends, as package catalog
// lists them. This package's own tests cannot import the catalog (it
// imports this package), so its external tests (catalog_test.go) set it
// from their init function, which runs before any test.
var registerCatalog func(*Registry)

// builtinRegistry has the backends of the catalog.
var builtinRegistry = sync.OnceValue(func() *Registry {
	if registerCatalog == nil {
		panic("config tests: registerCatalog is unset (catalog_test.go sets it)")
	}
	r := NewRegistry()
	registerCatalog(r)
	return r
})

// SetCatalog is how catalog_test.go, an external test, sets registerCatalog.
func SetCatalog(f func(*Registry)) { registerCatalog = f }
