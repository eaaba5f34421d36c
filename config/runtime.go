package config

import (
	"cmp"
	"slices"

	"github.com/BurntSushi/toml"

	"github.com/sandboxkit/sandboxkit/backend"
)

// SecureRuntime is OpenSandbox's root [secure_runtime] table, read so that
// its configs keep their meaning: Type ("gvisor", "kata" or
// "firecracker") is the runtime of every sandbox without a runtime key of
// its own, DockerRuntime the name a Docker engine knows that runtime by
// (native, remotedocker) and K8sRuntimeClass the RuntimeClass that gives
// it on Kubernetes (k8s).
type SecureRuntime struct {
	Type            string `toml:"type"`
	DockerRuntime   string `toml:"docker_runtime"`
	K8sRuntimeClass string `toml:"k8s_runtime_class"`
}

// SecureRuntime returns the root [secure_runtime] table (zero when the
// file has none).
func (c *Config) SecureRuntime() SecureRuntime { return c.secure }

// secureTypes are the types [secure_runtime] takes.
var secureTypes = []string{backend.RuntimeGVisor, backend.RuntimeKata, backend.RuntimeFirecracker}

// decodeSecureRuntime decodes the root [secure_runtime] table, with ${VAR}
// templates, into p.cfg.secure.
func (p *parser) decodeSecureRuntime(doc map[string]any) {
	switch v := doc["secure_runtime"].(type) {
	case nil:
		return
	case map[string]any:
		p.decodeStrict(v, toml.Key{"secure_runtime"}, &p.cfg.secure, nil)
	default:
		p.errorf("secure_runtime", "want a table, got %s", describeValue(v))
		return
	}
	if t := p.cfg.secure.Type; t != "" && !slices.Contains(secureTypes, t) {
		p.errorf("secure_runtime.type", "unknown type %q (want gvisor, kata or firecracker)", t)
	}
}

// entryRuntime is the runtime e's sandbox asks its backend for: its own
// runtime key, else [sandbox] runtime, else [secure_runtime] type; the
// secure runtime's type becomes the engine's name for it on a backend
// whose runtime names are a Docker engine's (docker_runtime) or
// Kubernetes RuntimeClasses (k8s_runtime_class), when the table gives one.
func (c *Config) entryRuntime(e *Entry) string {
	rt := cmp.Or(e.Runtime, c.Sandbox.Runtime, c.secure.Type)
	if rt == "" || rt != c.secure.Type {
		return rt
	}
	if _, f, ok := c.selectedFactory(); ok {
		switch f.RuntimeKind {
		case backend.RuntimeKindDocker:
			return cmp.Or(c.secure.DockerRuntime, rt)
		case backend.RuntimeKindKubernetes:
			return cmp.Or(c.secure.K8sRuntimeClass, rt)
		}
	}
	return rt
}
