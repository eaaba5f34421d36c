package server_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// clock is a controllable clock for the TTL tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func ttlServer(t *testing.T, b backend.Backend, c *clock) *server.Server {
	return ttlServerMax(t, b, c, 2*time.Hour)
}

func ttlServerMax(t *testing.T, b backend.Backend, c *clock, maxLifetime time.Duration) *server.Server {
	return newServer(t, b, func(o *server.Options) {
		o.Now = c.Now
		o.ReapInterval = -1 // the test calls Reap
		o.IdleTTL = 30 * time.Minute
		o.MaxLifetime = maxLifetime
	})
}

func alive(t *testing.T, b backend.Backend, id string) bool {
	t.Helper()
	_, err := b.Get(context.Background(), id)
	if err != nil {
		require.ErrorIs(t, err, backend.ErrNotFound)
		return false
	}
	return true
}

func TestIdleTTLRenewedByEveryToolCall(t *testing.T) {
	b, c := localBackend(t), newClock()
	s := ttlServerMax(t, b, c, 24*time.Hour)
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	ctx := context.Background()

	id := servertest.Create(t, call, nil)
	for _, tool := range []struct {
		name string
		args map[string]any
	}{
		{"execute", map[string]any{"command": "true"}},
		{"ls", map[string]any{}},
		{"write_file", map[string]any{"path": "f", "content": "x"}},
		{"read_file", map[string]any{"path": "f"}},
		{"connect_sandbox", map[string]any{}},
	} {
		c.Add(29 * time.Minute)
		assert.Empty(t, s.Reap(ctx), "before %s", tool.name)
		tool.args["sandbox_id"] = id
		servertest.Must(t, call, tool.name, tool.args)
	}
	c.Add(29 * time.Minute)
	assert.Empty(t, s.Reap(ctx))
	assert.True(t, alive(t, b, id))
	c.Add(time.Minute)
	assert.Equal(t, []string{id}, s.Reap(ctx))
	assert.False(t, alive(t, b, id))
	assert.Contains(t, servertest.Fails(t, call, "connect_sandbox", map[string]any{"sandbox_id": id}), "was not found")
}

func TestIdleTTLPerSandbox(t *testing.T) {
	b, c := localBackend(t), newClock()
	s := ttlServer(t, b, c)
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	short := servertest.Create(t, call, map[string]any{"timeout_minutes": 5})
	long := servertest.Create(t, call, nil)
	c.Add(5 * time.Minute)
	// A call finds a sandbox expired before the reaper does.
	assert.Contains(t, servertest.Fails(t, call, "execute", map[string]any{"sandbox_id": short, "command": "true"}), "was not found")
	assert.False(t, alive(t, b, short))
	assert.Empty(t, s.Reap(context.Background()))
	assert.True(t, alive(t, b, long))
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": long})
	assertNoSandboxes(t, b)
}

func TestHardMaximumLifetime(t *testing.T) {
	b, c := localBackend(t), newClock()
	s := ttlServer(t, b, c)
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	id := servertest.Create(t, call, map[string]any{"timeout_minutes": 600}) // capped at max_lifetime
	for range 4 {                                                            // 100 minutes of activity
		c.Add(25 * time.Minute)
		servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "true"})
		assert.Empty(t, s.Reap(context.Background()))
	}
	c.Add(25 * time.Minute) // 125 minutes: past the 2 hour limit
	assert.Contains(t, servertest.Fails(t, call, "execute", map[string]any{"sandbox_id": id, "command": "true"}), "was not found")
	assertNoSandboxes(t, b)

	// The reaper applies the limit too, also to a sandbox in use.
	id = servertest.Create(t, call, nil)
	c.Add(2*time.Hour + time.Minute)
	assert.Equal(t, []string{id}, s.Reap(context.Background()))
	assertNoSandboxes(t, b)
}

func TestCallInFlightIsActivity(t *testing.T) {
	b, c := localBackend(t), newClock()
	s := ttlServer(t, b, c)
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	id := servertest.Create(t, call, nil)
	dir := t.TempDir()
	started, release := filepath.Join(dir, "started"), filepath.Join(dir, "go")
	var wg sync.WaitGroup
	wg.Go(func() {
		servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id,
			"command": "touch " + started + "; while [ ! -e " + release + " ]; do sleep 0.05; done"})
	})
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil })
	c.Add(45 * time.Minute)
	assert.Empty(t, s.Reap(context.Background()), "a sandbox running a call is not idle")
	require.NoError(t, os.WriteFile(release, nil, 0o644))
	wg.Wait()
	c.Add(29 * time.Minute)
	assert.Empty(t, s.Reap(context.Background()), "the call's end renews the TTL")
	assert.True(t, alive(t, b, id))
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
}

