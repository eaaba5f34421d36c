package opensandbox_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
)

// testAPIKey is the in-process server's key in these tests.
const testAPIKey = "osb-test-key-5f1e2d3c4b5a"

// The image the in-process server records (it runs host processes).
const testImage = "ubuntu:24.04"

// newServer starts the in-process OpenSandbox server (not the real one: sbx
// serve's OpenSandbox API over the local backend's host processes, with the
// real server's quirks that clients must cope with added) and
// checks, when the test ends, that the client never broke the protocol (the
// API key sent to execd, endpoint headers left out).
func newServer(t *testing.T, opts opensandboxtest.Options) *opensandboxtest.Server {
	t.Helper()
	srv, err := opensandboxtest.NewServer(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.Empty(t, srv.Violations(), "protocol violations seen by the in-process server")
		srv.Close()
	})
	return srv
}

func newBackend(t *testing.T, cfg opensandbox.Config, opts ...opensandbox.Option) *opensandbox.Backend {
	t.Helper()
	if testing.Verbose() && os.Getenv("SBX_TEST_DEBUG") != "" {
		opts = append(opts, opensandbox.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	b, err := opensandbox.New(cfg, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })
	return b
}

// TestConformanceInProcessServer runs the backend suite through the real
// HTTP client against the in-process server, execd reached directly.
func TestConformanceInProcessServer(t *testing.T) {
	t.Parallel()
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	cfg := opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey}
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return newBackend(t, cfg)
	}, backendtest.WithImage(testImage), backendtest.WithIdleTTL("sbx serve's OpenSandbox API takes a timeout for an idle window that every call renews (docs/serve.md)"))
}

// TestFileopsInProcessServer runs the fileops table, with execd reached
// through the server proxy, on a sandbox as it is and once more with its
// capabilities hidden (fileops' generic path, about 1000 commands through
// Exec), the two at once.
func TestFileopsInProcessServer(t *testing.T) {
	t.Parallel()
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey, UseServerProxy: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, backend.Spec{Name: "fileops", Image: testImage, TTL: 10 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
	t.Run("as is", func(t *testing.T) {
		t.Parallel()
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
	t.Run("capabilities hidden", func(t *testing.T) {
		t.Parallel()
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return backendtest.HideCapabilities(sb) })
	})
}
