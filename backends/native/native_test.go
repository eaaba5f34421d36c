package native_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// labelTestRun marks everything this test binary makes; TestMain checks
// that nothing carrying it is left when the tests end.
const labelTestRun = "sandboxkit.test-run"

var testRun = func() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

func TestMain(m *testing.M) {
	code := m.Run()
	// Assert, after every test and cleanup, that no container, volume or
	// network made by this run is left (when a daemon was there at all).
	if cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if _, err := cli.Ping(ctx); err == nil {
			left, err := dockertest.Leftovers(ctx, cli, labelTestRun, testRun)
			if err != nil {
				fmt.Fprintf(os.Stderr, "listing leftovers: %v\n", err)
				code = 1
			}
			for _, l := range left {
				fmt.Fprintf(os.Stderr, "LEFT BEHIND by the native tests: %s\n", l)
				code = 1
			}
		}
		cancel()
		cli.Close()
	}
	os.Exit(code)
}

// newBackend opens the native backend on the test daemon, skipping (or
// failing with SBX_REQUIRE_DOCKER=1) without one or without image.
func newBackend(t *testing.T, image string) *native.Backend {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, image)
	b, err := newNative()
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// newNative opens the backend the tests use: on the engine's default
// runtime, or on SBX_NATIVE_RUNTIME's (scripts/test.sh runs the suites
// again with "gvisor").
func newNative() (*native.Backend, error) {
	return native.New(native.Config{PullPolicy: native.PullNever, Runtime: os.Getenv("SBX_NATIVE_RUNTIME")})
}

// spec is a Spec on image labelled for the leak check.
func spec(name, image string) backend.Spec {
	return backend.Spec{
		Name:   name,
		Image:  image,
		Labels: map[string]string{labelTestRun: testRun},
		TTL:    30 * time.Minute,
	}
}

func create(t *testing.T, b *native.Backend, s backend.Spec) backend.Sandbox {
	t.Helper()
	sb, err := b.Create(t.Context(), s)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, sb.Destroy(ctx))
	})
	return sb
}

func conformance(t *testing.T, image string) {
	t.Parallel()
	newB := func(t *testing.T) backend.Backend { return newBackend(t, image) }
	opts := []backendtest.Option{backendtest.WithSpec(func(name string) backend.Spec {
		return spec(name, image)
	}), backendtest.WithImageRemover(dockertest.ImageRemover(dockertest.Client(t))),
		backendtest.WithAgentCheck(sbxd.CheckAgent)}
	if runtimePass() {
		opts = append(opts, backendtest.WithoutCapabilityRerun())
	}
	backendtest.Run(t, newB, opts...)
}

// runtimePass reports a run of the suites on another OCI runtime
// (SBX_NATIVE_RUNTIME, scripts/test.sh's gVisor pass): such a run is
// about the runtime, so the file cases and the fileops table run once,
// through the agent's file calls; their reruns with the capabilities
// hidden exercise sandboxkit's generic exec path, which the main run on
// runc covers, and would double the pass's minutes on 2 cores.
func runtimePass() bool { return os.Getenv("SBX_NATIVE_RUNTIME") != "" }

// fileops runs the fileops table on image, through the sandbox's own file
// capabilities and, when hiddenToo, through the generic Exec-based path.
func fileops(t *testing.T, image string, hiddenToo bool) {
	t.Parallel()
	b := newBackend(t, image)
	s := spec("fileops", image)
	// Not "/": fileopstest builds expected paths as workdir+"/"+name,
	// which gives "//x" there (reported to the fileops owners).
	s.WorkingDir = "/root"
	sb := create(t, b, s)
	t.Run("native", func(t *testing.T) {
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
	if hiddenToo && !runtimePass() {
		t.Run("hidden", func(t *testing.T) {
			fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return backendtest.HideCapabilities(sb) })
		})
	}
}

func TestConformanceBusybox(t *testing.T) { conformance(t, dockertest.BusyboxImage) }
func TestConformanceDebian(t *testing.T)  { conformance(t, dockertest.DebianImage) }
func TestFileopsBusybox(t *testing.T)     { fileops(t, dockertest.BusyboxImage, true) }

// The generic path on GNU tools is covered by TestConformanceDebian's
// hidden file cases; the whole table twice more would cost ~40 s of the
// package's time budget on 2 cores (each case is several engine execs).
func TestFileopsDebian(t *testing.T) { fileops(t, dockertest.DebianImage, false) }

