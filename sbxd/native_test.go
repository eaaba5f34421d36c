package sbxd_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// newNative opens the native backend on the test daemon (skipping without
// one, failing with SBX_REQUIRE_DOCKER=1). Its sbxd is agentBin, through
// SBX_SBXD_PATH (see TestMain).
func newNative(t testing.TB, cfg native.Config) *native.Backend {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	cfg.PullPolicy = native.PullNever
	b, err := native.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// createNative makes a busybox sandbox on b, wrapped in a started client.
func createNative(t testing.TB, b backend.Backend, opts ...sbxd.Option) *sbxd.Client {
	t.Helper()
	sb, err := b.Create(t.Context(), backend.Spec{
		Name: "sbxd-test", Image: dockertest.BusyboxImage, WorkingDir: "/root", TTL: 30 * time.Minute,
	})
	require.NoError(t, err)
	c, err := sbxd.Wrap(t.Context(), sb, opts...)
	if err != nil {
		sb.Destroy(context.Background())
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, c.Destroy(ctx))
	})
	return c
}

func TestConformanceNative(t *testing.T) {
	b := newNative(t, native.Config{})
	log := noWarnings(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return sbxd.WrapBackend(b, sbxd.WithLogger(log))
	}, backendtest.WithImage(dockertest.BusyboxImage), backendtest.WithoutCapabilityRerun(),
		backendtest.WithImageRemover(dockertest.ImageRemover(dockertest.Client(t))),
		backendtest.WithAgentCheck(sbxd.CheckAgent))
}

func TestFileopsNative(t *testing.T) {
	c := createNative(t, newNative(t, native.Config{}))
	require.NoError(t, c.Fallback(), "the agent did not start")
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return c })
}

// The fileops table with every non-empty file moved by the engine's
// archive API (the bulk path).
func TestFileopsNativeBulk(t *testing.T) {
	c := createNative(t, newNative(t, native.Config{}), sbxd.WithBulkThreshold(1))
	require.NoError(t, c.Fallback(), "the agent did not start")
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return c })
}
