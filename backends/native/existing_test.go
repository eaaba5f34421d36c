package native_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// startForeign starts a container with the Engine API directly, as another
// tool would (labelled only for the leak check), and removes it when t
// ends.
func startForeign(t *testing.T, cli *client.Client, image string, hc *container.HostConfig, cmd ...string) container.InspectResponse {
	t.Helper()
	ctx := t.Context()
	name := "foreign-" + testRun + "-" + strings.ReplaceAll(t.Name(), "/", "-")
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Cmd: cmd, Labels: map[string]string{labelTestRun: testRun},
	}, hc, nil, nil, name)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}))
	})
	require.NoError(t, cli.ContainerStart(ctx, c.ID, container.StartOptions{}))
	ins, err := cli.ContainerInspect(ctx, c.ID)
	require.NoError(t, err)
	return ins
}

// A container sandboxkit did not make is adopted by name or ID: sbxd is
// copied in, so exec, timeouts (tree kill inside) and files work; Destroy
// leaves it running; Get finds it again by the sandbox's ID.
func TestAttachExisting(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	c := startForeign(t, cli, dockertest.BusyboxImage, nil, "sleep", "3600")

	for _, ref := range []string{strings.TrimPrefix(c.Name, "/"), c.ID[:12]} {
		s := backend.Spec{Name: "adopted", Existing: ref, Image: "not-used:1"}
		sb, err := b.Create(ctx, s)
		require.NoError(t, err, ref)
		adopted, wrapped := sb.(*native.Sandbox).Adopted()
		assert.True(t, adopted)
		assert.True(t, wrapped, "sbxd was not put into the container")
		assert.Equal(t, "ext-"+c.ID[:12], sb.ID())

		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo $((6*7)) $HOSTNAME"})
		require.NoError(t, err)
		assert.Equal(t, "42 "+c.Config.Hostname+"\n", string(res.Stdout))

		// The timeout kills the tree inside the container.
		res, err = sb.Exec(ctx, backend.ExecRequest{Shell: "sleep 300 & sleep 301; wait", Timeout: 300 * time.Millisecond})
		require.NoError(t, err)
		assert.Equal(t, backend.TimeoutExitCode, res.ExitCode)
		res, err = sb.Exec(ctx, backend.ExecRequest{Shell: "ps -o comm,args | grep -c '^sleep *sleep 30[01]' || true"})
		require.NoError(t, err)
		assert.Equal(t, "0\n", string(res.Stdout), "a timed-out command survived")

		require.NoError(t, sbfiles.WriteFile(ctx, sb, "/tmp/from-host.txt", strings.NewReader("hi"), 0o600))
		infos, err := sbfiles.ReadDir(ctx, sb, "/tmp")
		require.NoError(t, err)
		assert.NotEmpty(t, infos)

		info, err := sb.Info(ctx)
		require.NoError(t, err)
		assert.Equal(t, sb.ID(), info.ID)
		assert.Equal(t, "adopted", info.Name)
		assert.Equal(t, backend.StateRunning, info.State)

		again, err := b.Get(ctx, sb.ID())
		require.NoError(t, err)
		res, err = again.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "/tmp/from-host.txt"}})
		require.NoError(t, err)
		assert.Equal(t, "hi", string(res.Stdout))

		require.NoError(t, sb.Destroy(ctx))
		require.NoError(t, again.Destroy(ctx))
		now, err := cli.ContainerInspect(ctx, c.ID)
		require.NoError(t, err, "Destroy removed a container it did not make")
		assert.True(t, now.State.Running, "Destroy stopped a container it did not make")
	}
	// It is not listed among the sandboxes sandboxkit made.
	list, err := b.List(ctx, backend.Filter{Labels: map[string]string{labelTestRun: testRun}})
	require.NoError(t, err)
	for _, info := range list {
		assert.NotEqual(t, "ext-"+c.ID[:12], info.ID)
	}
}

// Where sbxd cannot be copied in (a read-only root), commands still run,
// as plain execs; a timeout still returns 124.
func TestAttachExistingReadOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	c := startForeign(t, cli, dockertest.BusyboxImage, &container.HostConfig{ReadonlyRootfs: true}, "sleep", "3600")

	sb, err := b.Create(ctx, backend.Spec{Name: "ro", Existing: c.ID})
	require.NoError(t, err)
	_, wrapped := sb.(*native.Sandbox).Adopted()
	assert.False(t, wrapped)
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "echo plain; echo err >&2; exit 3"}})
	require.NoError(t, err)
	assert.Equal(t, "plain\n", string(res.Stdout))
	assert.Equal(t, "err\n", string(res.Stderr))
	assert.Equal(t, 3, res.ExitCode)
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sleep", "5"}, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, backend.TimeoutExitCode, res.ExitCode)
	assert.True(t, res.TimedOut)
	// Listing falls back to the image's shell tools.
	infos, err := sbfiles.ReadDir(ctx, sb, "/bin")
	require.NoError(t, err)
	assert.Greater(t, len(infos), 10)
	require.NoError(t, sb.Destroy(ctx))
	now, err := cli.ContainerInspect(ctx, c.ID)
	require.NoError(t, err)
	assert.True(t, now.State.Running)
}

func TestAttachExistingErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)

	_, err := b.Create(ctx, backend.Spec{Name: "x", Existing: "sandboxkit-no-such-container-" + testRun})
	require.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "container_id sandboxkit-no-such-container-"+testRun)

	_, err = b.Get(ctx, "ext-000000000000")
	require.ErrorIs(t, err, backend.ErrNotFound)

	// A stopped container is refused, with the fix.
	name := "stopped-" + testRun
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: dockertest.BusyboxImage, Labels: map[string]string{labelTestRun: testRun}}, nil, nil, nil, name)
	require.NoError(t, err)
	t.Cleanup(func() { cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true}) })
	_, err = b.Create(ctx, backend.Spec{Existing: name})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "is created, not running")
	assert.Contains(t, err.Error(), "docker start "+name)
}