// Checkpoint commits the file system to an image a new sandbox can run.
func TestCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	sb := create(t, b, spec("ckpt", dockertest.BusyboxImage))
	require.NoError(t, sbfiles.WriteFile(ctx, sb, "/state.txt", strings.NewReader("kept"), 0o644))
	cp, ok := backend.As[backend.Checkpointer](sb)
	require.True(t, ok)
	ref := "sandboxkit-test/checkpoint:" + testRun
	got, err := cp.Checkpoint(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, ref, got)
	cli := dockertest.Client(t)
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})

	// The new sandbox does not inherit the first one's owner or expiry
	// from the image's labels.
	s2 := spec("ckpt2", ref)
	s2.TTL = 0
	again := create(t, b, s2)
	info, err := again.Info(ctx)
	require.NoError(t, err)
	assert.True(t, info.ExpiresAt.IsZero(), "expiry inherited from the checkpoint image")
	assert.NotContains(t, info.Labels, backend.LabelExpiresAt)
	assert.Equal(t, again.ID(), info.ID)
	res, err := again.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "/state.txt"}})
	require.NoError(t, err)
	assert.Equal(t, "kept", string(res.Stdout))
}

// Pause keeps processes and memory; Exec works again after Resume.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	sb := create(t, b, spec("pause", dockertest.BusyboxImage))
	p, ok := backend.As[backend.Pauser](sb)
	require.True(t, ok)
	require.NoError(t, p.Pause(ctx))
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, backend.StatePaused, info.State)
	require.NoError(t, p.Resume(ctx))
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "back"}})
	require.NoError(t, err)
	assert.Equal(t, "back\n", string(res.Stdout))
}

// The state Info reports right after Pause and Resume is theirs, however
// quickly they follow each other: the engine's late pause event once left
// it reporting "paused" after a Resume (about one cycle in 300 back to
// back; 200 cycles here), and once more, at cycle 108 in a CI run, after
// Resume had seen the engine report it running (settlePaused now watches
// the state for settleFor).
func TestPauseResumeStateSettles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	sb := create(t, b, spec("pause-settles", dockertest.BusyboxImage))
	p, ok := backend.As[backend.Pauser](sb)
	require.True(t, ok)
	for i := range 200 {
		require.NoError(t, p.Pause(ctx))
		require.NoError(t, p.Resume(ctx))
		info, err := sb.Info(ctx)
		require.NoError(t, err)
		require.Equal(t, backend.StateRunning, info.State, "Info right after the Resume of cycle %d", i)
	}
}

// Stop ends the processes and keeps the files; Start runs the sandbox
// again (its init is a new process, a file is there). A sandbox the
// engine removes once it stops cannot be stopped.
func TestStopStart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	sb := create(t, b, spec("stop", dockertest.BusyboxImage))
	st, ok := backend.As[backend.Stopper](sb)
	require.True(t, ok)
	// PID 1's start time, in clock ticks since the host booted.
	const probe = "cat /state.txt; cut -d' ' -f22 /proc/1/stat"
	_, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "echo kept > /state.txt"}})
	require.NoError(t, err)
	before, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", probe}})
	require.NoError(t, err)
	require.NoError(t, st.Stop(ctx))
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, backend.StateRunning, info.State, "after Stop")
	require.NoError(t, st.Stop(ctx), "Stop of a stopped sandbox")
	require.NoError(t, st.Start(ctx))
	after, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", probe}})
	require.NoError(t, err)
	kept, initBefore, _ := strings.Cut(string(before.Stdout), "\n")
	keptAfter, initAfter, _ := strings.Cut(string(after.Stdout), "\n")
	assert.Equal(t, "kept", kept)
	assert.Equal(t, kept, keptAfter, "a file after Stop and Start")
	assert.NotEmpty(t, initAfter)
	assert.NotEqual(t, initBefore, initAfter, "PID 1 after Stop and Start is the one of before")

	auto := spec("stop-auto", dockertest.BusyboxImage)
	auto.AutoRemove = true
	asb := create(t, b, auto)
	err = asb.(backend.Stopper).Stop(ctx)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	res, err := asb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}})
	require.NoError(t, err, "a refused Stop stopped the sandbox")
	assert.Equal(t, 0, res.ExitCode)
}

