package native_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// entrySpec is the Spec of entry "main" of an OpenSage-style entry table
// body (config's parsing, as sbx does it), labelled for the leak check.
func entrySpec(t *testing.T, body string) backend.Spec {
	t.Helper()
	reg := config.NewRegistry()
	reg.Register(native.Factory)
	cfg, err := reg.ParseConfig([]byte("[sandbox]\nbackend = \"native\"\n[sandbox.sandboxes.main]\n"+body), "sandbox.toml")
	require.NoError(t, err)
	s, err := cfg.Spec("main")
	require.NoError(t, err)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[labelTestRun] = testRun
	return s
}

// docker_args flags reach the engine as docker run would set them.
func TestDockerArgsReachTheEngine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	s := entrySpec(t, fmt.Sprintf(`image = %q
command = "tail -f /dev/null > /dev/null"
docker_args = [
  "--cap-add=SYS_PTRACE", "--cap-drop", "NET_RAW",
  "--security-opt", "label=disable",
  "--shm-size=32m", "-m", "256m", "--cpus=0.5", "--pids-limit", "100",
  "-u", "1000:1000", "-w", "/tmp", "-e", "FROM_ARGS=yes",
  "--network=none", "--hostname", "sage-box", "--add-host=db.local:10.0.0.5",
  "--read-only", "-l", "team=red",
]
`, dockertest.BusyboxImage))
	sb := create(t, b, s)
	c, err := dockertest.Client(t).ContainerInspect(ctx, sb.(*native.Sandbox).ContainerID())
	require.NoError(t, err)
	hc := c.HostConfig
	assert.Contains(t, hc.CapAdd, "CAP_SYS_PTRACE")
	assert.Contains(t, hc.CapDrop, "CAP_NET_RAW")
	assert.Contains(t, hc.SecurityOpt, "label=disable")
	assert.Equal(t, int64(32<<20), hc.ShmSize)
	assert.Equal(t, int64(256<<20), hc.Memory)
	assert.Equal(t, int64(5e8), hc.NanoCPUs)
	assert.Equal(t, int64(100), *hc.PidsLimit)
	assert.Equal(t, container.NetworkMode("none"), hc.NetworkMode)
	assert.True(t, hc.ReadonlyRootfs)
	assert.Equal(t, []string{"db.local:10.0.0.5"}, hc.ExtraHosts)
	assert.Equal(t, "1000:1000", c.Config.User)
	assert.Equal(t, "sage-box", c.Config.Hostname)
	assert.Equal(t, "red", c.Config.Labels["team"])
	assert.Contains(t, c.Config.Env, "FROM_ARGS=yes")
	// The command had shell syntax: a shell runs it.
	assert.Equal(t, []string{"/bin/sh", "-c", "tail -f /dev/null > /dev/null"}, []string(c.Config.Cmd))

	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo $FROM_ARGS; pwd; id -u; hostname; grep db.local /etc/hosts | cut -f1"})
	require.NoError(t, err)
	assert.Equal(t, "yes\n/tmp\n1000\nsage-box\n10.0.0.5\n", string(res.Stdout), string(res.Stderr))
	res, err = sb.Exec(ctx, backend.ExecRequest{Shell: "ps -o args | grep -c '^tail -f /dev/null'"})
	require.NoError(t, err)
	assert.Equal(t, "1\n", string(res.Stdout), "the shell-wrapped command runs")
}

// platform pulls and creates that platform's image: the engine's own
// platform works (an image of another platform on the engine is refused
// with pull_policy "never" rather than run as the wrong one).
func TestPlatformReachesTheEngine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	img, err := cli.ImageInspect(ctx, dockertest.BusyboxImage)
	require.NoError(t, err)
	own := img.Os + "/" + img.Architecture

	s := entrySpec(t, fmt.Sprintf("image = %q\nplatform = %q\n", dockertest.BusyboxImage, own))
	sb := create(t, b, s)
	c, err := cli.ContainerInspect(ctx, sb.(*native.Sandbox).ContainerID())
	require.NoError(t, err)
	assert.Equal(t, img.ID, c.Image)
	assert.Equal(t, img.Os, c.Platform)

	other := "linux/arm64"
	if img.Architecture == "arm64" {
		other = "linux/amd64"
	}
	s = entrySpec(t, fmt.Sprintf("image = %q\ndocker_args = [\"--platform\", %q]\n", dockertest.BusyboxImage, other))
	_, err = b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), own+", not "+other)
	assert.Contains(t, err.Error(), "pull_policy")
}

// container_name names the container; a second sandbox of the same name
// fails with ErrAlreadyExists naming the key, and the first is left alone.
func TestContainerName(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	name := "sbx-test-" + testRun + "-named"
	s := entrySpec(t, fmt.Sprintf("image = %q\ncontainer_name = %q\n", dockertest.BusyboxImage, name))
	sb := create(t, b, s)
	c, err := dockertest.Client(t).ContainerInspect(ctx, sb.(*native.Sandbox).ContainerID())
	require.NoError(t, err)
	assert.Equal(t, "/"+name, c.Name)

	_, err = b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrAlreadyExists)
	assert.Contains(t, err.Error(), fmt.Sprintf("container_name %q", name))

	// Get and List still find it by its sandboxkit labels.
	got, err := b.Get(ctx, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, sb.ID(), got.ID())
	infos, err := b.List(ctx, backend.Filter{Labels: map[string]string{labelTestRun: testRun}})
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(infos, func(i backend.Info) bool { return i.ID == sb.ID() }))
}

// [sandbox] host_shared_mem_dir (OpenSage): made on the host when missing
// and mounted read-write at /mem/shared in every sandbox of the file, so a
// file written on the host is seen by each sandbox and one a sandbox
// writes is seen by the host and the other sandboxes.
func TestHostSharedMemDir(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	mem := filepath.Join(t.TempDir(), "agent-mem") // missing until a Spec is made
	reg := config.NewRegistry()
	reg.Register(native.Factory)
	cfg, err := reg.ParseConfig([]byte(fmt.Sprintf(`[sandbox]
backend = "native"
host_shared_mem_dir = %q
[sandbox.sandboxes.main]
image = %q
[sandbox.sandboxes.worker]
image = %q
`, mem, dockertest.BusyboxImage, dockertest.BusyboxImage)), "sandbox.toml")
	require.NoError(t, err)
	var sbs []backend.Sandbox
	for _, name := range []string{"main", "worker"} {
		s, err := cfg.Spec(name)
		require.NoError(t, err)
		s.Labels = map[string]string{labelTestRun: testRun}
		sbs = append(sbs, create(t, b, s))
	}
	require.DirExists(t, mem)
	require.NoError(t, os.WriteFile(filepath.Join(mem, "from-host.txt"), []byte("written on the host\n"), 0o644))
	for i, sb := range sbs {
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "cat /mem/shared/from-host.txt"})
		require.NoError(t, err)
		assert.Equal(t, "written on the host\n", string(res.Stdout), "sandbox %d: %s", i, res.Stderr)
	}
	res, err := sbs[0].Exec(ctx, backend.ExecRequest{Shell: "echo from main > /mem/shared/from-main.txt"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "the mount is writable: %s", res.Stderr)
	res, err = sbs[1].Exec(ctx, backend.ExecRequest{Shell: "cat /mem/shared/from-main.txt"})
	require.NoError(t, err)
	assert.Equal(t, "from main\n", string(res.Stdout), "worker sees main's file: %s", res.Stderr)
	got, err := os.ReadFile(filepath.Join(mem, "from-main.txt"))
	require.NoError(t, err)
	assert.Equal(t, "from main\n", string(got))
}
