package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
	"github.com/sandboxkit/sandboxkit/session"
)

// poolServer is a server over b keeping a pool of size ready sandboxes of
// type "main", full when it returns.
func poolServer(t *testing.T, b backend.Backend, size int, edit func(*server.Options)) *server.Server {
	t.Helper()
	s := newServer(t, b, func(o *server.Options) {
		o.Pools = map[string]config.PoolConfig{"main": {Size: size}}
		if edit != nil {
			edit(o)
		}
	})
	waitFor(t, func() bool { return poolOf(t, s, "main").Ready == size })
	return s
}

// poolOf returns the figures of s's pool of type typ.
func poolOf(t *testing.T, s *server.Server, typ string) session.PoolStats {
	t.Helper()
	for _, st := range s.PoolStats() {
		if st.Entry == typ {
			return st
		}
	}
	t.Fatalf("no pool of type %s in %+v", typ, s.PoolStats())
	return session.PoolStats{}
}

// readyState is the state of a server pool's ready sandboxes: its pools
// are private (session.PoolOptions.Private), so they stay "making", which
// no other process claims.
const readyState = backend.PoolMaking

// members lists the pool's sandboxes in state (all states when "").
func members(t *testing.T, b backend.Backend, key, state string) []backend.Info {
	t.Helper()
	labels := map[string]string{backend.LabelPool: key}
	if state != "" {
		labels[backend.LabelPoolState] = state
	}
	infos, err := b.List(context.Background(), backend.Filter{Labels: labels})
	require.NoError(t, err)
	return infos
}

func ids(infos []backend.Info) []string {
	var out []string
	for _, i := range infos {
		out = append(out, i.ID)
	}
	return out
}

// TestPoolCreateClaimsReadyMember: create_sandbox on a full pool hands out
// one of its ready sandboxes, now labelled as the conversation's, and the
// keeper makes a replacement.
func TestPoolCreateClaimsReadyMember(t *testing.T) {
	b := localBackend(t)
	s := poolServer(t, b, 2, func(o *server.Options) { o.MaxLifetime = 3 * time.Hour })
	key := poolOf(t, s, "main").Pool
	ready := members(t, b, key, readyState)
	require.Len(t, ready, 2)
	for _, m := range ready {
		assert.Equal(t, server.DefaultInstance, m.Labels[server.LabelInstance])
		assert.Equal(t, "main", m.Labels[server.LabelType])
		assert.Empty(t, m.Labels[server.LabelConversation], "a ready sandbox belongs to no conversation")
	}

	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	start := time.Now()
	id := servertest.Create(t, call, map[string]any{"timeout_minutes": 5})
	t.Logf("create_sandbox from a full pool: %s", time.Since(start))
	assert.Contains(t, ids(ready), id, "the sandbox must be one of the ready members")

	// The claim of a private pool is recorded in the background.
	var info backend.Info
	waitFor(t, func() bool {
		var err error
		info, err = must(b.Get(context.Background(), id)).Info(context.Background())
		require.NoError(t, err)
		return info.Labels[backend.LabelPoolState] == backend.PoolClaimed
	})
	assert.Equal(t, server.OwnerKey("conv:c"), info.Labels[server.LabelConversation])
	assert.Equal(t, "300", info.Labels[server.LabelIdleTTL])
	assert.Equal(t, server.DefaultInstance, info.Labels[server.LabelInstance])
	assert.Equal(t, "main", info.Labels[server.LabelType])
	assert.Equal(t, backend.PoolClaimed, info.Labels[backend.LabelPoolState])
	assert.Empty(t, info.Owner, "a claimed sandbox is the conversation's, not the keeper's")
	assert.WithinDuration(t, time.Now().Add(3*time.Hour), info.ExpiresAt, time.Minute, "the backend TTL is max_lifetime from the claim")

	out := servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "echo pooled"})
	assert.Contains(t, out, "pooled\nExit code: 0")
	assert.Contains(t, servertest.Must(t, call, "list_sandboxes", map[string]any{}), id)

	waitFor(t, func() bool { return poolOf(t, s, "main").Ready == 2 })
	st := poolOf(t, s, "main")
	assert.Equal(t, int64(1), st.Claimed)
	assert.Equal(t, int64(3), st.Created)
	assert.Zero(t, st.ColdFallbacks)
	assert.Len(t, members(t, b, key, readyState), 2, "the keeper refilled the pool")

	// delete_sandbox releases it to the pool, which removes it (local's
	// reset is not clean); at once it is gone for the conversation.
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	assert.Contains(t, servertest.Must(t, call, "list_sandboxes", map[string]any{}), "no sandboxes")
	assert.Contains(t, servertest.Fails(t, call, "connect_sandbox", map[string]any{"sandbox_id": id}), "was not found")
	waitFor(t, func() bool { return !alive(t, b, id) })
}

