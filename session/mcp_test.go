package session_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/session"
)

// localMCPConfig is a local-backend config whose svc entry waits for the
// MCP service [mcp.services.svc] on port. Local sandboxes share the
// host's network (network = "host"), so a server of the test listening on
// 127.0.0.1:port is the service "inside" the sandbox.
func localMCPConfig(t *testing.T, port int, timeoutSec int) *config.Config {
	t.Helper()
	reg := config.NewRegistry()
	reg.Register(local.Factory)
	cfg, err := reg.ParseConfig([]byte(fmt.Sprintf(`
SVC_PORT = %d
[mcp.services.svc]
sse_port = "${SVC_PORT}"

[sandbox]
backend = "local"
[sandbox.local]
state_dir = "state"
[sandbox.sandboxes.svc]
network = "host"
mcp_services = ["svc"]
[sandbox.sandboxes.svc.extra]
initializer_timeout_sec = %d
`, port, timeoutSec)), filepath.Join(t.TempDir(), "sandbox.toml"))
	require.NoError(t, err)
	return cfg
}

// sseHandler answers as an MCP SSE endpoint: 200, an event stream, an
// endpoint event, then nothing until the client leaves.
func sseHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "event: endpoint\ndata: /messages?session_id=1\n\n")
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// The launch waits for the entry's MCP service: the test's listener first
// drops two connections (nothing serves yet), then the test starts the SSE
// server on it; the launch completes only after that, and the member
// carries the service's URL.
func TestLaunchWaitsForMCPService(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(sseHandler)}
	t.Cleanup(func() { srv.Close() })
	var dropped atomic.Int32
	var started atomic.Bool
	go func() {
		for dropped.Load() < 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			dropped.Add(1)
		}
		started.Store(true)
		srv.Serve(ln)
	}()

	cfg := localMCPConfig(t, port, 60)
	var probing atomic.Value
	l := &session.Launcher{Config: cfg, Progress: func(p session.Progress) {
		if p.Sandbox == "svc" && p.Step == session.StepProbing {
			probing.Store(p.Detail)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := l.Launch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Destroy(context.Background()) })

	assert.True(t, started.Load(), "the launch finished before the service was started")
	assert.EqualValues(t, 2, dropped.Load())
	assert.Equal(t, fmt.Sprintf("mcp services svc (sse_port %d)", port), probing.Load())
	m, err := s.Member("svc")
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"svc": fmt.Sprintf("http://127.0.0.1:%d/sse", port)}, m.MCPServices)
}

// A service that never serves an event stream fails the launch when the
// entry's initializer_timeout_sec runs out, naming the service, its URL and
// the last answer.
func TestLaunchMCPServiceDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>still starting</html>")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	cfg := localMCPConfig(t, port, 2)
	start := time.Now()
	_, err = (&session.Launcher{Config: cfg}).Launch(context.Background())
	se, ok := errors.AsType[*session.Error](err)
	require.True(t, ok, "want a *session.Error, got %v", err)
	assert.Equal(t, "svc", se.Sandbox)
	assert.Equal(t, "ready", se.Step)
	for _, want := range []string{
		`mcp service "svc"`,
		fmt.Sprintf("GET http://127.0.0.1:%d/sse", port),
		`Content-Type "text/html" (want text/event-stream`,
		"initializer_timeout_sec (2s) ran out",
	} {
		assert.Contains(t, err.Error(), want)
	}
	assert.Less(t, time.Since(start), 30*time.Second)
}

// config check (CheckEntries) refuses a service inside the sandbox whose
// port the entry does not publish, naming the entry's key, the service and
// the fix; OpenSage's mapping (sandbox port 1111 at host port sse_port)
// and an sse_host pass.
func TestCheckEntriesMCPServicePorts(t *testing.T) {
	reg := config.NewRegistry()
	reg.Register(native.Factory)
	parse := func(entry string) *config.Config {
		cfg, err := reg.ParseConfig([]byte(`
[mcp.services.gdb_mcp]
sse_port = 2345
[mcp.services.remote]
sse_port = 9000
sse_host = "10.0.0.7"
[sandbox]
backend = "native"
[sandbox.sandboxes.pdb_mcp]
image = "busybox"
`+entry), "sandbox.toml")
		require.NoError(t, err)
		return cfg
	}
	require.NoError(t, session.CheckEntries(parse(`mcp_services = ["gdb_mcp", "remote"]
[sandbox.sandboxes.pdb_mcp.ports]
"1111/tcp" = 2345
`), nil))
	require.NoError(t, session.CheckEntries(parse(`mcp_services = ["remote"]`), nil))

	err := session.CheckEntries(parse(`mcp_services = ["gdb_mcp"]
[sandbox.sandboxes.pdb_mcp.ports]
"1111/tcp" = 1111
`), nil)
	require.Error(t, err)
	want := `sandbox.sandboxes.pdb_mcp.mcp_services: service "gdb_mcp": its sse_port 2345 is not published, so it cannot be reached from the host: add "2345/tcp" = 2345 to the entry's ports`
	assert.True(t, strings.Contains(err.Error(), want), "error %q, want %q", err, want)
}