// A scratch image has no shell and no init: sbxd keeps it alive and wraps
// commands, and files move through the archive API.
func TestScratchImage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.ScratchImage)
	sb := create(t, b, spec("scratch", dockertest.ScratchImage))

	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/testbin", "echo", "hello", "scratch"}})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	assert.Equal(t, "hello scratch\n", string(res.Stdout))

	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/testbin", "exit", "7"}})
	require.NoError(t, err)
	assert.Equal(t, 7, res.ExitCode)

	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/testbin", "cat"}, Stdin: strings.NewReader("via stdin")})
	require.NoError(t, err)
	assert.Equal(t, "via stdin", string(res.Stdout))

	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/testbin", "env", "FOO"}, Env: map[string]string{"FOO": "bar"}})
	require.NoError(t, err)
	assert.Equal(t, "bar\n", string(res.Stdout))

	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"no-such-program"}})
	require.NoError(t, err)
	assert.Equal(t, 127, res.ExitCode)

	// Timeout: sbxd kills the tree (parent and child) inside the container.
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/testbin", "tree", "300"}, Timeout: 500 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, backend.TimeoutExitCode, res.ExitCode)
	assert.True(t, res.TimedOut)

	// Files without any tool in the image.
	data := bytes.Repeat([]byte("0123456789abcdef"), 100000)
	require.NoError(t, sbfiles.WriteFile(ctx, sb, "/data/sub/blob.bin", bytes.NewReader(data), 0o640))
	fi, err := sbfiles.Stat(ctx, sb, "/data/sub/blob.bin")
	require.NoError(t, err)
	assert.Equal(t, int64(len(data)), fi.Size())
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	rc, err := sbfiles.ReadFile(ctx, sb, "/data/sub/blob.bin")
	require.NoError(t, err)
	got, err := io.ReadAll(rc)
	rc.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "read back %d bytes, want %d", len(got), len(data))
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/testbin", "cat", "/data/sub/blob.bin"}, OutputLimit: -1})
	require.NoError(t, err)
	assert.Equal(t, len(data), len(res.Stdout))

	_, err = sbfiles.Stat(ctx, sb, "/nope")
	assert.ErrorIs(t, err, os.ErrNotExist)

	// Directories list without ls or find in the image (sbxd ls).
	require.NoError(t, sbfiles.WriteFile(ctx, sb, "/data/sub/a.txt", strings.NewReader("a"), 0o600))
	infos, err := sbfiles.ReadDir(ctx, sb, "/data/sub")
	require.NoError(t, err)
	require.Len(t, infos, 2)
	assert.Equal(t, "a.txt", infos[0].Name())
	assert.Equal(t, int64(1), infos[0].Size())
	assert.Equal(t, "blob.bin", infos[1].Name())
	infos, err = sbfiles.ReadDir(ctx, sb, "/data")
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.True(t, infos[0].IsDir())
	_, err = sbfiles.ReadDir(ctx, sb, "/nope")
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = sbfiles.ReadDir(ctx, sb, "/data/sub/a.txt")
	assert.ErrorIs(t, err, syscall.ENOTDIR)
}

// command = "" runs the image's own CMD (the scratch image's serves TCP),
// reachable through Endpoint on a daemon-chosen loopback port.
func TestImageCommandAndEndpoint(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.ScratchImage)
	s := spec("svc", dockertest.ScratchImage)
	s.ImageCommand = true
	s.Ports = []backend.Port{{Port: 8080}}
	sb := create(t, b, s)

	ep, err := backend.As[backend.Endpointer](sb)
	require.True(t, err)
	addr, eerr := ep.Endpoint(ctx, 8080)
	require.NoError(t, eerr)
	assert.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)

	assert.Equal(t, "testbin\n", dialUntilAnswer(t, ctx, addr))

	_, eerr = ep.Endpoint(ctx, 9999)
	assert.ErrorIs(t, eerr, backend.ErrNotFound)
}

