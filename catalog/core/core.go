// Package core is the part of the catalog that sbx links: the backends
// whose libraries start fast. The k8s backend (client-go and the
// Kubernetes API packages) is only named here, as a backend another build
// links (config.Registry.Elsewhere): sbx hands a config that uses it over
// to sbx-full, which links package catalog, the whole list.
package core

import (
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
	"github.com/sandboxkit/sandboxkit/config"
)

// Backends registers the backends of this part in r. Keep the list sorted.
func Backends(r *config.Registry) {
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

// K8s is what a build without the k8s backend knows of it: its name and
// [extra] keys (catalog's tests hold it equal to k8s.Factory's).
var K8s = backend.Factory{
	Name: "k8s",
	EntryExtraKeys: []string{"namespace", "k8s_namespace", "k8s_context", "context", "kubeconfig",
		"tolerations", "k8s"},
}

// Elsewhere names in r the backends that only package catalog links.
func Elsewhere(r *config.Registry) { r.Elsewhere(K8s) }
