package server_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

const labelTestRun = "sbx-server-test-run"

// nativeServer is a server on the native backend making busybox sandboxes
// labelled for the leak check, which it registers.
func nativeServer(t testing.TB, edit func(*server.Options)) (*server.Server, backend.Backend, string) {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	run := rand.Text()
	dockertest.AssertNoLeftovers(t, cli, labelTestRun, run)
	b, err := native.New(native.Config{PullPolicy: "never"})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	s := newServer(t, b, func(o *server.Options) {
		o.Spec = func(typ string) (backend.Spec, error) {
			return backend.Spec{Name: typ, Image: dockertest.BusyboxImage, Labels: map[string]string{labelTestRun: run}}, nil
		}
		// Whatever a test leaves, Close removes.
		o.DeleteOnShutdown = true
		if edit != nil {
			edit(o)
		}
	})
	return s, b, run
}

func TestNativeMCPAgentTurn(t *testing.T) {
	for _, noAgent := range []bool{false, true} {
		name := map[bool]string{false: "sbxd", true: "no-agent"}[noAgent]
		t.Run(name, func(t *testing.T) {
			s, _, _ := nativeServer(t, func(o *server.Options) { o.NoAgent = noAgent })
			servertest.AgentTurn(t, servertest.MCP(mcpClient(t, serveHTTP(t, s)+"/mcp", nil)), "/tmp")
		})
	}
}

func TestNativeMCPOverStdioAgentTurn(t *testing.T) {
	s, _, _ := nativeServer(t, nil)
	stdioAgentTurn(t, s, "/tmp")
}

func TestNativeVolumeMounts(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data.txt"), []byte("from the host\n"), 0o644))
	vols, warnings, err := server.ParseVolumeMounts(dir+":/data:ro,/no/such/dir:/gone", "/")
	require.NoError(t, err)
	assert.Len(t, warnings, 1)
	s, _, _ := nativeServer(t, func(o *server.Options) { o.Volumes = vols })
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	id := servertest.Create(t, call, nil)
	assert.Contains(t, servertest.Must(t, call, "read_file", map[string]any{"sandbox_id": id, "path": "/data/data.txt"}), "from the host")
	out := servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "touch /data/new; ls /gone"})
	assert.Contains(t, out, "Read-only file system")
	assert.NotContains(t, out, "Exit code: 0")
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
}

func TestNativeIsolationAndRestart(t *testing.T) {
	// The engine is shared with other packages' tests, which may hold
	// sandboxes of a server of the default instance meanwhile: these two
	// servers have an instance of their own.
	instance := "restart-" + rand.Text()
	s1, b, _ := nativeServer(t, func(o *server.Options) { o.DeleteOnShutdown, o.Instance = false, instance })
	alice := servertest.HTTP(serveHTTP(t, s1), "", "alice")
	id := servertest.Create(t, alice, nil)
	servertest.Must(t, alice, "write_file", map[string]any{"sandbox_id": id, "path": "/tmp/notes", "content": "kept\n"})
	require.NoError(t, s1.Close())

	// A new server adopts the sandbox; ownership came from its labels.
	s2 := newServer(t, b, func(o *server.Options) {
		o.Spec = mainSpec
		o.DeleteOnShutdown = true
		o.Instance = instance
	})
	n, err := s2.Adopt(context.Background(), "")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	url := serveHTTP(t, s2)
	assert.Contains(t, servertest.Fails(t, servertest.HTTP(url, "", "bob"), "read_file",
		map[string]any{"sandbox_id": id, "path": "/tmp/notes"}), "was not found")
	alice = servertest.HTTP(url, "", "alice")
	servertest.Must(t, alice, "connect_sandbox", map[string]any{"sandbox_id": id})
	assert.Contains(t, servertest.Must(t, alice, "read_file", map[string]any{"sandbox_id": id, "path": "/tmp/notes"}), "kept")
}

func TestLoadNative(t *testing.T) {
	s, b, run := nativeServer(t, nil)
	// Smaller than on local: 50 containers take over a minute on a loaded
	// two-core machine.
	convs, cmds := 10, 20
	if testing.Short() {
		convs, cmds = 3, 5
	}
	assert.Empty(t, runLoad(t, s, convs, cmds))
	infos, err := b.List(context.Background(), backend.Filter{Labels: map[string]string{labelTestRun: run}})
	require.NoError(t, err)
	assert.Empty(t, infos, "leaked sandboxes")
}

// create_sandbox runs the main initializer's first-boot provisioning (its
// pip packages; pip is echo here, as there is no package index) before it
// answers, and a failed install removes the sandbox and says why.
func TestMainPackagesOnFirstBoot(t *testing.T) {
	configOptions := func(t *testing.T, pip string) server.Options {
		cfg, err := sandboxkit.ParseConfig([]byte(`
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.main.extra]
packages = ["requests==2.32.0", "numpy"]
pip = "`+pip+`"
`), "")
		require.NoError(t, err)
		opts, _, err := server.ConfigOptions(cfg)
		require.NoError(t, err)
		return opts
	}
	withConfig := func(from server.Options) func(*server.Options) {
		return func(o *server.Options) {
			labelled := o.Spec // the test's labels for the leak check
			o.Spec = func(typ string) (backend.Spec, error) {
				spec, err := from.Spec(typ)
				if err != nil {
					return spec, err
				}
				l, _ := labelled(typ)
				spec.Labels = l.Labels
				return spec, nil
			}
			o.Provision, o.Types = from.Provision, from.Types
		}
	}

	s, b, _ := nativeServer(t, withConfig(configOptions(t, "echo")))
	call := servertest.HTTP(serveHTTP(t, s), "", "pkg")
	servertest.Must(t, call, "create_sandbox", map[string]any{"type": "main"})
	infos, err := b.List(t.Context(), backend.Filter{Labels: map[string]string{server.LabelConversation: server.OwnerKey("conv:pkg")}})
	require.NoError(t, err)
	require.Len(t, infos, 1)
	marker := servertest.Must(t, call, "read_file", map[string]any{"sandbox_id": infos[0].ID, "path": "/var/tmp/.sandboxkit-main-packages"})
	assert.Contains(t, marker, "numpy")
	assert.Contains(t, marker, "requests==2.32.0")

	s2, b2, _ := nativeServer(t, withConfig(configOptions(t, "false")))
	call2 := servertest.HTTP(serveHTTP(t, s2), "", "pkg-fail")
	msg := servertest.Fails(t, call2, "create_sandbox", map[string]any{"type": "main"})
	assert.Contains(t, msg, "pip")
	assert.Empty(t, must(b2.List(t.Context(), backend.Filter{Labels: map[string]string{server.LabelConversation: server.OwnerKey("conv:pkg-fail")}})),
		"a sandbox whose provisioning failed is removed")
}
