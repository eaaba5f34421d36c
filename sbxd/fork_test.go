package sbxd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// Forks through a Client come back as Clients made with the parent's
// options, each with an agent of its own; snapshots are the wrapped
// sandbox's, found through Unwrap.
func TestForkThroughClient(t *testing.T) {
	ctx := t.Context()
	b := newLocal(t)
	sb, err := b.Create(ctx, backend.Spec{Name: "sbxd-fork", TTL: 30 * time.Minute})
	require.NoError(t, err)
	c, err := sbxd.Wrap(ctx, sb, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(noWarnings(t)))
	require.NoError(t, err)
	t.Cleanup(func() { c.Destroy(context.Background()) })
	require.NoError(t, c.Fallback(), "the parent's agent did not start")
	require.NoError(t, sbfiles.WriteFile(ctx, c, "f.txt", strings.NewReader("parent\n"), 0o644))

	f, ok := backend.As[backend.Forker](c)
	require.True(t, ok)
	require.Same(t, c, f, "the Client forks itself, to wrap the forks")
	forks, err := f.Fork(ctx, backend.ForkRequest{N: 2})
	require.NoError(t, err)
	require.Len(t, forks, 2)
	for i, fk := range forks {
		t.Cleanup(func() { fk.Destroy(context.Background()) })
		fc, ok := fk.(*sbxd.Client)
		require.True(t, ok, "fork %d is a %T, want *sbxd.Client", i, fk)
		require.NoError(t, fc.Fallback(), "fork %d's agent did not start (the parent's was started at once)", i)
		info, err := fc.Agent(ctx)
		require.NoError(t, err)
		parentAgent, err := c.Agent(ctx)
		require.NoError(t, err)
		assert.NotEqual(t, parentAgent.PID, info.PID, "fork %d talks to the parent's agent", i)
		res, err := fc.Exec(ctx, backend.ExecRequest{Shell: "cat f.txt; echo fork > f.txt"})
		require.NoError(t, err)
		assert.Equal(t, "parent\n", string(res.Stdout), "fork %d's copy of the parent's file", i)
		assert.Equal(t, "sbxd-fork", mustInfo(t, fc).Name)
		assert.Equal(t, sb.ID(), mustInfo(t, fc).Labels[backend.LabelForkOf])
	}
	res, err := c.Exec(ctx, backend.ExecRequest{Shell: "cat f.txt"})
	require.NoError(t, err)
	assert.Equal(t, "parent\n", string(res.Stdout), "a fork's write shows in the parent")

	_, err = f.Fork(ctx, backend.ForkRequest{N: 0})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig, "the wrapped backend's own check")

	sn, ok := backend.As[backend.Snapshotter](c)
	require.True(t, ok, "the wrapped sandbox's Snapshotter through Unwrap")
	snap, err := sn.Snapshot(ctx, backend.SnapshotRequest{Ref: "sbxd-test"})
	require.NoError(t, err)
	from, err := sbxd.WrapBackend(b, sbxd.WithAgentPath(agentBin)).Create(ctx, backend.Spec{Image: snap.Ref, TTL: 30 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { from.Destroy(context.Background()) })
	res, err = from.Exec(ctx, backend.ExecRequest{Shell: "cat f.txt"})
	require.NoError(t, err)
	assert.Equal(t, "parent\n", string(res.Stdout), "the snapshot's file")
}

// Forking through a Client whose sandbox cannot fork is ErrUnsupported,
// naming the backend. noForker is an in-process stand-in: every built-in
// backend here can fork.
func TestForkUnsupportedThroughClient(t *testing.T) {
	_, sb := createLocal(t)
	c, err := sbxd.Wrap(t.Context(), noForker{sb}, sbxd.WithLazyStart())
	require.NoError(t, err)
	_, err = c.Fork(t.Context(), backend.ForkRequest{N: 1})
	require.True(t, errors.Is(err, errors.ErrUnsupported), "got %v", err)
	assert.Contains(t, err.Error(), "backend local cannot fork")
}

// noForker hides every optional capability of the sandbox it holds.
type noForker struct{ backend.Sandbox }

func mustInfo(t *testing.T, sb backend.Sandbox) backend.Info {
	t.Helper()
	info, err := sb.Info(t.Context())
	require.NoError(t, err)
	return info
}