// In "loopback" mode each session has an address of its own and its
// sandboxes keep their port numbers, so two sessions can both serve 8080.
func TestLoopbackPorts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	newBackend(t, dockertest.ScratchImage) // skips without Docker or image
	b, err := native.New(native.Config{PullPolicy: native.PullNever, Ports: native.PortsLoopback})
	require.NoError(t, err)
	defer b.Close()
	serve := func(session, name string, port int, fenced bool) string {
		s := spec(name, dockertest.ScratchImage)
		s.Session = session + "-" + testRun
		s.Command = []string{"/testbin", "serve", fmt.Sprint(port)}
		s.Ports = []backend.Port{{Port: port}}
		if fenced {
			// Its enforcer publishes the ports, on the session's address.
			s.Egress = &backend.Egress{Default: "deny"}
		}
		sb := create(t, b, s)
		ep, _ := backend.As[backend.Endpointer](sb)
		addr, err := ep.Endpoint(ctx, port)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprint(port), addr[strings.LastIndex(addr, ":")+1:], "the port is kept")
		assert.Equal(t, "testbin\n", dialUntilAnswer(t, ctx, addr))
		return addr[:strings.LastIndex(addr, ":")]
	}
	a1 := serve("a", "web", 8080, false)
	b1 := serve("b", "web", 8080, false)
	a2 := serve("a", "api", 8081, false)
	assert.NotEqual(t, a1, b1, "sessions share an address")
	assert.Equal(t, a1, a2, "one session, two addresses")
	assert.True(t, strings.HasPrefix(a1, "127.") && !strings.HasPrefix(a1, "127.0.0."), a1)
	// Sandboxes with an egress policy: in a session with others, and in
	// sessions of their own (the second finds the first's address taken).
	a3 := serve("a", "fenced", 8082, true)
	assert.Equal(t, a1, a3, "a sandbox with a policy got another address than its session's")
	c1 := serve("c", "fenced", 8080, true)
	d1 := serve("d", "fenced", 8080, true)
	assert.NotEqual(t, c1, d1, "sessions of sandboxes with policies share an address")
	assert.NotContains(t, []string{a1, b1}, c1)
}

// dialUntilAnswer reads what addr answers, retrying until the service is
// up or ctx ends (a readiness wait, not a timing assertion).
func dialUntilAnswer(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	for {
		require.NoError(t, ctx.Err(), "no answer from %s", addr)
		c, err := (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp", addr)
		if err == nil {
			b, _ := io.ReadAll(c)
			c.Close()
			if len(b) > 0 {
				return string(b)
			}
		}
		select { // poll interval
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Cancelling ctx kills the command inside the container, not only the
// client's stream.
func TestCancelKillsInsideContainer(t *testing.T) {
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	sb := create(t, b, spec("cancel", dockertest.BusyboxImage))
	ctx, cancel := context.WithCancel(t.Context())
	out := &lineWriter{lines: make(chan string, 4)}
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, backend.ExecRequest{Shell: "sleep 300 & echo started; wait", Stdout: out})
		done <- err
	}()
	require.Equal(t, "started", <-out.lines)
	cancel()
	err := <-done
	require.ErrorIs(t, err, context.Canceled)
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "ps -o comm | grep -c '^sleep' || true"})
	require.NoError(t, err)
	assert.Equal(t, "0\n", string(res.Stdout), "sleep survived the cancel")
}

// Every resource carries the contract's labels.
func TestLabelsAndInfo(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	s := spec("main", dockertest.BusyboxImage)
	s.Session = "sess-" + testRun
	s.Owner = "host:1:2"
	s.ReadOnlyRootfs = true
	sb := create(t, b, s)
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, sb.ID(), info.Labels[backend.LabelID])
	assert.Equal(t, native.Name, info.Labels[backend.LabelBackend])
	assert.Equal(t, "main", info.Labels[backend.LabelName])
	assert.Equal(t, s.Session, info.Labels[backend.LabelSession])
	assert.Equal(t, "host:1:2", info.Labels[backend.LabelOwner])
	assert.NotEmpty(t, info.Labels[backend.LabelExpiresAt])
	assert.Equal(t, backend.StateRunning, info.State)

	cli := dockertest.Client(t)
	c, err := cli.ContainerInspect(ctx, sb.(*native.Sandbox).ContainerID())
	require.NoError(t, err)
	assert.Equal(t, "/sbx-"+s.Session+"-main-"+sb.ID(), c.Name)
	require.NotNil(t, c.HostConfig.PidsLimit)
	assert.Equal(t, int64(native.DefaultPidsLimit), *c.HostConfig.PidsLimit)
	// Docker reports the option as given, Podman without ":true".
	assert.True(t, slices.Contains(c.HostConfig.SecurityOpt, "no-new-privileges:true") ||
		slices.Contains(c.HostConfig.SecurityOpt, "no-new-privileges"), "security options %q", c.HostConfig.SecurityOpt)
	assert.True(t, c.HostConfig.ReadonlyRootfs)
	// sbxd comes from the shared, read-only sbxd volume.
	var sbxdMounts int
	for _, m := range c.Mounts {
		if m.Destination == "/.sbx" {
			sbxdMounts++
			assert.False(t, m.RW, "/.sbx must be read-only")
			v, err := cli.VolumeInspect(ctx, m.Name)
			require.NoError(t, err)
			assert.Equal(t, native.Name, v.Labels[backend.LabelBackend], "volume %s", m.Name)
			assert.NotEmpty(t, v.Labels["sandboxkit.native.sbxd"], "volume %s", m.Name)
		}
	}
	assert.Equal(t, 1, sbxdMounts)

	// The read-only root is read-only, and the sandbox still works.
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "touch /x 2>/dev/null && echo writable || echo readonly"})
	require.NoError(t, err)
	assert.Equal(t, "readonly\n", string(res.Stdout))
}

