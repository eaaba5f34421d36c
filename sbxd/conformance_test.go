package sbxd_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// The conformance suite and the fileops table through the sbxd client on
// the local backend; the native ones are in native_test.go.
func TestConformanceLocal(t *testing.T) {
	b := newLocal(t)
	log := noWarnings(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return sbxd.WrapBackend(b, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(log))
	})
}

func TestFileopsLocal(t *testing.T) {
	c, _ := createLocal(t)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return c })
}

// WrapBackend claims exactly the backend-level capabilities of the backend
// it wraps: AsBackend finds local's (none) through it, and finds a wrapped
// backend's VolumeManager and NetworkManager.
func TestWrapBackendCapabilitiesTruthful(t *testing.T) {
	local := newLocal(t)
	w := sbxd.WrapBackend(local)
	_, innerVols := any(local).(backend.VolumeManager)
	_, vols := backend.AsBackend[backend.VolumeManager](w)
	require.Equal(t, innerVols, vols, "volumes through the wrapper")
	_, innerNets := any(local).(backend.NetworkManager)
	_, nets := backend.AsBackend[backend.NetworkManager](w)
	require.Equal(t, innerNets, nets, "networks through the wrapper")

	m := managerBackend{Backend: local}
	w = sbxd.WrapBackend(m)
	vm, ok := backend.AsBackend[backend.VolumeManager](w)
	require.True(t, ok, "a wrapped VolumeManager is found")
	require.Equal(t, backend.VolumeManager(m), vm)
	_, ok = backend.AsBackend[backend.NetworkManager](w)
	require.True(t, ok, "a wrapped NetworkManager is found")
}

// managerBackend adds (inert) volume and network managers to a backend.
type managerBackend struct{ backend.Backend }

func (managerBackend) CreateVolume(context.Context, backend.VolumeSpec) (string, error) {
	return "", nil
}
func (managerBackend) RemoveVolume(context.Context, string) error { return nil }
func (managerBackend) ListVolumes(context.Context, backend.Filter) ([]backend.VolumeInfo, error) {
	return nil, nil
}
func (managerBackend) CreateNetwork(context.Context, backend.NetworkSpec) (string, error) {
	return "", nil
}
func (managerBackend) RemoveNetwork(context.Context, string) error { return nil }
func (managerBackend) ListNetworks(context.Context, backend.Filter) ([]backend.NetworkInfo, error) {
	return nil, nil
}

// Every file whole through the wrapped sandbox's own file access (the bulk
// path), with the agent resolving and moving: the suite's file cases must
// hold there too.
func TestConformanceLocalBulk(t *testing.T) {
	b := newLocal(t)
	log := noWarnings(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return sbxd.WrapBackend(b, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(log), sbxd.WithBulkThreshold(1))
	}, backendtest.WithoutCapabilityRerun())
}
