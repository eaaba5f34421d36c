package native_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// requireGVisor skips t unless the engine has a gVisor runtime (runsc),
// or fails it under SBX_REQUIRE_RUNSC=1 (CI registers runsc with its
// dockerd: scripts/docker-setup.sh).
func requireGVisor(t *testing.T, b backend.Backend) {
	t.Helper()
	if !slices.Contains(b.Capabilities().Runtimes, backend.RuntimeGVisor) {
		msg := "the engine has no gVisor runtime (runsc registered with dockerd); see scripts/docker-setup.sh"
		if os.Getenv("SBX_REQUIRE_RUNSC") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// runtime = "gvisor" runs the sandbox under gVisor's kernel (the kernel
// the sandbox sees says so), Info says its isolation, and the files the
// sandbox writes (its own /tmp, which the engine's copy of the container
// lacks) are the files the file operations see, both ways.
func TestGVisor(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	requireGVisor(t, b)
	s := spec("gvisor", dockertest.BusyboxImage)
	s.Runtime = backend.RuntimeGVisor
	sb := create(t, b, s)

	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"dmesg"}})
	require.NoError(t, err)
	require.Contains(t, string(res.Stdout), "gVisor", "the sandbox's kernel log is not gVisor's")

	info, err := sb.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, backend.IsolationGVisor, info.Isolation)
	infos, err := b.List(ctx, backend.Filter{Labels: map[string]string{labelTestRun: testRun}})
	require.NoError(t, err)
	i := slices.IndexFunc(infos, func(i backend.Info) bool { return i.ID == sb.ID() })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, backend.IsolationGVisor, infos[i].Isolation, "List's isolation")

	// The agent's socket is a host socket in a volume (runsc registered
	// with --host-uds=all, as scripts/docker-setup.sh does): commands skip
	// the engine's exec.
	ad, ok := backend.As[backend.AgentDialer](sb)
	require.True(t, ok)
	conn, err := ad.DialAgent(ctx)
	require.NoError(t, err, "the gVisor sandbox's agent is not reachable from the host")
	conn.Close()

	_, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "echo inside > /tmp/in.txt"}})
	require.NoError(t, err)
	rc, err := sbfiles.ReadFile(ctx, sb, "/tmp/in.txt")
	require.NoError(t, err)
	data := make([]byte, 64)
	n, _ := rc.Read(data)
	rc.Close()
	require.Equal(t, "inside\n", string(data[:n]))
	require.NoError(t, sbfiles.WriteFile(ctx, sb, "/tmp/out.txt", strings.NewReader("outside"), 0o600))
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "/tmp/out.txt"}})
	require.NoError(t, err)
	require.Equal(t, "outside", string(res.Stdout))

	// A fork runs on its parent's runtime, and says so.
	_, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "echo kept > /root/kept.txt"}})
	require.NoError(t, err)
	forks, err := sb.(backend.Forker).Fork(ctx, backend.ForkRequest{N: 1})
	require.NoError(t, err)
	require.Len(t, forks, 1)
	t.Cleanup(func() { forks[0].Destroy(context.Background()) })
	res, err = forks[0].Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "cat /root/kept.txt; dmesg"}})
	require.NoError(t, err)
	require.Contains(t, string(res.Stdout), "kept\n")
	require.Contains(t, string(res.Stdout), "gVisor", "the fork does not run under gVisor")
	info, err = forks[0].Info(ctx)
	require.NoError(t, err)
	require.Equal(t, backend.IsolationGVisor, info.Isolation, "the fork's isolation")
}

// A runtime level the engine cannot give is refused at create, naming it,
// what the engine offers and how to add gVisor; nothing is made. Podman
// (4.3, whose Docker-compatible API ignores a container's runtime: one
// made with runsc reports "oci" and runs on runc) offers no choice.
func TestRuntimeRefused(t *testing.T) {
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	s := spec("kata", dockertest.BusyboxImage)
	s.Runtime = backend.RuntimeKata
	_, err := b.Create(t.Context(), s)
	require.Error(t, err)
	require.True(t, errors.Is(err, errors.ErrUnsupported), "%v", err)
	require.Contains(t, err.Error(), `runtime "kata"`)
	if strings.Contains(err.Error(), "Podman") {
		// Podman 4's Docker-compatible API would ignore the runtime: no
		// choice is offered, and the refusal says how to change its
		// default instead.
		require.Contains(t, err.Error(), "containers.conf")
	} else {
		for _, want := range []string{"it offers", "runc", "daemon.json"} {
			require.Contains(t, err.Error(), want)
		}
	}
	infos, err := b.List(t.Context(), backend.Filter{Name: "kata", Labels: map[string]string{labelTestRun: testRun}})
	require.NoError(t, err)
	require.Empty(t, infos)
}
