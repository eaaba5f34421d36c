package fileops_test

import (
	"context"
	"maps"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// newLocalSandbox makes a sandbox on a local backend with a state dir of
// its own, destroyed when t ends.
func newLocalSandbox(t *testing.T) backend.Sandbox {
	t.Helper()
	b, err := local.New(local.Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	sb, err := b.Create(context.Background(), backend.Spec{Name: "fileops"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	return sb
}

func TestLocal(t *testing.T) {
	t.Parallel()
	t.Run("native", func(t *testing.T) {
		t.Parallel()
		fileopstest.Run(t, newLocalSandbox)
	})
	t.Run("generic", func(t *testing.T) {
		t.Parallel()
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox {
			return backendtest.HideCapabilities(newLocalSandbox(t))
		})
	})
}

// busyboxSandbox runs every command of a sandbox with busybox's sh and
// applets and nothing else on PATH, as in a minimal (alpine-like) image, so
// the generic path is checked against busybox's find, stat, mktemp, ...
// It has no Unwrap: capabilities are hidden.
type busyboxSandbox struct {
	backend.Sandbox
	bin string // a directory of busybox applet links
}

func (s busyboxSandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	argv, err := req.Argv()
	if err != nil {
		return s.Sandbox.Exec(ctx, req)
	}
	if !strings.Contains(argv[0], "/") {
		argv = append([]string{s.bin + "/" + argv[0]}, argv[1:]...)
	}
	req.Cmd, req.Shell = argv, ""
	req.Env = maps.Clone(req.Env)
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	req.Env["PATH"] = s.bin
	return s.Sandbox.Exec(ctx, req)
}

// envRequireBusybox makes TestLocalBusybox fail instead of skipping when
// busybox is missing (CI sets it).
const envRequireBusybox = "SBX_REQUIRE_BUSYBOX"

func TestLocalBusybox(t *testing.T) {
	t.Parallel()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		harness.Unavailable(t, envRequireBusybox, "busybox is not installed (scripts/test.sh installs busybox-static)")
	}
	bin := t.TempDir()
	out, err := exec.Command(bb, "--install", "-s", bin).CombinedOutput()
	require.NoError(t, err, "busybox --install: %s", out)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox {
		return busyboxSandbox{Sandbox: newLocalSandbox(t), bin: bin}
	})
}