// TestPoolAgentTurn: the agent's whole turn works on pooled sandboxes, with
// sbxd (the pool's connected agent) and without.
func TestPoolAgentTurn(t *testing.T) {
	for _, noAgent := range []bool{false, true} {
		t.Run(map[bool]string{false: "sbxd", true: "no-agent"}[noAgent], func(t *testing.T) {
			b := localBackend(t)
			s := poolServer(t, b, 1, func(o *server.Options) { o.NoAgent = noAgent })
			servertest.AgentTurn(t, servertest.HTTP(serveHTTP(t, s), "", "c"), "")
			assert.Equal(t, int64(1), poolOf(t, s, "main").Claimed)
			require.NoError(t, s.Close())
			assertNoSandboxes(t, b)
		})
	}
}

// TestPoolIsolation: a pooled sandbox is its conversation's alone, and a
// ready one nobody's.
func TestPoolIsolation(t *testing.T) {
	b := localBackend(t)
	s := poolServer(t, b, 2, nil)
	url := serveHTTP(t, s)
	alice, mallory := servertest.HTTP(url, "", "alice"), servertest.HTTP(url, "", "mallory")
	id := servertest.Create(t, alice, nil)
	servertest.Must(t, alice, "write_file", map[string]any{"sandbox_id": id, "path": "secret.txt", "content": "alice's\n"})
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"connect_sandbox", map[string]any{}},
		{"read_file", map[string]any{"path": "secret.txt"}},
		{"execute", map[string]any{"command": "cat secret.txt"}},
		{"delete_sandbox", map[string]any{}},
	} {
		c.args["sandbox_id"] = id
		assert.Contains(t, servertest.Fails(t, mallory, c.tool, c.args), "was not found", c.tool)
	}
	assert.Contains(t, servertest.Must(t, mallory, "list_sandboxes", map[string]any{}), "no sandboxes")
	assert.Contains(t, servertest.Must(t, alice, "read_file", map[string]any{"sandbox_id": id, "path": "secret.txt"}), "alice's")

	// Mallory's own sandbox comes from the pool too, and is another one.
	other := servertest.Create(t, mallory, nil)
	assert.NotEqual(t, id, other)
	assert.Contains(t, servertest.Fails(t, alice, "connect_sandbox", map[string]any{"sandbox_id": other}), "was not found")

	// A ready member is no conversation's. (A claimed member still shows
	// the pool's "making" label until its claim is recorded, which a
	// private pool does once the conversation's first calls are over: it
	// is left out.)
	waitFor(t, func() bool { return poolOf(t, s, "main").Ready == 2 })
	ready := 0
	for _, m := range members(t, b, poolOf(t, s, "main").Pool, readyState) {
		if m.ID == id || m.ID == other {
			continue
		}
		ready++
		assert.Contains(t, servertest.Fails(t, alice, "connect_sandbox", map[string]any{"sandbox_id": m.ID}), "was not found")
	}
	assert.Equal(t, 2, ready, "ready members")
}