func TestResourcesReachTheEngine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	s := spec("res", dockertest.BusyboxImage)
	s.Resources = backend.Resources{CPUs: 0.5, MemoryBytes: 256 << 20, PidsLimit: 100, ShmBytes: 32 << 20}
	s.CapDrop = []string{"NET_RAW"}
	s.Network = "none"
	s.Env = map[string]string{"A": "1"}
	s.WorkingDir = "/tmp"
	sb := create(t, b, s)
	c, err := dockertest.Client(t).ContainerInspect(ctx, sb.(*native.Sandbox).ContainerID())
	require.NoError(t, err)
	hc := c.HostConfig
	assert.Equal(t, int64(5e8), hc.NanoCPUs)
	assert.Equal(t, int64(256<<20), hc.Memory)
	assert.Equal(t, int64(100), *hc.PidsLimit)
	assert.Equal(t, int64(32<<20), hc.ShmSize)
	assert.Equal(t, container.NetworkMode("none"), hc.NetworkMode)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo $A; pwd"})
	require.NoError(t, err)
	assert.Equal(t, "1\n/tmp\n", string(res.Stdout))
}

func TestErrorsAreTranslated(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	_, err := b.Get(ctx, "000000000000")
	assert.ErrorIs(t, err, backend.ErrNotFound)

	_, err = b.Create(ctx, spec("x", "sandboxkit-test/does-not-exist:1"))
	assert.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "pull_policy")

	s := spec("x", dockertest.BusyboxImage)
	s.Runtime = "no-such-runtime"
	_, err = b.Create(ctx, s)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "no-such-runtime")

	// Options the engine rejects are named in the error.
	for option, mutate := range map[string]func(*backend.Spec){
		"cap_add":      func(s *backend.Spec) { s.CapAdd = []string{"NOT_A_CAPABILITY"} },
		"security_opt": func(s *backend.Spec) { s.SecurityOpt = []string{"bogus-option"} },
		"network":      func(s *backend.Spec) { s.Network = "sandboxkit-no-such-network" },
	} {
		s := spec("rejected", dockertest.BusyboxImage)
		mutate(&s)
		_, err := b.Create(ctx, s)
		if assert.Error(t, err, option) {
			assert.Contains(t, err.Error(), option)
		}
	}

	// A daemon that is not there is ErrUnavailable, with a fix.
	down, err := native.New(native.Config{Host: "unix://" + t.TempDir() + "/nothing.sock"})
	require.NoError(t, err)
	defer down.Close()
	_, err = down.List(ctx, backend.Filter{})
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.Contains(t, err.Error(), "docker_host")

	_, err = native.New(native.Config{PullPolicy: "sometimes"})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	for _, n := range []int{-1, native.MaxEgressSpares + 1} {
		_, err = native.New(native.Config{EgressSpares: n})
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.ErrorContains(t, err, fmt.Sprintf("egress_spares = %d", n))
	}
}

// lineWriter sends each complete line written to it.
type lineWriter struct {
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		select {
		case w.lines <- strings.TrimSuffix(line, "\n"):
		default:
		}
	}
}
