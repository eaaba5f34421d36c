package sbxd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// signalWriter closes first on its first write.
type signalWriter struct {
	once  sync.Once
	first chan struct{}
}

func newSignalWriter() *signalWriter { return &signalWriter{first: make(chan struct{})} }

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.first) })
	return len(p), nil
}

// testAgentKilledMidExec kills the agent while a command runs: the call
// fails with ErrAgentLost, and the next call starts a new agent.
func testAgentKilledMidExec(t *testing.T, c *sbxd.Client, kill func(pid int)) {
	ctx := t.Context()
	before, err := c.Agent(ctx)
	require.NoError(t, err)
	out := newSignalWriter()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, backend.ExecRequest{Shell: "echo started; exec sleep 60", Stdout: out})
		done <- err
	}()
	select {
	case <-out.first:
	case err := <-done:
		t.Fatalf("Exec ended before the agent was killed: %v", err)
	}
	kill(before.PID)
	select {
	case err := <-done:
		require.ErrorIs(t, err, sbxd.ErrAgentLost)
		t.Logf("in-flight call: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight Exec did not fail within 30 s of the agent's death")
	}
	res, err := c.Exec(ctx, backend.ExecRequest{Shell: "echo again"})
	require.NoError(t, err)
	assert.Equal(t, "again\n", string(res.Stdout))
	after, err := c.Agent(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, before.PID, after.PID, "the agent was not restarted")
	require.NoError(t, c.Fallback())
}

func TestAgentKilledMidExecLocal(t *testing.T) {
	c, _ := createLocal(t)
	testAgentKilledMidExec(t, c, func(pid int) { syscall.Kill(pid, syscall.SIGKILL) })
}

// attachOnly hides a sandbox's own agent (backend.AgentDialer), so the
// client starts one through Attach: one that can be killed (a container's
// init, which serves its own agent, cannot be, from inside).
type attachOnly struct {
	backend.Sandbox
	backend.Attacher
}

func TestAgentKilledMidExecNative(t *testing.T) {
	b := newNative(t, native.Config{})
	sb, err := b.Create(t.Context(), backend.Spec{Name: "sbxd-test", Image: dockertest.BusyboxImage, TTL: 30 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	c, err := sbxd.Wrap(t.Context(), attachOnly{sb, sb.(backend.Attacher)})
	require.NoError(t, err)
	defer c.Close()
	testAgentKilledMidExec(t, c, func(pid int) {
		res, err := c.Unwrap().Exec(t.Context(), backend.ExecRequest{Cmd: []string{"kill", "-KILL", strconv.Itoa(pid)}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "kill: %s", res.Stderr)
	})
}

// test100Concurrent runs 100 commands at once through one agent.
func test100Concurrent(t *testing.T, c *sbxd.Client) {
	ctx := t.Context()
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			n := strconv.Itoa(i)
			res, err := c.Exec(ctx, backend.ExecRequest{
				Cmd:   []string{"sh", "-c", `echo "out $1 $SBX_I"; echo "err $1" >&2; exit $(($1 % 7))`, "sh", n},
				Env:   map[string]string{"SBX_I": n},
				Stdin: strings.NewReader("unused"),
			})
			if !assert.NoError(t, err, "exec %d", i) {
				return
			}
			assert.Equal(t, i%7, res.ExitCode, "exec %d", i)
			assert.Equal(t, "out "+n+" "+n+"\n", string(res.Stdout), "exec %d", i)
			assert.Equal(t, "err "+n+"\n", string(res.Stderr), "exec %d", i)
		})
	}
	wg.Wait()
}

func TestConcurrentExecLocal(t *testing.T) {
	c, _ := createLocal(t)
	test100Concurrent(t, c)
}

func TestConcurrentExecNative(t *testing.T) {
	test100Concurrent(t, createNative(t, newNative(t, native.Config{})))
}

// countWriter counts and drops.
type countWriter struct{ n atomic.Int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n.Add(int64(len(p))); return len(p), nil }

// vmHWM returns a process's peak resident set (VmHWM) in KiB.
func vmHWM(t *testing.T, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// A command printing 1 GiB (256 MiB under the race detector, which makes
// the copy slow) through a Stdout writer: neither the client's heap nor the
// agent's resident set grows with it.
func TestLargeOutputMemoryBounded(t *testing.T) {
	c, _ := createLocal(t)
	ctx := t.Context()
	agent, err := c.Agent(ctx)
	require.NoError(t, err)
	size := int64(1 << 30)
	if raceEnabled {
		size = 256 << 20
	}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	out := &countWriter{}
	res, err := c.Exec(ctx, backend.ExecRequest{
		Cmd:    []string{"head", "-c", strconv.FormatInt(size, 10), "/dev/zero"},
		Stdout: out,
	})
	close(stop)
	<-sampled
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, size, out.n.Load())
	grown := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("client heap: %d KiB before, peak %d KiB; agent peak RSS %d KiB", base.HeapInuse>>10, peak.Load()>>10, vmHWM(t, agent.PID))
	assert.Less(t, grown, int64(64<<20), "the client's heap grew by %d MiB", grown>>20)
	assert.Less(t, vmHWM(t, agent.PID), int64(64<<10), "the agent's peak RSS")
}

// buildStale builds an sbxd that claims protocol 0.
func buildStale(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sbxd-stale")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X github.com/sandboxkit/sandboxkit/sbxd/agent.staleProtocol=0",
		"-o", bin, "github.com/sandboxkit/sandboxkit/cmd/sbxd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.Chmod(filepath.Dir(bin), 0o755))
	return bin
}

