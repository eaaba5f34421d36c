package config

import (
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"

	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
)

// builtinRegistry has the real built-in backends, as sandboxkit's catalog
// (registry.go) wires them; this package's tests cannot import the root
// package, which imports this one.
var builtinRegistry = sync.OnceValue(func() *Registry {
	r := NewRegistry()
	for _, f := range builtinFactories {
		r.Register(f)
	}
	r.Plan("nitrobox")
	return r
})

var builtinFactories = []backend.Factory{k8s.Factory, lite.Factory, local.Factory, native.Factory, opensandbox.Factory, remotedocker.Factory}
