package config

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The runtime a sandbox asks for: its entry's key, else [sandbox] runtime,
// else OpenSandbox's [secure_runtime] type, which becomes its engine name
// (docker_runtime, k8s_runtime_class) on a backend of that kind.
func TestEntryRuntime(t *testing.T) {
	r := NewRegistry()
	open := func(context.Context, backend.OpenRequest) (backend.Backend, error) {
		return &fakeBackend{name: "x"}, nil
	}
	r.Register(backend.Factory{Name: "dock", RuntimeKind: backend.RuntimeKindDocker, Open: open})
	r.Register(backend.Factory{Name: "kube", RuntimeKind: backend.RuntimeKindKubernetes, Open: open})
	r.Register(backend.Factory{Name: "plain", Open: open})
	secure := "[secure_runtime]\ntype = \"gvisor\"\ndocker_runtime = \"runsc-custom\"\nk8s_runtime_class = \"gvisor-class\"\n"
	for _, c := range []struct {
		name, toml string
		want       map[string]string // entry -> Spec.Runtime
	}{
		{"entry, else [sandbox]", "[sandbox]\nbackend = \"dock\"\nruntime = \"gvisor\"\n[sandbox.sandboxes.a]\nruntime = \"runc\"\n[sandbox.sandboxes.b]\n",
			map[string]string{"a": "runc", "b": "gvisor"}},
		{"secure_runtime on a Docker engine", secure + "[sandbox]\nbackend = \"dock\"\n[sandbox.sandboxes.a]\n[sandbox.sandboxes.b]\nruntime = \"runc\"\n",
			map[string]string{"a": "runsc-custom", "b": "runc"}},
		{"secure_runtime on Kubernetes", secure + "[sandbox]\nbackend = \"kube\"\n[sandbox.sandboxes.a]\n",
			map[string]string{"a": "gvisor-class"}},
		{"secure_runtime elsewhere: its type", secure + "[sandbox]\nbackend = \"plain\"\n[sandbox.sandboxes.a]\n",
			map[string]string{"a": "gvisor"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := r.ParseConfig([]byte(c.toml), "sandbox.toml")
			require.NoError(t, err)
			for entry, want := range c.want {
				spec, err := cfg.Spec(entry)
				require.NoError(t, err)
				assert.Equal(t, want, spec.Runtime, entry)
			}
		})
	}
}

// A [secure_runtime] table is checked like ours: an unknown type or key is
// refused naming it.
func TestSecureRuntimeRefused(t *testing.T) {
	for _, c := range []struct{ toml, want string }{
		{"[secure_runtime]\ntype = \"vm\"\n", `secure_runtime.type: unknown type "vm" (want gvisor, kata or firecracker)`},
		{"[secure_runtime]\ntype = \"gvisor\"\ndocker_runtim = \"runsc\"\n", `unknown key "secure_runtime.docker_runtim" (did you mean "docker_runtime"?)`},
		{"secure_runtime = \"gvisor\"\n", "secure_runtime: want a table"},
	} {
		_, err := testRegistry(nil).ParseConfig([]byte(c.toml), "sandbox.toml")
		require.ErrorIs(t, err, backend.ErrInvalidConfig, c.toml)
		assert.True(t, strings.Contains(err.Error(), c.want), "%q does not contain %q", err, c.want)
	}
}
