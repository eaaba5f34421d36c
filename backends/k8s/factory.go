package k8s

import (
	"context"
	"maps"
	"slices"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Entry [extra] keys the k8s backend reads (OpenSage's places for them),
// when [sandbox.k8s] leaves the setting empty. They may also sit in a
// nested extra.k8s table.
var entryExtraKeys = []struct {
	key string
	set func(*Config) *string
}{
	{"namespace", func(c *Config) *string { return &c.Namespace }},
	{"k8s_context", func(c *Config) *string { return &c.Context }},
	{"kubeconfig", func(c *Config) *string { return &c.Kubeconfig }},
}

// Factory opens the k8s backend from a config file's [sandbox.k8s] table.
// Settings it leaves empty come from OpenSage's places: the entries'
// extra.namespace, extra.k8s_context and extra.kubeconfig (or the same keys
// under extra.k8s; one backend serves one namespace and context, so entries
// that set one must agree) and [sandbox] tolerations. kubeconfig and
// sbxd_path resolve like the file's other host paths.
var Factory = backend.Factory{
	Name:           Name,
	NewConfig:      func() any { return new(Config) },
	Open:           openFromConfig,
	EntryExtraKeys: []string{"namespace", "k8s_context", "kubeconfig", "k8s"},
}

func openFromConfig(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
	c, err := backend.TableAs[Config](Name, req.Table)
	if err != nil {
		return nil, err
	}
	for _, x := range entryExtraKeys {
		if dst := x.set(&c); *dst == "" {
			if *dst, err = agreedExtra(req.Settings, x.key); err != nil {
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
	return New(c, WithLogger(req.Logger))
}

// agreedExtra is the value the entries give extra.KEY (or extra.k8s.KEY),
// "" when none does; entries that disagree are an error.
func agreedExtra(s backend.Settings, key string) (string, error) {
	values := map[string]string{} // entry -> value
	for name, v := range s.Extras(key) {
		if str, ok := v.(string); ok && str != "" {
			values[name] = str
		}
	}
	for name, sub := range s.Extras("k8s") {
		if _, direct := values[name]; direct {
			continue
		}
		if m, ok := sub.(map[string]any); ok {
			if str, ok := m[key].(string); ok && str != "" {
				values[name] = str
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
