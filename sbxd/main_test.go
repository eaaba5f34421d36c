package sbxd_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// agentBin is an sbxd built from this tree for the tests (the embedded one
// in internal/sbxdbin may predate the code under test). SBX_SBXD_PATH
// points at it, so the native backend mounts it and the client injects it.
var agentBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sbxd-test-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "sbxd")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", agentBin, "github.com/sandboxkit/sandboxkit/cmd/sbxd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building sbxd:", err)
		os.Exit(1)
	}
	// Other users (ExecRequest.User) must be able to run it.
	os.Chmod(dir, 0o755)
	os.Setenv(sbxdbin.EnvPath, agentBin)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newLocal opens a local backend in a state directory other users can
// traverse (the suites run commands as another user).
func newLocal(t testing.TB) *local.Backend {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	b, err := local.New(local.Config{StateDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// createLocal makes a local sandbox wrapped in a started client.
func createLocal(t testing.TB, opts ...sbxd.Option) (*sbxd.Client, backend.Sandbox) {
	t.Helper()
	b := newLocal(t)
	sb, err := b.Create(t.Context(), backend.Spec{Name: "sbxd-test", TTL: 30 * time.Minute})
	require.NoError(t, err)
	c, err := sbxd.Wrap(t.Context(), sb, append([]sbxd.Option{sbxd.WithAgentPath(agentBin)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, c.Destroy(ctx))
	})
	require.NoError(t, c.Fallback(), "the agent did not start")
	return c, sb
}

// warnCounter is a slog.Handler counting warnings, so a test can assert
// the client never fell back.
type warnCounter struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnCounter) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.String(); return true })
	w.msgs = append(w.msgs, msg)
	return nil
}
func (w *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnCounter) WithGroup(string) slog.Handler      { return w }

// noWarnings returns a logger whose warnings fail t when it ends.
func noWarnings(t *testing.T) *slog.Logger {
	w := &warnCounter{}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, m := range w.msgs {
			t.Errorf("warning logged: %s", m)
		}
	})
	return slog.New(w)
}
