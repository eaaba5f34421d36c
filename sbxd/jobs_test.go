package sbxd_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// readJob reads a job's whole remaining output from cursor.
func readJob(t *testing.T, c *sbxd.Client, id string, cursor int64) (string, int64, int64) {
	t.Helper()
	var b strings.Builder
	var dropped int64
	for {
		out, err := c.ReadJobOutput(t.Context(), id, cursor, 0)
		require.NoError(t, err)
		b.Write(out.Data)
		dropped += out.Dropped
		cursor = out.Next
		if len(out.Data) == 0 {
			return b.String(), cursor, dropped
		}
	}
}

func TestJobsLocal(t *testing.T) {
	c, sb := createLocal(t)
	ctx := t.Context()

	t.Run("output, cursor and exit code", func(t *testing.T) {
		st, err := c.StartJob(ctx, backend.ExecRequest{Shell: `echo one; echo two >&2; read x; echo "got $x"; exit 3`}, 0)
		require.NoError(t, err)
		assert.Equal(t, sbxd.JobRunning, st.State)
		// stdin is /dev/null: read fails, x is empty.
		done, err := c.WaitJob(ctx, st.ID)
		require.NoError(t, err)
		assert.Equal(t, sbxd.JobExited, done.State)
		assert.Equal(t, 3, done.ExitCode)
		out, next, dropped := readJob(t, c, st.ID, 0)
		assert.Equal(t, "one\ntwo\ngot \n", out)
		assert.Zero(t, dropped)
		rest, _, _ := readJob(t, c, st.ID, next-5)
		assert.Equal(t, "got \n", rest)
	})
	t.Run("a job that just ended is never lost", func(t *testing.T) {
		// The background sleep keeps the output pipe open, so the agent
		// records the exit only after its grace period: meanwhile the
		// job's process is gone without an exit status.
		st, err := c.StartJob(ctx, backend.ExecRequest{Shell: `sleep 5 & exit 7`}, 0)
		require.NoError(t, err)
		deadline := time.Now().Add(30 * time.Second)
		for {
			cur, err := c.Job(ctx, st.ID)
			require.NoError(t, err)
			require.NotEqual(t, sbxd.JobLost, cur.State, "status %+v", cur)
			if cur.State == sbxd.JobExited {
				assert.Equal(t, 7, cur.ExitCode)
				break
			}
			require.True(t, time.Now().Before(deadline), "job still %s", cur.State)
			time.Sleep(2 * time.Millisecond)
		}
	})
	t.Run("kill", func(t *testing.T) {
		st, err := c.StartJob(ctx, backend.ExecRequest{Shell: `sleep 60 & sleep 60; echo never`}, 0)
		require.NoError(t, err)
		killed, err := c.KillJob(ctx, st.ID)
		require.NoError(t, err)
		assert.Equal(t, sbxd.JobExited, killed.State)
		assert.Equal(t, 137, killed.ExitCode)
		out, _, _ := readJob(t, c, st.ID, 0)
		assert.Empty(t, out)
	})
	t.Run("output bounded on disk", func(t *testing.T) {
		st, err := c.StartJob(ctx, backend.ExecRequest{Shell: `i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done`}, 16<<10)
		require.NoError(t, err)
		done, err := c.WaitJob(ctx, st.ID)
		require.NoError(t, err)
		assert.Equal(t, 0, done.ExitCode)
		out, next, dropped := readJob(t, c, st.ID, 0)
		assert.Equal(t, done.Output, next)
		assert.Equal(t, next, dropped+int64(len(out)))
		assert.LessOrEqual(t, len(out), 16<<10)
		assert.Greater(t, dropped, int64(0))
		assert.True(t, strings.HasSuffix(out, "line 19999\n"), "the most recent output is kept")
	})
	t.Run("unknown job", func(t *testing.T) {
		_, err := c.Job(ctx, "job-nope")
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
	t.Run("jobs outlive the client", func(t *testing.T) {
		st, err := c.StartJob(ctx, backend.ExecRequest{Shell: `read x; echo late`}, 0)
		require.NoError(t, err)
		_ = st
		st2, err := c.StartJob(ctx, backend.ExecRequest{Cmd: []string{"sleep", "60"}}, 0)
		require.NoError(t, err)
		// A second client on the same sandbox (a new agent) sees the job.
		c2, err := sbxd.Wrap(ctx, sb, sbxd.WithAgentPath(agentBin))
		require.NoError(t, err)
		defer c2.Close()
		list, err := c2.Jobs(ctx)
		require.NoError(t, err)
		var ids []string
		for _, j := range list {
			ids = append(ids, j.ID)
		}
		assert.Contains(t, ids, st2.ID)
		require.NoError(t, c.Close())
		got, err := c2.Job(ctx, st2.ID)
		require.NoError(t, err)
		assert.Equal(t, sbxd.JobRunning, got.State)
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		killed, err := c2.KillJob(kctx, st2.ID)
		require.NoError(t, err)
		assert.NotEqual(t, sbxd.JobRunning, killed.State)
	})
}
