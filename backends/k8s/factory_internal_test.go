package k8s

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// extrasSettings is a backend.Settings holding only entries' [extra]
// tables (entry name -> table).
type extrasSettings map[string]map[string]any

func (s extrasSettings) HostPath(_, p string) (string, error) { return p, nil }
func (extrasSettings) DefaultImage() string                   { return "" }
func (extrasSettings) DockerHost() string                     { return "" }
func (extrasSettings) DockerRemoteHost() string               { return "" }
func (extrasSettings) Tolerations() []map[string]any          { return nil }
func (s extrasSettings) Extras(key string) map[string]any {
	out := map[string]any{}
	for name, extra := range s {
		if v, ok := extra[key]; ok {
			out[name] = v
		}
	}
	return out
}

var _ backend.Settings = extrasSettings{}

// OpenSage's k8s extras under either name; entries must agree.
func TestEntryExtras(t *testing.T) {
	s := extrasSettings{
		"main":  {"k8s_namespace": "agents", "context": "kind-dev"},
		"neo4j": {"namespace": "agents", "k8s_context": "kind-dev"},
		"joern": {"k8s": map[string]any{"k8s_namespace": "agents"}},
	}
	ns, err := agreedExtra(s, "namespace", "k8s_namespace")
	require.NoError(t, err)
	assert.Equal(t, "agents", ns)
	ctx, err := agreedExtra(s, "k8s_context", "context")
	require.NoError(t, err)
	assert.Equal(t, "kind-dev", ctx)

	s["other"] = map[string]any{"k8s_namespace": "elsewhere"}
	_, err = agreedExtra(s, "namespace", "k8s_namespace")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `differs from "agents"`)
}

func TestEntryTolerations(t *testing.T) {
	tol := []map[string]any{{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}}
	got, err := entryTolerations(extrasSettings{"main": {"tolerations": tol}, "neo4j": {}})
	require.NoError(t, err)
	assert.Equal(t, []Toleration{{Key: "gpu", Operator: "Exists", Effect: "NoSchedule"}}, got)

	// As TOML decodes an array of inline tables into an untyped table.
	got, err = entryTolerations(extrasSettings{"main": {"tolerations": []any{map[string]any{"key": "a", "operator": "Exists"}}}})
	require.NoError(t, err)
	assert.Equal(t, []Toleration{{Key: "a", Operator: "Exists"}}, got)

	_, err = entryTolerations(extrasSettings{"a": {"tolerations": tol}, "b": {"tolerations": []map[string]any{{"key": "other", "operator": "Exists"}}}})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, "sandbox.sandboxes.b.extra.tolerations differ from entry a's")

	_, err = entryTolerations(extrasSettings{"a": {"tolerations": "gpu"}})
	assert.ErrorContains(t, err, "sandbox.sandboxes.a.extra.tolerations: want an array of tables")
	none, err := entryTolerations(extrasSettings{})
	require.NoError(t, err)
	assert.Nil(t, none)
}
