// Package catalog is the one list of the backends sandboxkit builds in, in
// the manner of Nomad's plugin catalog. It is the only package of the
// module that imports every backend: the root package's default registry,
// sbx-full, and the tests that need the real backends all take the list
// from here, so adding a backend touches its own folder and one line below
// (or in catalog/core, the part sbx links, for a backend that starts fast).
//
// Initializers are wired the same way: the built-in ones are
// initializers.Builtins, and an initializer in a package of its own
// registers itself (initializers.Register, from its init function), so
// linking it takes one blank import in the list below.
package catalog

import (
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/catalog/core"
	"github.com/sandboxkit/sandboxkit/config"
	// Initializers in packages of their own go here, as blank imports.
)

// Backends registers the built-in backends in r: those of catalog/core and
// k8s. Each backend's Factory owns its settings table, the [extra] keys it
// reads and how it opens.
func Backends(r *config.Registry) {
	core.Backends(r)
	r.Register(k8s.Factory)
}