// A sandbox whose sbxd is stale gets a current one injected.
func TestStaleAgentIsReplacedNative(t *testing.T) {
	b := newNative(t, native.Config{SbxdPath: buildStale(t)})
	c := createNative(t, b, sbxd.WithLogger(noWarnings(t)))
	info, err := c.Agent(t.Context())
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(info.Path, "/tmp/.sbxd/"), "agent path %s, want an injected copy", info.Path)
	res, err := c.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", "fresh"}})
	require.NoError(t, err)
	assert.Equal(t, "fresh\n", string(res.Stdout))
}

// A stale agent with injection off, and an agent that cannot start at all,
// leave the client on the plain path, which still works.
func TestFallbackLocal(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func(t *testing.T) []sbxd.Option
	}{
		{"stale without injection", func(t *testing.T) []sbxd.Option {
			return []sbxd.Option{sbxd.WithAgentPath(buildStale(t)), sbxd.WithoutInjection()}
		}},
		{"missing binary without injection", func(t *testing.T) []sbxd.Option {
			return []sbxd.Option{sbxd.WithAgentPath("/nonexistent/sbxd"), sbxd.WithoutInjection()}
		}},
		{"no binary to inject", func(t *testing.T) []sbxd.Option {
			return []sbxd.Option{sbxd.WithAgentPath("/nonexistent/sbxd"), sbxd.WithBinary(func(string) ([]byte, error) {
				return nil, errors.New("no sbxd for this architecture")
			})}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newLocal(t)
			sb, err := b.Create(t.Context(), backend.Spec{Name: "fallback", TTL: time.Hour})
			require.NoError(t, err)
			defer sb.Destroy(context.Background())
			c, err := sbxd.Wrap(t.Context(), sb, tc.opts(t)...)
			require.NoError(t, err)
			require.Error(t, c.Fallback())
			t.Logf("fallback: %v", c.Fallback())
			res, err := c.Exec(t.Context(), backend.ExecRequest{Shell: "echo plain"})
			require.NoError(t, err)
			assert.Equal(t, "plain\n", string(res.Stdout))
			require.NoError(t, sbfiles.WriteFile(t.Context(), c, "f.txt", strings.NewReader("x"), 0o644))
			_, err = c.Glob(t.Context(), "*", ".")
			assert.ErrorIs(t, err, errors.ErrUnsupported)
		})
	}
}

// A background child that keeps the command's stdout open (and keeps
// writing) does not keep Exec waiting.
func TestBackgroundChildHoldsOutputLocal(t *testing.T) {
	c, _ := createLocal(t)
	for _, script := range []string{
		`sleep 30 & echo "bg $!" >&2; echo hi`,
		`yes >/dev/null & a=$!; yes & echo "bg $a $!" >&2; echo hi >&2`,
	} {
		done := make(chan struct{})
		var res backend.ExecResult
		var err error
		go func() {
			defer close(done)
			res, err = c.Exec(t.Context(), backend.ExecRequest{Shell: script, OutputLimit: 1 << 20})
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: Exec still waits 20 s after the command exited", script)
		}
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.Contains(t, string(res.Stdout)+string(res.Stderr), "hi")
		for line := range strings.Lines(string(res.Stderr)) {
			if pids, ok := strings.CutPrefix(strings.TrimSpace(line), "bg "); ok {
				c.Exec(t.Context(), backend.ExecRequest{Cmd: append([]string{"kill", "-KILL"}, strings.Fields(pids)...)})
			}
		}
	}
}

// A sandbox without sbxd at the agent path gets one copied in (from
// SBX_SBXD_PATH here), and a second client reuses that copy.
func TestInjectionLocal(t *testing.T) {
	b := newLocal(t)
	sb, err := b.Create(t.Context(), backend.Spec{Name: "inject", TTL: time.Hour})
	require.NoError(t, err)
	defer sb.Destroy(context.Background())
	dir := t.TempDir()
	opts := []sbxd.Option{sbxd.WithAgentPath("/nonexistent/sbxd"), sbxd.WithInjectDir(dir), sbxd.WithLogger(noWarnings(t))}
	for range 2 {
		c, err := sbxd.Wrap(t.Context(), sb, opts...)
		require.NoError(t, err)
		info, err := c.Agent(t.Context())
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(info.Path, dir+"/"), "agent at %s", info.Path)
		c.Close()
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	n := 0
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "jobs-") {
			n++
		}
	}
	assert.Equal(t, 1, n, "one injected copy")
}

// Agents injected into several new local sandboxes at once all start, as
// a pool's keeper starts them: a copy being written while another
// goroutine forks used to fail to start with "text file busy".
func TestConcurrentInjectionLocal(t *testing.T) {
	b := newLocal(t)
	const n = 8
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				sb, err := b.Create(t.Context(), backend.Spec{Name: fmt.Sprint("inject-", round, "-", i), TTL: time.Hour})
				if !assert.NoError(t, err) {
					return
				}
				defer sb.Destroy(context.Background())
				c, err := sbxd.Wrap(t.Context(), sb, sbxd.WithAgentPath("/nonexistent/sbxd"), sbxd.WithInjectDir(t.TempDir()))
				if !assert.NoError(t, err) {
					return
				}
				defer c.Close()
				_, err = c.Agent(t.Context())
				assert.NoError(t, err, "round %d, sandbox %d", round, i)
			})
		}
		wg.Wait()
	}
}
