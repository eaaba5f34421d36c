package session_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

// A session on a wrapped backend works as on the bare one: sbxd's wrapper
// claims no volumes or networks that local lacks, so Launch warns and goes
// on instead of failing, and Destroy removes the session.
func TestLaunchAndDestroyOnWrappedLocal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reg := config.NewRegistry()
	reg.Register(local.Factory)
	cfg, err := reg.ParseConfig([]byte(`
[sandbox]
backend = "local"
[sandbox.local]
state_dir = "state"
[sandbox.sandboxes.main]
[sandbox.sandboxes.worker]
`), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)
	bare, err := cfg.Open(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { bare.Close() })
	wrapped := sbxd.WrapBackend(bare)

	s, err := (&session.Launcher{Config: cfg, Backend: wrapped}).Launch(ctx)
	require.NoError(t, err)
	assert.Contains(t, s.Warnings, "the local backend has no shared volumes: no /shared, /bash_tools or /sandbox_scripts in the sandboxes")

	sb, err := s.Sandbox("worker")
	require.NoError(t, err)
	_, isAgent := sb.(*sbxd.Client)
	assert.True(t, isAgent, "the session's sandboxes come from the wrapper")
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo $SBX_SESSION_ID"})
	require.NoError(t, err)
	assert.Equal(t, s.ID+"\n", string(res.Stdout))

	infos, err := wrapped.List(ctx, backend.Filter{Session: s.ID})
	require.NoError(t, err)
	assert.Len(t, infos, 2)
	require.NoError(t, session.Destroy(ctx, wrapped, s.ID))
	infos, err = bare.List(ctx, backend.Filter{Session: s.ID})
	require.NoError(t, err)
	assert.Empty(t, infos, "Destroy through the wrapper removes every sandbox")
	require.NoError(t, s.Close())
}
