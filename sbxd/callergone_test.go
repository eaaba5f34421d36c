package sbxd_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

func waitPID(t *testing.T, file string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(data), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
			require.NoError(t, err)
			return pid
		}
		require.False(t, time.Now().After(deadline), "no PID in %s", file)
		time.Sleep(5 * time.Millisecond)
	}
}

// When the caller's stream to the agent goes away (its process died), the
// agent kills the foreground command it was running for that caller, tree
// and all; a background job lives on and a new client finds it.
func TestCallerGoneKillsForegroundOnly(t *testing.T) {
	b := newLocal(t)
	sb, err := b.Create(t.Context(), backend.Spec{Name: "gone", TTL: 30 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	c, err := sbxd.Wrap(t.Context(), sb, sbxd.WithAgentPath(agentBin))
	require.NoError(t, err)
	require.NoError(t, c.Fallback())

	dir := t.TempDir()
	job, err := c.StartJob(t.Context(), backend.ExecRequest{Shell: "echo $$ > " + filepath.Join(dir, "job") + "; exec sleep 300"}, 0)
	require.NoError(t, err)
	jobPID := waitPID(t, filepath.Join(dir, "job"))

	fg := filepath.Join(dir, "fg")
	go c.Exec(context.Background(), backend.ExecRequest{Shell: "sh -c 'echo $$ > " + fg + "; exec sleep 300' & wait"})
	fgPID := waitPID(t, fg)

	require.NoError(t, c.Close()) // the caller's stream goes away
	deadline := time.Now().Add(5 * time.Second)
	for procfs.Alive(fgPID, 0) {
		require.False(t, time.Now().After(deadline), "the foreground command %d outlived its caller", fgPID)
		time.Sleep(10 * time.Millisecond)
	}
	require.True(t, procfs.Alive(jobPID, 0), "the background job died with the caller")

	c2, err := sbxd.Wrap(t.Context(), sb, sbxd.WithAgentPath(agentBin))
	require.NoError(t, err)
	t.Cleanup(func() { c2.Close() })
	st, err := c2.Job(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, "running", st.State, "a new client finds the job running: %+v", st)
	_, err = c2.KillJob(t.Context(), job.ID)
	require.NoError(t, err)
}
