package bubblewrap_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/sbxd"

	"example.com/bubblewrap"
)

// open makes a backend on a state folder of t's, or skips when bwrap is
// missing (fails with SBX_REQUIRE_BWRAP=1, as in CI).
func open(t *testing.T) (*bubblewrap.Backend, func(t *testing.T) backend.Backend) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("SBX_REQUIRE_BWRAP") == "1" {
			t.Fatalf("bwrap is missing and SBX_REQUIRE_BWRAP=1: %v", err)
		}
		t.Skip("bwrap is missing (Debian: apt install bubblewrap)")
	}
	dir := filepath.Join(t.TempDir(), "state")
	b, err := bubblewrap.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Persistent: every reopening sees the same sandboxes.
	return b, func(t *testing.T) backend.Backend {
		b, err := bubblewrap.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformance(t *testing.T) {
	_, reopen := open(t)
	backendtest.Run(t, reopen)
}

// Through the sbxd agent, which the client injects and starts with
// Attach; a fallback to plain Exec would log a warning, which fails.
func TestConformanceSbxd(t *testing.T) {
	_, reopen := open(t)
	log := slog.New(failOnWarn{t})
	backendtest.Run(t, func(t *testing.T) backend.Backend { return sbxd.WrapBackend(reopen(t), sbxd.WithLogger(log)) })
}

// failOnWarn fails the test on a warning: the agent did not serve.
type failOnWarn struct{ t *testing.T }

func (h failOnWarn) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h failOnWarn) Handle(_ context.Context, r slog.Record) error {
	h.t.Errorf("sbxd warned: %s", r.Message)
	return nil
}
func (h failOnWarn) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h failOnWarn) WithGroup(string) slog.Handler      { return h }

func TestFileops(t *testing.T) {
	b, _ := open(t)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return create(t, b) })
}

func TestFileopsSbxd(t *testing.T) {
	b, _ := open(t)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox {
		c, err := sbxd.Wrap(t.Context(), create(t, b))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Agent(t.Context()); err != nil {
			t.Fatalf("the agent does not serve: %v", err)
		}
		return c
	})
}

func create(t *testing.T, b backend.Backend) backend.Sandbox {
	t.Helper()
	sb, err := b.Create(t.Context(), backend.Spec{Name: "fileops", TTL: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}
