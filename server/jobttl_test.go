package server_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// TestBackgroundJobIsActivity: a sandbox whose only activity is a running
// background job is not idle; once the job ends, its idle TTL runs again.
func TestBackgroundJobIsActivity(t *testing.T) {
	for _, noAgent := range []bool{false, true} {
		t.Run(map[bool]string{false: "sbxd", true: "no-agent"}[noAgent], func(t *testing.T) {
			b, c := localBackend(t), newClock()
			s := newServer(t, b, func(o *server.Options) {
				o.Now, o.ReapInterval, o.IdleTTL, o.MaxLifetime = c.Now, -1, 30*time.Minute, 24*time.Hour
				o.NoAgent = noAgent
			})
			call := servertest.HTTP(serveHTTP(t, s), "", "c")
			id := servertest.Create(t, call, nil)
			job, release := startBlockedJob(t, call, id)

			// A call finds the sandbox busy, not expired.
			c.Add(45 * time.Minute)
			assert.Contains(t, servertest.Must(t, call, "connect_sandbox", map[string]any{"sandbox_id": id}), "Connected")
			// The reaper finds it busy.
			c.Add(45 * time.Minute)
			assert.Empty(t, s.Reap(context.Background()), "a sandbox running a job is not idle")
			assert.True(t, alive(t, b, id))

			release()
			waitJobDone(t, call, id, job)
			c.Add(29 * time.Minute)
			assert.Empty(t, s.Reap(context.Background()))
			c.Add(2 * time.Minute)
			assert.Equal(t, []string{id}, s.Reap(context.Background()), "idle after its job ended")
			assertNoSandboxes(t, b)
		})
	}
}

var jobIDRE = regexp.MustCompile(`Started background job (\S+)\.`)

// startBlockedJob starts a background job in sandbox id that runs until
// release is called, and waits until it runs. It returns the job's ID.
func startBlockedJob(t *testing.T, call servertest.Caller, id string) (job string, release func()) {
	t.Helper()
	dir := t.TempDir()
	started, gate := filepath.Join(dir, "started"), filepath.Join(dir, "go")
	job, _ = startJob(t, call, id, "touch "+started+"; while [ ! -e "+gate+" ]; do sleep 0.05; done")
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil })
	return job, func() { require.NoError(t, os.WriteFile(gate, nil, 0o644)) }
}

// startJob starts command in the background and returns its job's ID and
// the answer.
func startJob(t *testing.T, call servertest.Caller, id, command string) (job, text string) {
	t.Helper()
	text = servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "background": true, "command": command})
	m := jobIDRE.FindStringSubmatch(text)
	require.NotNil(t, m, text)
	return m[1], text
}

// waitJobDone waits until job has finished. Its calls renew the sandbox at
// the test clock's time, which does not move meanwhile.
func waitJobDone(t *testing.T, call servertest.Caller, id, job string) {
	t.Helper()
	waitFor(t, func() bool {
		return strings.Contains(servertest.Must(t, call, "job_status", map[string]any{"sandbox_id": id, "job_id": job}), "has finished")
	})
}

// TestAdoptedSandboxWithJobIsNotReaped: jobs run by a sandbox's agent
// outlive the server; a restarted server that has not used the sandbox yet
// asks the agent before reaping it.
func TestAdoptedSandboxWithJobIsNotReaped(t *testing.T) {
	b, c := localBackend(t), newClock()
	opts := func(o *server.Options) {
		o.Now, o.ReapInterval, o.IdleTTL, o.MaxLifetime = c.Now, -1, 30*time.Minute, 24*time.Hour
	}
	s1 := newServer(t, b, opts)
	call := servertest.HTTP(serveHTTP(t, s1), "", "c")
	id := servertest.Create(t, call, nil)
	job, release := startBlockedJob(t, call, id)
	require.NoError(t, s1.Close())

	s2 := newServer(t, b, opts)
	n, err := s2.Adopt(context.Background(), "")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	c.Add(45 * time.Minute)
	assert.Empty(t, s2.Reap(context.Background()), "an adopted sandbox running a job is not idle")
	release()
	waitJobDone(t, servertest.HTTP(serveHTTP(t, s2), "", "c"), id, job)
	c.Add(31 * time.Minute)
	assert.Equal(t, []string{id}, s2.Reap(context.Background()))
	_, err = b.Get(context.Background(), id)
	assert.ErrorIs(t, err, backend.ErrNotFound)
}
