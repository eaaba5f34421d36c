package local_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

func newBackend(t *testing.T) *local.Backend {
	t.Helper()
	b, err := local.New(local.Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	return b
}

func TestSmokeExec(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	sb, err := b.Create(ctx, backend.Spec{Name: "main"})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo hi; echo err >&2; exit 3"})
	require.NoError(t, err)
	assert.Equal(t, 3, res.ExitCode)
	assert.Equal(t, "hi\n", string(res.Stdout))
	assert.Equal(t, "err\n", string(res.Stderr))
}

// A second Backend on the same state dir (a restarted host program) finds
// the sandbox, its labels and its working directory.
func TestSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b1, err := local.New(local.Config{StateDir: dir})
	require.NoError(t, err)
	sb, err := b1.Create(ctx, backend.Spec{Name: "main", Session: "s1", Labels: map[string]string{"team": "x"}, TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, sbfiles.WriteFile(ctx, sb, "note.txt", strings.NewReader("kept"), 0o644))
	require.NoError(t, b1.Close())

	b2, err := local.New(local.Config{StateDir: dir})
	require.NoError(t, err)
	again, err := b2.Get(ctx, sb.ID())
	require.NoError(t, err)
	res, err := again.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "note.txt"}})
	require.NoError(t, err)
	assert.Equal(t, "kept", string(res.Stdout))
	infos, err := b2.List(ctx, backend.Filter{Session: "s1", Labels: map[string]string{"team": "x"}})
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, "main", infos[0].Name)
	assert.False(t, infos[0].ExpiresAt.IsZero())
	require.NoError(t, again.Destroy(ctx))
	_, err = b1.Get(ctx, sb.ID())
	assert.ErrorIs(t, err, backend.ErrNotFound)
}

// Destroy kills what the sandbox left running: the entry's command and a
// background server started by Exec that moved to a session of its own.
func TestDestroyKillsEverything(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	sb, err := b.Create(ctx, backend.Spec{Name: "svc", Command: []string{"sleep", "300"}})
	require.NoError(t, err)
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, backend.StateRunning, info.State)

	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "setsid sleep 300 >/dev/null 2>&1 < /dev/null & echo $!"})
	require.NoError(t, err)
	bgPID, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	require.NoError(t, err)
	require.True(t, procfs.Alive(bgPID, 0), "background process should run after exec returned")
	assert.NotEmpty(t, procfs.FindByEnv(local.EnvSandboxID, sb.ID()))

	require.NoError(t, sb.Destroy(ctx))
	assert.False(t, procfs.Alive(bgPID, 0), "background process survived Destroy")
	assert.Empty(t, procfs.FindByEnv(local.EnvSandboxID, sb.ID()))
	assert.NoDirExists(t, filepath.Join(b.StateDir(), sb.ID()))
}

func TestCreateRefusesWhatItCannotHonour(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	cases := map[string]backend.Spec{
		"mem_limit":                              {Resources: backend.Resources{MemoryBytes: 1 << 30}},
		"volume":                                 {Volumes: []backend.Volume{{Type: backend.VolumeBind, Source: "/tmp", Target: "/data"}}},
		"network":                                {Network: "none"},
		"privileged":                             {Privileged: true},
		"ports":                                  {Ports: []backend.Port{{Port: 80}}},
		"egress (host processes have no network": {Egress: &backend.Egress{Allow: []string{"pypi.org"}}},
	}
	for want, spec := range cases {
		_, err := b.Create(ctx, spec)
		require.Error(t, err, want)
		assert.ErrorIs(t, err, errors.ErrUnsupported, want)
		assert.Contains(t, err.Error(), want)
	}
	infos, err := b.List(ctx, backend.Filter{})
	require.NoError(t, err)
	assert.Empty(t, infos, "a refused Create must leave nothing behind")

	_, err = b.Create(ctx, backend.Spec{WorkingDir: "/does/not/exist"})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "/does/not/exist")
}

func TestGetRejectsPathsAsIDs(t *testing.T) {
	b := newBackend(t)
	for _, id := range []string{"", "..", "../etc", "0123456789ab/../x", "zzzzzzzzzzzz"} {
		_, err := b.Get(context.Background(), id)
		assert.ErrorIs(t, err, backend.ErrNotFound, id)
	}
}

func TestRelativeWorkingDirAndImageIgnored(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	sb, err := b.Create(ctx, backend.Spec{Image: "debian:12", WorkingDir: "src/app"})
	require.NoError(t, err)
	defer sb.Destroy(ctx)
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(b.StateDir(), sb.ID(), "work", "src", "app"), info.WorkDir)
	assert.Equal(t, "debian:12", info.Image)
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"pwd"}})
	require.NoError(t, err)
	assert.Equal(t, info.WorkDir+"\n", string(res.Stdout))
}

func TestDefaultStateDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/x/state")
	d, err := local.DefaultStateDir()
	require.NoError(t, err)
	assert.Equal(t, "/x/state/sandboxkit/local", d)
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	d, err = local.DefaultStateDir()
	require.NoError(t, err)
	assert.Equal(t, "/home/u/.local/state/sandboxkit/local", d)
}

func TestMissingProgramIsExit127(t *testing.T) {
	ctx := context.Background()
	sb, err := newBackend(t).Create(ctx, backend.Spec{})
	require.NoError(t, err)
	defer sb.Destroy(ctx)
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"no-such-program-xyz"}})
	require.NoError(t, err)
	assert.Equal(t, 127, res.ExitCode)
	assert.Equal(t, "no-such-program-xyz: command not found\n", string(res.Stderr))
	// Streamed, the message goes to the caller's writer (sbx run).
	var stderr strings.Builder
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"no-such-program-xyz"}, Stderr: &stderr})
	require.NoError(t, err)
	assert.Equal(t, 127, res.ExitCode)
	assert.Equal(t, "no-such-program-xyz: command not found\n", stderr.String())
}
