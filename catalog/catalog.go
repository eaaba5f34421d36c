// Package catalog is the one list of the backends sandboxkit builds in, in
// the manner of Nomad's plugin catalog. It is the only package of the
// module that imports every backend: the root package's default registry,
// sbx, and the tests that need the real backends all take the list from
// here, so adding a backend touches its own folder and one line below.
//
// Initializers are wired the same way: the built-in ones are
// initializers.Builtins, and an initializer in a package of its own
// registers itself (initializers.Register, from its init function), so
// linking it takes one blank import in the list below.
package catalog

import (
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
	"github.com/sandboxkit/sandboxkit/config"
	// Initializers in packages of their own go here, as blank imports.
)

// Backends registers the built-in backends in r. Each backend's Factory
// owns its settings table, the [extra] keys it reads and how it opens.
// Keep the list sorted.
func Backends(r *config.Registry) {
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
