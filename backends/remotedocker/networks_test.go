package remotedocker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// A session network on the remote engine: members reach each other by
// name, and Logs read the remote container's output.
func TestSessionNetwork(t *testing.T) {
	h := remotetest.Get(t)
	b := open(t, config(h))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name, err := b.CreateNetwork(ctx, backend.NetworkSpec{Session: "net-" + testRun, Labels: map[string]string{labelTestRun: testRun}})
	require.NoError(t, err)
	t.Cleanup(func() { b.RemoveNetwork(context.Background(), name) })
	web := spec("web", dockertest.BusyboxImage)
	web.Network = name
	web.Command = []string{"sh", "-c", "echo web-started; httpd -f -p 8080 -h /etc"}
	srv := create(t, b, web)
	cl := spec("client", dockertest.BusyboxImage)
	cl.Network = name
	c := create(t, b, cl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := c.Exec(ctx, backend.ExecRequest{Cmd: []string{"wget", "-q", "-O", "/dev/null", "http://web:8080/passwd"}, Timeout: 10 * time.Second})
		require.NoError(t, err)
		if res.ExitCode == 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "client never reached web by name: %s", res.Stderr)
		time.Sleep(100 * time.Millisecond)
	}
	logs, ok := backend.As[backend.LogReader](srv)
	require.True(t, ok)
	out, lerr := logs.Logs(ctx, 0)
	require.NoError(t, lerr)
	assert.Contains(t, string(out), "web-started")
	nets, lerr := b.ListNetworks(ctx, backend.Filter{Session: "net-" + testRun})
	require.NoError(t, lerr)
	assert.Len(t, nets, 1)
	require.NoError(t, srv.Destroy(ctx))
	require.NoError(t, c.Destroy(ctx))
	require.NoError(t, b.RemoveNetwork(ctx, name))
}