// TestPoolRestartAdopts: Close removes the ready sandboxes and keeps the
// claimed one, which a restarted server adopts for its conversation.
func TestPoolRestartAdopts(t *testing.T) {
	b := localBackend(t)
	s1 := poolServer(t, b, 2, nil)
	key := poolOf(t, s1, "main").Pool
	id := servertest.Create(t, servertest.HTTP(serveHTTP(t, s1), "", "alice"), nil)
	servertest.Must(t, servertest.HTTP(serveHTTP(t, s1), "", "alice"), "write_file",
		map[string]any{"sandbox_id": id, "path": "notes.txt", "content": "kept\n"})
	require.NoError(t, s1.Close())
	assert.Equal(t, []string{id}, ids(members(t, b, key, "")), "Close removes the ready sandboxes and keeps the claimed one")

	s2 := poolServer(t, b, 1, nil)
	n, err := s2.Adopt(context.Background(), "")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "ready sandboxes are not adopted")
	url := serveHTTP(t, s2)
	assert.Contains(t, servertest.Fails(t, servertest.HTTP(url, "", "mallory"), "connect_sandbox", map[string]any{"sandbox_id": id}), "was not found")
	alice := servertest.HTTP(url, "", "alice")
	assert.Contains(t, servertest.Must(t, alice, "connect_sandbox", map[string]any{"sandbox_id": id}), "Connected")
	assert.Contains(t, servertest.Must(t, alice, "read_file", map[string]any{"sandbox_id": id, "path": "notes.txt"}), "kept")
	// Adopted, it is removed at once, as sandboxes made without a pool.
	servertest.Must(t, alice, "delete_sandbox", map[string]any{"sandbox_id": id})
	assert.False(t, alive(t, b, id))
	require.NoError(t, s2.Close())
	assertNoSandboxes(t, b)
}

// TestPoolShutdown: with delete_on_shutdown the claimed sandboxes go as
// well, and nothing of the pool is left.
func TestPoolShutdown(t *testing.T) {
	b := localBackend(t)
	s := poolServer(t, b, 2, func(o *server.Options) { o.DeleteOnShutdown = true })
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	servertest.Create(t, call, nil)
	servertest.Create(t, call, nil)
	servertest.Create(t, call, nil) // the pool may be empty: made cold, or claimed just made
	require.NoError(t, s.Close())
	assertNoSandboxes(t, b)
	assert.Contains(t, servertest.Fails(t, call, "create_sandbox", nil), "shutting down")
}

// TestPoolExpiry: a pooled sandbox past its idle TTL is released to the
// pool (removed) by the reaper, and by a call that finds it expired.
func TestPoolExpiry(t *testing.T) {
	b, c := localBackend(t), newClock()
	s := poolServer(t, b, 2, func(o *server.Options) {
		o.Now = c.Now
		o.ReapInterval = -1
	})
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	reaped := servertest.Create(t, call, map[string]any{"timeout_minutes": 5})
	called := servertest.Create(t, call, map[string]any{"timeout_minutes": 10})
	c.Add(6 * time.Minute)
	assert.Equal(t, []string{reaped}, s.Reap(context.Background()))
	c.Add(5 * time.Minute)
	assert.Contains(t, servertest.Fails(t, call, "execute", map[string]any{"sandbox_id": called, "command": "true"}), "was not found")
	assert.Contains(t, servertest.Must(t, call, "list_sandboxes", map[string]any{}), "no sandboxes")
	waitFor(t, func() bool { return !alive(t, b, reaped) && !alive(t, b, called) })
}