func TestRestartAdoptsWithFreshWindow(t *testing.T) {
	b, c := localBackend(t), newClock()
	s1 := ttlServer(t, b, c)
	id := servertest.Create(t, servertest.HTTP(serveHTTP(t, s1), "", "alice"), map[string]any{"timeout_minutes": 10})
	require.NoError(t, s1.Close())
	assert.True(t, alive(t, b, id), "sandboxes outlive the server")

	c.Add(9 * time.Minute)
	s2 := ttlServer(t, b, c)
	n, err := s2.Adopt(context.Background(), "")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	c.Add(9 * time.Minute) // 18 minutes since the last call, 9 since adoption
	assert.Empty(t, s2.Reap(context.Background()))

	url := serveHTTP(t, s2)
	assert.Contains(t, servertest.Fails(t, servertest.HTTP(url, "", "mallory"), "connect_sandbox", map[string]any{"sandbox_id": id}), "was not found")
	alice := servertest.HTTP(url, "", "alice")
	assert.Contains(t, servertest.Must(t, alice, "connect_sandbox", map[string]any{"sandbox_id": id}),
		"removed after 10 minutes without tool calls", "the idle TTL survives the restart")
	assert.Contains(t, servertest.Must(t, alice, "list_sandboxes", map[string]any{}), id)
	c.Add(10 * time.Minute)
	assert.Equal(t, []string{id}, s2.Reap(context.Background()))
	assertNoSandboxes(t, b)
}

// TestReaperRuns checks the reaper goroutine on the real clock.
func TestReaperRuns(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) {
		o.IdleTTL = 200 * time.Millisecond
		o.ReapInterval = 20 * time.Millisecond
	})
	servertest.Create(t, servertest.HTTP(serveHTTP(t, s), "", "c"), nil)
	waitFor(t, func() bool { return len(must(b.List(context.Background(), backend.Filter{}))) == 0 })
}

// flakyBackend fails List until up is set, as a backend that comes back.
type flakyBackend struct {
	backend.Backend
	up *atomic.Bool
}

func (f flakyBackend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	if !f.up.Load() {
		return nil, backend.ErrUnavailable
	}
	return f.Backend.List(ctx, filter)
}

// TestAdoptRetried: a server that could not adopt at start (backend down)
// adopts, and so reaps, once the backend is back.
func TestAdoptRetried(t *testing.T) {
	b := localBackend(t)
	s1 := newServer(t, b, func(o *server.Options) { o.IdleTTL = 100 * time.Millisecond }) // kept as 1s
	servertest.Create(t, servertest.HTTP(serveHTTP(t, s1), "", "c"), nil)
	require.NoError(t, s1.Close())

	up := new(atomic.Bool)
	s2 := newServer(t, flakyBackend{b, up}, func(o *server.Options) {
		o.IdleTTL = 100 * time.Millisecond
		o.ReapInterval = 20 * time.Millisecond
	})
	_, err := s2.Adopt(context.Background(), "")
	require.ErrorIs(t, err, backend.ErrUnavailable)
	require.Len(t, must(b.List(context.Background(), backend.Filter{})), 1)
	up.Store(true)
	waitFor(t, func() bool { return len(must(b.List(context.Background(), backend.Filter{}))) == 0 })
}

// TestInstancesKeepApart: two servers on one backend with different
// instance names neither adopt nor reap each other's sandboxes.
func TestInstancesKeepApart(t *testing.T) {
	b, c := localBackend(t), newClock()
	named := func(name string) *server.Server {
		s := newServer(t, b, func(o *server.Options) {
			o.Instance, o.Now, o.ReapInterval = name, c.Now, time.Hour
		})
		return s
	}
	a, other := named("agents-a"), named("agents-b")
	idA := servertest.Create(t, servertest.HTTP(serveHTTP(t, a), "", "alice"), map[string]any{"timeout_minutes": 10})
	n, err := other.Adopt(context.Background(), "")
	require.NoError(t, err)
	assert.Zero(t, n, "a server adopted another instance's sandbox")
	c.Add(11 * time.Minute)
	assert.Empty(t, other.Reap(context.Background()), "a server reaped another instance's sandbox")
	assert.True(t, alive(t, b, idA))
	assert.Equal(t, []string{idA}, a.Reap(context.Background()))

	cfg, err := sandboxkit.ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n[sandbox.serve]\ninstance = \"agents-a\"\n"), "")
	require.NoError(t, err)
	opts, _, err := server.ConfigOptions(cfg)
	require.NoError(t, err)
	assert.Equal(t, "agents-a", opts.Instance, "[sandbox.serve] instance")

	_, err = server.New(server.Options{Backend: b, Spec: mainSpec, Instance: "bad name"})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `instance "bad name"`)
}
