package k8s

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Entry [extra] keys the k8s backend reads (OpenSage's places for them,
// each under either name), when [sandbox.k8s] leaves the setting empty.
// They may also sit in a nested extra.k8s table.
var entryExtraKeys = []struct {
	keys []string
	set  func(*Config) *string
}{
	{[]string{"namespace", "k8s_namespace"}, func(c *Config) *string { return &c.Namespace }},
	{[]string{"k8s_context", "context"}, func(c *Config) *string { return &c.Context }},
	{[]string{"kubeconfig"}, func(c *Config) *string { return &c.Kubeconfig }},
}

// Factory opens the k8s backend from a config file's [sandbox.k8s] table.
// Settings it leaves empty come from OpenSage's places: the entries'
// extra.namespace (or k8s_namespace), extra.k8s_context (or context) and
// extra.kubeconfig (or the same keys under extra.k8s; one backend serves one
// namespace and context, so entries that set one must agree), then
// [sandbox] tolerations, else the entries' extra.tolerations (which apply
// to every pod, as OpenSage's session pod is one, so entries that set them
// must agree). kubeconfig and sbxd_path resolve like the file's other host
// paths.
var Factory = backend.Factory{
	Name:        Name,
	RuntimeKind: backend.RuntimeKindKubernetes,
	NewConfig:   func() any { return new(Config) },
	Open:        openFromConfig,
	EntryExtraKeys: []string{"namespace", "k8s_namespace", "k8s_context", "context", "kubeconfig",
		"tolerations", "k8s"},
}

func openFromConfig(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
	c, err := backend.TableAs[Config](Name, req.Table)
	if err != nil {
		return nil, err
	}
	for _, x := range entryExtraKeys {
		if dst := x.set(&c); *dst == "" {
			if *dst, err = agreedExtra(req.Settings, x.keys...); err != nil {
				return nil, err
			}
		}
	}
	if err := backend.ResolveHostPaths(req.Settings,
		backend.HostPathField{Key: "sandbox.k8s.kubeconfig", Path: &c.Kubeconfig},
		backend.HostPathField{Key: "sandbox.k8s.sbxd_path", Path: &c.SbxdPath}); err != nil {
		return nil, err
	}
	if tol := req.Settings.Tolerations(); len(c.Tolerations) == 0 && len(tol) > 0 {
		if c.Tolerations, err = TolerationsFromMaps(tol); err != nil {
			return nil, err
		}
	}
	if len(c.Tolerations) == 0 {
		if c.Tolerations, err = entryTolerations(req.Settings); err != nil {
			return nil, err
		}
	}
	return New(c, WithLogger(req.Logger))
}

// agreedExtra is the value the entries give extra.KEY (or extra.k8s.KEY)
// under any of keys (names of one setting), "" when none does; entries that
// disagree are an error.
func agreedExtra(s backend.Settings, keys ...string) (string, error) {
	key := keys[0]
	values := map[string]string{} // entry -> value
	for _, k := range keys {
		for name, v := range s.Extras(k) {
			if str, ok := v.(string); ok && str != "" {
				if _, seen := values[name]; !seen {
					values[name] = str
				}
			}
		}
	}
	for name, sub := range s.Extras("k8s") {
		if _, direct := values[name]; direct {
			continue
		}
		if m, ok := sub.(map[string]any); ok {
			for _, k := range keys {
				if str, ok := m[k].(string); ok && str != "" {
					values[name] = str
					break
				}
			}
		}
	}
	val, from := "", ""
	for _, name := range slices.Sorted(maps.Keys(values)) {
		v := values[name]
		if val != "" && v != val {
			return "", backend.InvalidConfigf("sandbox.sandboxes.%s.extra.%s = %q differs from %q in entry %s: the k8s backend uses one %s for every entry (set it once in [sandbox.k8s])",
				name, key, v, val, from, key)
		}
		val, from = v, name
	}
	return val, nil
}

// entryTolerations are the tolerations the entries' extra.tolerations give
// (nil when none does): every entry that sets them must set the same ones.
func entryTolerations(s backend.Settings) ([]Toleration, error) {
	var (
		out  []Toleration
		from string
	)
	for _, name := range slices.Sorted(maps.Keys(s.Extras("tolerations"))) {
		v := s.Extras("tolerations")[name]
		var ms []map[string]any
		switch v := v.(type) {
		case []map[string]any:
			ms = v
		case []any:
			for _, x := range v {
				m, ok := x.(map[string]any)
				if !ok {
					return nil, backend.InvalidConfigf("sandbox.sandboxes.%s.extra.tolerations: want an array of tables, got an element of %T", name, x)
				}
				ms = append(ms, m)
			}
		default:
			return nil, backend.InvalidConfigf("sandbox.sandboxes.%s.extra.tolerations: want an array of tables, got %T", name, v)
		}
		tol, err := TolerationsFromMaps(ms)
		if err != nil {
			return nil, fmt.Errorf("sandbox.sandboxes.%s.extra: %w", name, err)
		}
		if from != "" && !reflect.DeepEqual(tol, out) {
			return nil, backend.InvalidConfigf("sandbox.sandboxes.%s.extra.tolerations differ from entry %s's: the k8s backend gives every pod the same tolerations (set them once as [sandbox] tolerations)", name, from)
		}
		out, from = tol, name
	}
	return out, nil
}