// TestPoolOnlyWherePooled: a type without a pool makes its sandboxes as
// before, next to a pooled type.
func TestPoolOnlyWherePooled(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) {
		o.Types = []string{"main", "worker"}
		o.Pools = map[string]config.PoolConfig{"worker": {Size: 1}}
	})
	waitFor(t, func() bool { return poolOf(t, s, "worker").Ready == 1 })
	assert.Len(t, s.PoolStats(), 1)
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	id := servertest.Create(t, call, nil)
	info := must(must(b.Get(context.Background(), id)).Info(context.Background()))
	assert.Empty(t, info.Labels[backend.LabelPool], "main has no pool")
	assert.Equal(t, server.OwnerKey("conv:c"), info.Labels[server.LabelConversation])
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	assert.False(t, alive(t, b, id), "removed before delete_sandbox answers, as before")

	worker := servertest.Create(t, call, map[string]any{"type": "worker"})
	info = must(must(b.Get(context.Background(), worker)).Info(context.Background()))
	assert.Equal(t, poolOf(t, s, "worker").Pool, info.Labels[backend.LabelPool])
	assert.Equal(t, "worker", info.Labels[server.LabelType])
}

// TestPoolsEndpoint: GET /pools returns every pool's figures and needs the
// API key.
func TestPoolsEndpoint(t *testing.T) {
	b := localBackend(t)
	s := poolServer(t, b, 1, func(o *server.Options) { o.APIKey = "k3y" })
	url := serveHTTP(t, s)
	servertest.Create(t, servertest.HTTP(url, "k3y", "c"), nil)
	getPools := func(key string) (int, []byte) { return get(t, url, "/pools", key) }
	for _, key := range []string{"", "wrong"} {
		code, _ := getPools(key)
		assert.Equal(t, http.StatusUnauthorized, code, "key %q", key)
	}
	code, body := getPools("k3y")
	require.Equal(t, http.StatusOK, code, "%s", body)
	var got struct {
		Pools []map[string]any `json:"pools"`
	}
	require.NoError(t, json.Unmarshal(body, &got), "%s", body)
	require.Len(t, got.Pools, 1, "%s", body)
	p := got.Pools[0]
	assert.Equal(t, "main", p["entry"])
	assert.Equal(t, "local", p["backend"])
	assert.EqualValues(t, 1, p["size"])
	assert.EqualValues(t, 1, p["claimed"])
	assert.Equal(t, true, p["keeping"])
	for _, k := range []string{"ready", "cold_fallbacks", "refill_per_minute", "oldest_age_sec"} {
		assert.Contains(t, p, k)
	}

	// A server without pools answers an empty list.
	plain := newServer(t, b, nil)
	resp, err := http.Get(serveHTTP(t, plain) + "/pools")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ = io.ReadAll(resp.Body)
	assert.JSONEq(t, `{"pools":[]}`, string(body))
}

// TestPoolOptions: pools are refused for unknown types and on backends
// that cannot claim; ConfigOptions takes them from the entries' [pool].
func TestPoolOptions(t *testing.T) {
	b := localBackend(t)
	_, err := server.New(server.Options{Backend: b, Spec: mainSpec, Pools: map[string]config.PoolConfig{"mian": {Size: 1}}})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `pool of type "mian", which is not one of Types (main)`)

	_, err = server.New(server.Options{Backend: noClaimBackend{b}, Spec: mainSpec, Pools: map[string]config.PoolConfig{"main": {Size: 1}}})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorContains(t, err, "remove the entry's [pool] table")

	path := filepath.Join(t.TempDir(), "sandbox.toml")
	require.NoError(t, os.WriteFile(path, []byte(`[sandbox]
backend = "local"
[sandbox.sandboxes.main]
[sandbox.sandboxes.main.pool]
size = 3
max_idle = "10m"
[sandbox.sandboxes.worker]
`), 0o644))
	cfg, err := sandboxkit.LoadConfig(path)
	require.NoError(t, err)
	opts, _, err := server.ConfigOptions(cfg)
	require.NoError(t, err)
	require.Len(t, opts.Pools, 1, "worker has no [pool]")
	assert.Equal(t, 3, opts.Pools["main"].Size)
	assert.Equal(t, 10*time.Minute, opts.Pools["main"].MaxIdle)
}

// noClaimBackend hides the local backend's Claimer, as a backend without
// claims (opensandbox) is.
type noClaimBackend struct{ backend.Backend }
