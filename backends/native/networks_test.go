package native_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// TestSessionNetwork: sandboxes on a network CreateNetwork made reach each
// other by Spec.Name; List/Remove see only sandboxkit's networks; Logs
// return the main process's output.
func TestSessionNetwork(t *testing.T) {
	b := newBackend(t, dockertest.BusyboxImage)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	session := "net-" + testRun
	name, err := b.CreateNetwork(ctx, backend.NetworkSpec{Session: session, Labels: map[string]string{labelTestRun: testRun}, TTL: time.Hour})
	require.NoError(t, err)
	removed := false
	t.Cleanup(func() {
		if !removed {
			b.RemoveNetwork(context.Background(), name)
		}
	})
	_, err = b.CreateNetwork(ctx, backend.NetworkSpec{Name: name})
	assert.ErrorIs(t, err, backend.ErrAlreadyExists)

	server := spec("web", dockertest.BusyboxImage)
	server.Network, server.Session = name, session
	server.Command = []string{"sh", "-c", "echo web-started; httpd -f -p 8080 -h /etc"}
	srv := create(t, b, server)
	client := spec("client", dockertest.BusyboxImage)
	client.Network, client.Session = name, session
	cl := create(t, b, client)

	deadline := time.Now().Add(30 * time.Second)
	var out string
	for {
		res, err := cl.Exec(ctx, backend.ExecRequest{Cmd: []string{"wget", "-q", "-O", "-", "http://web:8080/passwd"}, Timeout: 10 * time.Second})
		require.NoError(t, err)
		out = string(res.Stdout)
		if res.ExitCode == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	assert.Contains(t, out, "root:", "client reaching web by name")

	lr, ok := backend.As[backend.LogReader](srv)
	require.True(t, ok)
	logs, err := lr.Logs(ctx, 5)
	require.NoError(t, err)
	assert.Contains(t, string(logs), "web-started")

	nets, err := b.ListNetworks(ctx, backend.Filter{Session: session})
	require.NoError(t, err)
	require.Len(t, nets, 1)
	assert.Equal(t, name, nets[0].Name)
	assert.False(t, nets[0].ExpiresAt.IsZero())

	err = b.RemoveNetwork(ctx, "bridge")
	assert.ErrorIs(t, err, backend.ErrInvalidConfig, "removing a network sandboxkit did not make")
	require.NoError(t, srv.Destroy(ctx))
	require.NoError(t, cl.Destroy(ctx))
	require.NoError(t, b.RemoveNetwork(ctx, name))
	removed = true
	assert.NoError(t, b.RemoveNetwork(ctx, name), "removing a removed network")
	nets, err = b.ListNetworks(ctx, backend.Filter{Session: session})
	require.NoError(t, err)
	assert.Empty(t, nets)
}
