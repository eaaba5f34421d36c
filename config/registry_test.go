package config

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// fakeBackend is the least backend.Backend: registry tests only check what
// reaches the factory, so no sandbox is ever made.
type fakeBackend struct{ name string }

func (f *fakeBackend) Name() string { return f.name }
func (f *fakeBackend) Create(context.Context, backend.Spec) (backend.Sandbox, error) {
	return nil, errors.ErrUnsupported
}
func (f *fakeBackend) Get(context.Context, string) (backend.Sandbox, error) {
	return nil, backend.ErrNotFound
}
func (f *fakeBackend) List(context.Context, backend.Filter) ([]backend.Info, error) { return nil, nil }
func (f *fakeBackend) Capabilities() backend.Capabilities                           { return backend.Capabilities{} }
func (f *fakeBackend) Close() error                                                 { return nil }

// fakeConfig is a backend's settings table for the fake factories.
type fakeConfig struct {
	Endpoint string        `toml:"endpoint"`
	Retries  int           `toml:"retries"`
	Verbose  bool          `toml:"verbose"`
	Nested   fakeSubConfig `toml:"nested"`
}

type fakeSubConfig struct {
	Zone string `toml:"zone"`
}

// opened records what the fake factory's Open received.
type opened struct {
	settings   backend.Settings
	backendCfg any
	logger     *slog.Logger
}

func fakeFactory(name string, got *opened, aliases ...string) backend.Factory {
	return backend.Factory{
		Name:      name,
		Aliases:   aliases,
		NewConfig: func() any { return new(fakeConfig) },
		Open: func(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
			if got != nil {
				*got = opened{req.Settings, req.Table, req.Logger}
			}
			return &fakeBackend{name: name}, nil
		},
	}
}

// testRegistry has "local", "native" and "fake" (alias "fake-alias")
// backends made of fakes, and "nitrobox" planned.
func testRegistry(got *opened) *Registry {
	r := NewRegistry()
	r.Register(backend.Factory{Name: "local", Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
		return &fakeBackend{name: "local"}, nil
	}})
	r.Register(backend.Factory{Name: "native", Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
		return &fakeBackend{name: "native"}, nil
	}})
	r.Register(fakeFactory("fake", got, "fake-alias"))
	r.Plan("nitrobox")
	return r
}

