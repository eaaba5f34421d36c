package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// builds returns a registry of a full build (both backends linked) and one
// of a lean build (cluster only elsewhere), as sbx-full and sbx have.
func builds() (full, lean *Registry) {
	cluster := fakeFactory("cluster", nil, "kube")
	cluster.EntryExtraKeys = []string{"namespace"}
	full, lean = NewRegistry(), NewRegistry()
	for _, r := range []*Registry{full, lean} {
		r.Register(fakeFactory("plain", nil))
	}
	full.Register(cluster)
	lean.Elsewhere(backend.Factory{Name: cluster.Name, Aliases: cluster.Aliases, EntryExtraKeys: cluster.EntryExtraKeys})
	return full, lean
}

// A file that selects or configures a backend of the other build is handed
// over (whatever else is wrong in it: the other build says that); one that
// does not parses the same in both builds, messages and warnings alike.
func TestElsewhere(t *testing.T) {
	full, lean := builds()
	handedOver := []struct{ name, file string }{
		{"selected", "[sandbox]\nbackend = \"cluster\"\n"},
		{"by an alias", "[sandbox]\nbackend = \"kube\"\n"},
		{"its table", "[sandbox]\nbackend = \"plain\"\n[sandbox.cluster]\nendpoint = \"x\"\n"},
		{"its table by an alias", "[sandbox]\nbackend = \"plain\"\n[sandbox.kube]\nendpoint = \"x\"\n"},
		{"with other errors", "[sandbox]\nbackend = \"cluster\"\nno_such_key = 1\n[sandbox.plain]\nretries = \"many\"\n"},
	}
	for _, c := range handedOver {
		t.Run(c.name, func(t *testing.T) {
			_, err := lean.ParseConfig([]byte(c.file), "x.toml")
			ee, ok := errors.AsType[*ElsewhereError](err)
			require.True(t, ok, "want an ElsewhereError, got %v", err)
			assert.Equal(t, "cluster", ee.Backend)
			assert.ErrorIs(t, err, backend.ErrInvalidConfig)
			_, ferr := full.ParseConfig([]byte(c.file), "x.toml")
			_, fok := errors.AsType[*ElsewhereError](ferr)
			assert.False(t, fok, "the full build handed over: %v", ferr)
		})
	}

	same := []string{
		"[sandbox]\nbackend = \"clustr\"\n",
		"[sandbox]\nbackend = \"plain\"\n[sandbox.sandboxes.main]\nimage = \"busybox\"\n[sandbox.sandboxes.main.extra]\nnamespace = \"ns\"\n",
		"[sandbox]\nbackend = \"plain\"\n[sandbox.clustr]\nendpoint = \"x\"\n",
	}
	for _, file := range same {
		fcfg, ferr := full.ParseConfig([]byte(file), "x.toml")
		lcfg, lerr := lean.ParseConfig([]byte(file), "x.toml")
		if ferr != nil || lerr != nil {
			require.Error(t, ferr, file)
			require.Error(t, lerr, file)
			assert.Equal(t, ferr.Error(), lerr.Error(), file)
			continue
		}
		assert.Equal(t, fcfg.Warnings, lcfg.Warnings, file)
		for _, name := range fcfg.SandboxNames() {
			assert.Equal(t, fcfg.ExtraWarnings(name, "the main initializer", nil, nil), lcfg.ExtraWarnings(name, "the main initializer", nil, nil), file)
			assert.NotEmpty(t, lcfg.ExtraWarnings(name, "the main initializer", nil, nil), "the cluster backend's key is ignored under plain")
		}
	}
	_, err := lean.ParseConfig([]byte(same[0]), "x.toml")
	assert.ErrorContains(t, err, `did you mean "cluster"`)

	cfg, err := lean.ParseConfig([]byte("[sandbox]\nbackend = \"plain\"\n"), "x.toml")
	require.NoError(t, err)
	_, ok := errors.AsType[*ElsewhereError](cfg.SetBackend("kube"))
	assert.True(t, ok, "SetBackend to the other build's backend")
	assert.Equal(t, "plain", cfg.Sandbox.Backend, "a refused SetBackend changes nothing")
	_, err = lean.Lookup("cluster")
	_, ok = errors.AsType[*ElsewhereError](err)
	assert.True(t, ok, "Lookup: %v", err)
	assert.Equal(t, []string{"plain"}, lean.Names(), "Names lists what is linked")
	assert.Panics(t, func() { lean.Elsewhere(backend.Factory{Name: "plain"}) })
}
