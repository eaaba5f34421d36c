package sbxd_test

import (
	"errors"
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

// WrapBackend keeps the wrapped backend's volumes, and says so when it has
// none.
func TestWrapBackendVolumes(t *testing.T) {
	b := sbxd.WrapBackend(newLocal(t))
	_, err := b.ListVolumes(t.Context(), backend.Filter{})
	if _, ok := b.Unwrap().(backend.VolumeManager); ok {
		require.NoError(t, err)
	} else {
		require.ErrorIs(t, err, errors.ErrUnsupported)
	}
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