func TestRegisterPanics(t *testing.T) {
	open := func(context.Context, backend.OpenRequest) (backend.Backend, error) { return nil, nil }
	tests := []struct {
		name string
		do   func(r *Registry)
	}{
		{"duplicate", func(r *Registry) { r.Register(backend.Factory{Name: "local", Open: open}) }},
		{"empty name", func(r *Registry) { r.Register(backend.Factory{Open: open}) }},
		{"nil Open", func(r *Registry) { r.Register(backend.Factory{Name: "other"}) }},
		{"clashes with a [sandbox] key", func(r *Registry) { r.Register(backend.Factory{Name: "paths", Open: open}) }},
		{"name taken by an alias", func(r *Registry) { r.Register(backend.Factory{Name: "fake-alias", Open: open}) }},
		{"alias clashes with a [sandbox] key", func(r *Registry) {
			r.Register(backend.Factory{Name: "other", Aliases: []string{"tools"}, Open: open})
		}},
		{"alias taken by a name", func(r *Registry) { r.Register(backend.Factory{Name: "other", Aliases: []string{"fake"}, Open: open}) }},
		{"empty alias", func(r *Registry) { r.Register(backend.Factory{Name: "other", Aliases: []string{""}, Open: open}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRegistry(nil)
			assert.Panics(t, func() { tt.do(r) })
		})
	}
}

func TestLookup(t *testing.T) {
	r := testRegistry(nil)
	r.Register(fakeFactory("zeta", nil))
	r.Register(fakeFactory("alpha", nil, "agentdocker-alpha"))

	assert.Equal(t, []string{"alpha", "fake", "local", "native", "zeta"}, r.Names(), "sorted, aliases left out")

	_, err := r.Lookup("dokcer")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.EqualError(t, err, `unknown backend "dokcer" (known: alpha, fake, local, native, zeta)`)

	_, err = r.Lookup("nitrobox")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.EqualError(t, err, `backend "nitrobox" is not built into this version of sandboxkit (known: alpha, fake, local, native, zeta)`)

	f, err := r.Lookup("agentdocker-alpha")
	require.NoError(t, err)
	b, err := f.Open(context.Background(), backend.OpenRequest{})
	require.NoError(t, err)
	assert.Equal(t, "alpha", b.Name(), "an alias finds its backend")
}

func TestRegistryOpen(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		toml     string
		override string // set cfg.Sandbox.Backend after loading, as sbx --backend does
		want     string // backend opened
		wantCfg  any    // what reached the factory as backendCfg
		wantErr  string
	}{
		{name: "absent backend is native", toml: "[sandbox]\n", want: "native"},
		{name: "decoded table reaches the factory",
			toml: "[sandbox]\nbackend = \"fake\"\n[sandbox.fake]\nendpoint = \"https://x\"\nretries = 3\n[sandbox.fake.nested]\nzone = \"eu\"\n",
			want: "fake", wantCfg: &fakeConfig{Endpoint: "https://x", Retries: 3, Nested: fakeSubConfig{Zone: "eu"}}},
		{name: "no table gives a zero config", toml: "[sandbox]\nbackend = \"fake\"\n",
			want: "fake", wantCfg: &fakeConfig{}},
		{name: "alias as backend and as table name",
			toml: "[sandbox]\nbackend = \"fake-alias\"\n[sandbox.fake-alias]\nretries = 2\n",
			want: "fake", wantCfg: &fakeConfig{Retries: 2}},
		{name: "override after load uses the table decoded at load",
			toml:     "[sandbox]\n[sandbox.fake]\nverbose = true\n",
			override: "fake", want: "fake", wantCfg: &fakeConfig{Verbose: true}},
		{name: "planned backend loads but does not open", toml: "[sandbox]\nbackend = \"nitrobox\"\n",
			wantErr: `backend "nitrobox" is not built into this version of sandboxkit (known: fake, local, native)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got opened
			r := testRegistry(&got)
			cfg, err := r.ParseConfig([]byte(tt.toml), "sandbox.toml")
			require.NoError(t, err)
			if tt.override != "" {
				cfg.Sandbox.Backend = tt.override
			}
			b, err := r.Open(ctx, cfg, nil)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, backend.ErrInvalidConfig)
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, b.Name())
			if tt.want == "fake" {
				assert.Equal(t, tt.wantCfg, got.backendCfg)
				assert.Equal(t, settings{cfg}, got.settings)
				assert.NotNil(t, got.logger, "a nil logger is replaced by a discarding one")
			}
		})
	}
}

func TestRegistryOpenErrors(t *testing.T) {
	r := NewRegistry()
	r.Register(backend.Factory{Name: "broken", Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
		return nil, backend.ErrUnavailable
	}})
	cfg, err := r.ParseConfig([]byte("[sandbox]\nbackend = \"broken\"\n"), "")
	require.NoError(t, err)
	_, err = r.Open(context.Background(), cfg, nil)
	require.ErrorIs(t, err, backend.ErrUnavailable)
	assert.EqualError(t, err, "open backend broken: backend unavailable")

	_, err = r.Open(context.Background(), nil, nil)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
}

func TestBackendTables(t *testing.T) {
	tests := []struct {
		name     string
		toml     string
		wantErr  string
		wantWarn []string
	}{
		{name: "misspelt key in a backend table",
			toml:    "[sandbox.fake]\nendpiont = \"x\"\n",
			wantErr: `config sandbox.toml: unknown key "sandbox.fake.endpiont" (did you mean "endpoint"?)`},
		{name: "misspelt key in a nested backend table",
			toml:    "[sandbox.fake.nested]\nzome = \"x\"\n",
			wantErr: `config sandbox.toml: unknown key "sandbox.fake.nested.zome" (did you mean "zone"?)`},
		{name: "wrong type in a backend table",
			toml:    "[sandbox.fake]\nretries = \"many\"\n",
			wantErr: `config sandbox.toml: sandbox.fake.retries: want an integer, got "many"`},
		{name: "backend without settings",
			toml:    "[sandbox.local]\nx = 1\n",
			wantErr: `config sandbox.toml: sandbox.local: the local backend takes no settings (remove the table)`},
		{name: "table under both name and alias",
			toml:    "[sandbox.fake]\n[sandbox.fake-alias]\n",
			wantErr: `config sandbox.toml: sandbox.fake-alias: [sandbox.fake] and [sandbox.fake-alias] both configure the fake backend (keep one)`},
		{name: "planned backend tables are accepted unchecked",
			toml: "[sandbox.nitrobox]\ndomian = \"x\"\n",
			wantWarn: []string{
				"sandbox.nitrobox: not checked: the nitrobox backend is not built into this version of sandboxkit",
			}},
		{name: "misspelt planned backend table",
			toml:    "[sandbox.nitrobx]\ndomain = \"x\"\n",
			wantErr: `config sandbox.toml: unknown key "sandbox.nitrobx" (did you mean "nitrobox"?)`},
		{name: "templates expand in backend tables",
			toml: "ZONE = \"eu\"\n[sandbox.fake.nested]\nzone = \"${ZONE}\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := testRegistry(nil)
			cfg, err := r.ParseConfig([]byte(tt.toml), "sandbox.toml")
			if tt.wantErr != "" {
				require.ErrorIs(t, err, backend.ErrInvalidConfig)
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantWarn, cfg.Warnings)
		})
	}
}
