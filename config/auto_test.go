package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// isolatedBackend is a fake whose capabilities report isolation.
type isolatedBackend struct {
	fakeBackend
	iso backend.Isolation
}

func (b *isolatedBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: b.iso}
}

// autoRegistry has three auto candidates: "strong" (rank 30) and "medium"
// (rank 20), which work only when the matching flag is set, and "weak"
// (rank 10, no isolation), which always works.
func autoRegistry(strongUp, mediumUp *bool) *Registry {
	r := NewRegistry()
	r.Register(backend.Factory{Name: "strong", AutoRank: 30,
		Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
			return &isolatedBackend{fakeBackend{"strong"}, backend.IsolationContainer}, nil
		},
		Probe: func(context.Context, backend.Backend) error {
			if !*strongUp {
				return errors.New("daemon does not answer")
			}
			return nil
		}})
	r.Register(backend.Factory{Name: "medium", AutoRank: 20,
		Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
			if !*mediumUp {
				return nil, errors.New("no runtime")
			}
			return &isolatedBackend{fakeBackend{"medium"}, backend.IsolationContainer}, nil
		}})
	r.Register(backend.Factory{Name: "weak", AutoRank: 10,
		Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
			return &isolatedBackend{fakeBackend{"weak"}, backend.IsolationNone}, nil
		}})
	r.Register(backend.Factory{Name: "native", Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) {
		return nil, errors.New("not an auto candidate")
	}})
	return r
}

func TestAutoBackend(t *testing.T) {
	record := filepath.Join(t.TempDir(), "auto.json")
	t.Setenv(EnvAutoRecord, record)
	ctx := context.Background()
	strong, medium := false, true
	r := autoRegistry(&strong, &medium)
	open := func(t *testing.T) (*Config, backend.Backend, error) {
		t.Helper()
		cfg, err := r.ParseConfig([]byte("[sandbox]\nbackend = \"auto\"\n"), "sandbox.toml")
		require.NoError(t, err)
		b, err := cfg.Open(ctx, nil)
		return cfg, b, err
	}

	// Without the strongest, the next one, named, with no notice.
	cfg, b, err := open(t)
	require.NoError(t, err)
	assert.Equal(t, "medium", b.Name())
	assert.Equal(t, "medium", cfg.Chosen)
	assert.NotContains(t, cfg.Warnings, LocalNotice)
	assert.FileExists(t, record)

	// Stronger isolation appears: auto moves up.
	strong = true
	_, b, err = open(t)
	require.NoError(t, err)
	assert.Equal(t, "strong", b.Name())

	// It goes away again: auto refuses instead of falling back.
	strong = false
	_, _, err = open(t)
	require.ErrorIs(t, err, backend.ErrUnavailable)
	assert.ErrorContains(t, err, "backend auto chose strong on this machine before")
	assert.ErrorContains(t, err, "daemon does not answer")
	assert.ErrorContains(t, err, "--backend medium")

	// With the record gone, it chooses afresh; with nothing isolated, local
	// with the notice.
	require.NoError(t, os.Remove(record))
	medium = false
	cfg, b, err = open(t)
	require.NoError(t, err)
	assert.Equal(t, "weak", b.Name())
	assert.Contains(t, cfg.Warnings, LocalNotice)
}

func TestAutoIsReserved(t *testing.T) {
	assert.Panics(t, func() {
		NewRegistry().Register(backend.Factory{Name: "auto", Open: func(context.Context, backend.OpenRequest) (backend.Backend, error) { return nil, nil }})
	})
}
