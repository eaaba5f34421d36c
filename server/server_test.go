package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// localBackend is a local backend in a state dir of the test's own.
func localBackend(t testing.TB) *local.Backend {
	t.Helper()
	b, err := local.New(local.Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

func mainSpec(typ string) (backend.Spec, error) { return backend.Spec{Name: typ}, nil }

// newServer makes a server over b; edit adjusts the options.
func newServer(t testing.TB, b backend.Backend, edit func(*server.Options)) *server.Server {
	t.Helper()
	opts := server.Options{Backend: b, Spec: mainSpec}
	if edit != nil {
		edit(&opts)
	}
	s, err := server.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// assertNoSandboxes checks that b has no sandboxes left.
func assertNoSandboxes(t *testing.T, b backend.Backend) {
	t.Helper()
	infos, err := b.List(context.Background(), backend.Filter{})
	require.NoError(t, err)
	assert.Empty(t, infos, "sandboxes left behind")
}

// mcpClient connects an MCP client over streamable HTTP to url.
func mcpClient(t testing.TB, url string, header http.Header) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: headerTransport{header}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// headerTransport adds headers to every request.
type headerTransport struct{ h http.Header }

func (ht headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range ht.h {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

func TestMCPOverHTTPAgentTurn(t *testing.T) {
	for _, noAgent := range []bool{false, true} {
		name := map[bool]string{false: "sbxd", true: "no-agent"}[noAgent]
		t.Run(name, func(t *testing.T) {
			b := localBackend(t)
			s := newServer(t, b, func(o *server.Options) { o.NoAgent = noAgent })
			cs := mcpClient(t, serveHTTP(t, s)+"/mcp", nil)

			tools, err := cs.ListTools(context.Background(), nil)
			require.NoError(t, err)
			var names []string
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
			assert.ElementsMatch(t, []string{"create_sandbox", "connect_sandbox", "list_sandboxes", "delete_sandbox",
				"ls", "read_file", "write_file", "edit_file", "glob", "grep", "execute", "job_status", "job_output", "job_kill",
				"terminal_start", "terminal_send", "terminal_read", "terminal_close"}, names)

			servertest.AgentTurn(t, servertest.MCP(cs), "")
			assertNoSandboxes(t, b)
		})
	}
}

func TestMCPOverStdioAgentTurn(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	stdioAgentTurn(t, s, "")
	assertNoSandboxes(t, b)
}

// stdioAgentTurn plays an agent turn over MCP on a pair of pipes, as sbx mcp
// serves it on stdin and stdout.
func stdioAgentTurn(t *testing.T, s *server.Server, dir string) {
	sr, cw := io.Pipe()
	cr, sw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.RunStdio(ctx, "stdio:test", &mcp.IOTransport{Reader: sr, Writer: sw}) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	require.NoError(t, err)
	servertest.AgentTurn(t, servertest.MCP(cs), dir)
	cs.Close()
	cancel()
	require.NoError(t, <-done)
}

func TestHTTPAPIAgentTurn(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.APIKey = "k3y" })
	servertest.AgentTurn(t, servertest.HTTP(serveHTTP(t, s), "k3y", "conv-1"), "")
	assertNoSandboxes(t, b)
}

func TestAuth(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.APIKey = "s3cret" })
	hs := struct{ URL string }{serveHTTP(t, s)}

	get := func(path string, h http.Header) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("/health", nil)
	assert.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `{"status":"healthy"}`, body)

	for _, h := range []http.Header{
		nil,
		{"Authorization": {"Bearer wrong"}},
		{"Authorization": {"Bearer s3cret-but-longer"}},
		{"X-Api-Key": {"s3cre"}},
		{"Authorization": {"Basic s3cret"}},
	} {
		for _, path := range []string{"/sandbox/status", "/tools", "/mcp"} {
			code, body := get(path, h)
			assert.Equal(t, http.StatusUnauthorized, code, "%s with %v: %s", path, h, body)
		}
	}
	// POST too, and the MCP client with a wrong key cannot connect.
	text, isErr, err := servertest.HTTP(hs.URL, "wrong", "c")(context.Background(), "create_sandbox", map[string]any{})
	require.Error(t, err, "%s %v", text, isErr)
	assert.Contains(t, err.Error(), "401")
	_, err = mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp", MaxRetries: -1,
			HTTPClient: &http.Client{Transport: headerTransport{http.Header{"Authorization": {"Bearer nope"}}}}}, nil)
	require.Error(t, err)
	assertNoSandboxes(t, b)

	for _, h := range []http.Header{{"Authorization": {"Bearer s3cret"}}, {"X-Api-Key": {"s3cret"}}} {
		code, body := get("/sandbox/status", h)
		assert.Equal(t, http.StatusOK, code)
		assert.JSONEq(t, `{"enabled":true,"backend":"local"}`, body)
	}
	cs := mcpClient(t, hs.URL+"/mcp", http.Header{"Authorization": {"Bearer s3cret"}})
	id := servertest.Create(t, servertest.MCP(cs), nil)
	servertest.Must(t, servertest.MCP(cs), "delete_sandbox", map[string]any{"sandbox_id": id})
}

func TestStatusUnreachable(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	enabled, _ := s.Status(context.Background())
	assert.True(t, enabled)
	s2 := newServer(t, brokenBackend{b}, nil)
	enabled, reason := s2.Status(context.Background())
	assert.False(t, enabled)
	assert.Contains(t, reason, "cannot be reached")
}

// brokenBackend fails List, as a backend whose daemon is down does.
type brokenBackend struct{ backend.Backend }

func (brokenBackend) List(context.Context, backend.Filter) ([]backend.Info, error) {
	return nil, backend.ErrUnavailable
}

func TestIsolation(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	hs := struct{ URL string }{serveHTTP(t, s)}

	alice := servertest.MCP(mcpClient(t, hs.URL+"/mcp", nil))
	mallory := servertest.MCP(mcpClient(t, hs.URL+"/mcp", nil))
	malloryHTTP := servertest.HTTP(hs.URL, "", "mallory")
	id := servertest.Create(t, alice, nil)
	servertest.Must(t, alice, "write_file", map[string]any{"sandbox_id": id, "path": "secret.txt", "content": "alice's\n"})
	job := servertest.Must(t, alice, "execute", map[string]any{"sandbox_id": id, "command": "sleep 300", "background": true})
	jobID := strings.Fields(strings.TrimPrefix(job, "Started background job "))[0]
	jobID = strings.TrimSuffix(jobID, ".")

	for _, call := range []servertest.Caller{mallory, malloryHTTP} {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"connect_sandbox", map[string]any{}},
			{"read_file", map[string]any{"path": "secret.txt"}},
			{"ls", map[string]any{}},
			{"grep", map[string]any{"pattern": "alice"}},
			{"write_file", map[string]any{"path": "evil.txt", "content": "x"}},
			{"edit_file", map[string]any{"path": "secret.txt", "old_string": "alice", "new_string": "mallory"}},
			{"execute", map[string]any{"command": "rm -f secret.txt"}},
			{"execute", map[string]any{"command": "rm -f secret.txt", "background": true}},
			{"job_kill", map[string]any{"job_id": jobID}},
			{"job_output", map[string]any{"job_id": jobID}},
			{"delete_sandbox", map[string]any{}},
		} {
			c.args["sandbox_id"] = id
			text := servertest.Fails(t, call, c.tool, c.args)
			assert.Contains(t, text, "was not found", c.tool)
		}
		assert.Contains(t, servertest.Must(t, call, "list_sandboxes", map[string]any{}), "no sandboxes")
	}
	// Nothing changed for alice.
	assert.Contains(t, servertest.Must(t, alice, "read_file", map[string]any{"sandbox_id": id, "path": "secret.txt"}), "alice's")
	assert.Contains(t, servertest.Must(t, alice, "job_status", map[string]any{"sandbox_id": id, "job_id": jobID}), "is running")
	out := servertest.Must(t, alice, "execute", map[string]any{"sandbox_id": id, "command": "ls"})
	assert.NotContains(t, out, "evil.txt")
	servertest.Must(t, alice, "job_kill", map[string]any{"sandbox_id": id, "job_id": jobID})
	servertest.Must(t, alice, "delete_sandbox", map[string]any{"sandbox_id": id})
	assertNoSandboxes(t, b)
}

func TestMissingConversation(t *testing.T) {
	s := newServer(t, localBackend(t), nil)
	hs := struct{ URL string }{serveHTTP(t, s)}
	_, _, err := servertest.HTTP(hs.URL, "", "")(context.Background(), "create_sandbox", map[string]any{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "missing X-Conversation-Id")
	_, _, err = servertest.HTTP(hs.URL, "", "bad id!")(context.Background(), "create_sandbox", map[string]any{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "X-Conversation-Id")
	_, _, err = servertest.HTTP(hs.URL, "", "c")(context.Background(), "nosuch", map[string]any{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `404 Not Found: {"error":"unknown tool \"nosuch\" (known: create_sandbox,`)
	_, _, err = servertest.HTTP(hs.URL, "", "c")(context.Background(), "create_sandbox", map[string]any{"typo": 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `400 Bad Request: {"error":"tool create_sandbox: bad JSON arguments: json: unknown field \"typo\""}`)
}

func TestExecuteTimeoutAndOutputCap(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.OutputLimit = 1000 })
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	id := servertest.Create(t, call, nil)
	out := servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "echo partial; sleep 30", "timeout": 1})
	assert.Contains(t, out, "partial\n")
	assert.Contains(t, out, "Command timed out after 1 seconds\nExit code: 124")

	out = servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "head -c 100000 /dev/zero | tr '\\0' a; echo; echo END"})
	assert.Contains(t, out, "[... output truncated:")
	assert.Contains(t, out, "END\nExit code: 0")
	assert.Less(t, len(out), 1200)

	// Job output is capped per read as well, and read on by cursor.
	job := servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "head -c 2500 /dev/zero | tr '\\0' b", "background": true})
	jobID := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(job, "Started background job "))[0], ".")
	var all strings.Builder
	cursor := 0
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		out := servertest.Must(t, call, "job_output", map[string]any{"sandbox_id": id, "job_id": jobID, "cursor": cursor})
		body, tail, _ := strings.Cut(out, "[job ")
		all.WriteString(strings.TrimSuffix(body, "\n"))
		var next int
		_, err := fmtSscan(tail, &next)
		require.NoError(t, err, out)
		if strings.Contains(tail, "this is all its output") {
			break
		}
		if next == cursor {
			time.Sleep(20 * time.Millisecond) // the job is still writing
		}
		cursor = next
	}
	assert.Equal(t, strings.Repeat("b", 2500), all.String())
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	assertNoSandboxes(t, b)
}

// fmtSscan reads the number after "cursor=" in a job_output tail.
func fmtSscan(tail string, next *int) (int, error) {
	i := strings.LastIndex(tail, "cursor=")
	if i < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	return 1, json.Unmarshal([]byte(strings.TrimRight(tail[i+len("cursor="):], ")]\n")), next)
}

func TestCreateArguments(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.Types = []string{"main", "worker"} })
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	assert.Contains(t, servertest.Fails(t, call, "create_sandbox", map[string]any{"type": "mian"}),
		`unknown sandbox type "mian" (known: main, worker)`)
	assert.Contains(t, servertest.Fails(t, call, "create_sandbox", map[string]any{"timeout_minutes": -1}), "must not be negative")
	text := servertest.Must(t, call, "create_sandbox", map[string]any{"type": "worker", "timeout_minutes": 5})
	assert.Contains(t, text, "(type worker, isolation none:")
	assert.Contains(t, text, "after 5 minutes without tool calls")
	assert.Contains(t, servertest.Fails(t, call, "execute", map[string]any{"command": "true"}), "sandbox_id is empty")
	infos, err := b.List(context.Background(), backend.Filter{})
	require.NoError(t, err)
	require.Len(t, infos, 1)
	assert.Equal(t, server.OwnerKey("conv:c"), infos[0].Labels[server.LabelConversation])
	assert.Equal(t, "300", infos[0].Labels[server.LabelIdleTTL])
	assert.Equal(t, "worker", infos[0].Labels[server.LabelType])
	assert.False(t, infos[0].ExpiresAt.IsZero(), "the backend TTL is the hard maximum")
	require.NoError(t, s.Close())
	assert.Len(t, must(b.List(context.Background(), backend.Filter{})), 1, "Close keeps sandboxes by default")
	require.NoError(t, (must(b.Get(context.Background(), infos[0].ID))).Destroy(context.Background()))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestDeleteOnShutdown(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.DeleteOnShutdown = true })
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	servertest.Create(t, call, nil)
	servertest.Create(t, call, nil)
	require.NoError(t, s.Close())
	assertNoSandboxes(t, b)
	assert.Contains(t, servertest.Fails(t, call, "create_sandbox", nil), "shutting down")
}

// TestGracefulShutdown: a call in flight when the server is told to stop
// finishes and its answer reaches the client.
func TestGracefulShutdown(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	ln, err := netListen()
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	call := servertest.HTTP(url, "", "c")
	id := servertest.Create(t, call, nil)

	// The command waits for a file the test writes after shutdown began.
	marker := filepath.Join(t.TempDir(), "go")
	var wg sync.WaitGroup
	var out string
	var callErr error
	started := filepath.Join(t.TempDir(), "started")
	wg.Go(func() {
		out, _, callErr = call(context.Background(), "execute", map[string]any{"sandbox_id": id,
			"command": "touch " + started + "; while [ ! -e " + marker + " ]; do sleep 0.05; done; echo finished"})
	})
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil })
	cancel()
	// New connections are refused once shutdown has begun.
	waitFor(t, func() bool { _, err := http.Get(url + "/health"); return err != nil })
	require.NoError(t, os.WriteFile(marker, nil, 0o644))
	wg.Wait()
	require.NoError(t, callErr)
	assert.Contains(t, out, "finished\nExit code: 0")
	require.NoError(t, <-served)
	require.NoError(t, s.Close())
	assert.Len(t, must(b.List(context.Background(), backend.Filter{})), 1, "sandboxes are kept")
}

func netListen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// serveHTTP serves s's handler on loopback for the test and returns its URL.
func serveHTTP(t *testing.T, s *server.Server) string {
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCheckListen(t *testing.T) {
	for _, c := range []struct {
		addr            string
		key, insecure   bool
		wantErrContains string
	}{
		{"127.0.0.1:8765", false, false, ""},
		{"localhost:0", false, false, ""},
		{"[::1]:80", false, false, ""},
		{"0.0.0.0:8765", false, false, "not loopback and no API key"},
		{":8765", false, false, "not loopback"},
		{"10.1.2.3:8765", false, false, "--insecure"},
		{"0.0.0.0:8765", true, false, ""},
		{"0.0.0.0:8765", false, true, ""},
		{"8765", false, false, "want host:port"},
	} {
		err := server.CheckListen(c.addr, c.key, c.insecure)
		if c.wantErrContains == "" {
			assert.NoError(t, err, c.addr)
		} else if assert.Error(t, err, c.addr) {
			assert.Contains(t, err.Error(), c.wantErrContains, c.addr)
		}
	}
}

func TestParseVolumeMounts(t *testing.T) {
	dir := t.TempDir()
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	vols, warnings, err := server.ParseVolumeMounts(dir+":/data:ro, ~:/home-dir ,/no/such/dir:/x,", "/")
	require.NoError(t, err)
	assert.Equal(t, []backend.Volume{
		{Type: backend.VolumeBind, Source: dir, Target: "/data", ReadOnly: true},
		{Type: backend.VolumeBind, Source: home, Target: "/home-dir"},
	}, vols)
	assert.Equal(t, []string{`volume "/no/such/dir:/x": host path does not exist (skipped)`}, warnings)

	_, _, err = server.ParseVolumeMounts(dir+":relative", "/")
	assert.ErrorContains(t, err, `volume "`+dir+`:relative": sandbox path "relative" is not absolute`)
	_, _, err = server.ParseVolumeMounts(dir+":/a,"+dir+":/a", "/")
	assert.ErrorContains(t, err, "already mounted")
}

// TestMCPConversationHeader: an MCP client that sends X-Conversation-Id
// keeps its sandboxes across sessions, as a reconnecting client does.
func TestMCPConversationHeader(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	url := serveHTTP(t, s)
	h := http.Header{"X-Conversation-Id": {"task-7"}}
	first := mcpClient(t, url+"/mcp", h)
	id := servertest.Create(t, servertest.MCP(first), nil)
	first.Close()

	again := servertest.MCP(mcpClient(t, url+"/mcp", h))
	assert.Contains(t, servertest.Must(t, again, "connect_sandbox", map[string]any{"sandbox_id": id}), "Connected")
	assert.Contains(t, servertest.Must(t, servertest.HTTP(url, "", "task-7"), "list_sandboxes", map[string]any{}), id)
	other := servertest.MCP(mcpClient(t, url+"/mcp", nil))
	assert.Contains(t, servertest.Fails(t, other, "connect_sandbox", map[string]any{"sandbox_id": id}), "was not found")
	servertest.Must(t, again, "delete_sandbox", map[string]any{"sandbox_id": id})
	assertNoSandboxes(t, b)
}

// TestJobOutputBounded: a job's output is kept up to about the output
// limit, most recent bytes first, whoever runs the job.
func TestJobOutputBounded(t *testing.T) {
	for _, noAgent := range []bool{false, true} {
		t.Run(map[bool]string{false: "sbxd", true: "no-agent"}[noAgent], func(t *testing.T) {
			s := newServer(t, localBackend(t), func(o *server.Options) {
				o.NoAgent = noAgent
				o.OutputLimit = 1000
			})
			call := servertest.HTTP(serveHTTP(t, s), "", "c")
			id := servertest.Create(t, call, nil)
			job := servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "background": true,
				"command": "head -c 20000 /dev/zero | tr '\\0' x; echo END"})
			jobID := strings.TrimSuffix(strings.Fields(strings.TrimPrefix(job, "Started background job "))[0], ".")
			waitFor(t, func() bool {
				return strings.Contains(servertest.Must(t, call, "job_status", map[string]any{"sandbox_id": id, "job_id": jobID}), "has finished")
			})
			out := servertest.Must(t, call, "job_output", map[string]any{"sandbox_id": id, "job_id": jobID})
			assert.Regexp(t, `^\[\.\.\. \d+ bytes of earlier output no longer kept \.\.\.\]\nx+`, out)
			assert.Less(t, len(out), 1200)
			// Read on to the end.
			var data strings.Builder
			for {
				tail := out[strings.LastIndex(out, "[job "):]
				// job_output ends a chunk with a newline of its own when the
				// chunk has none.
				data.WriteString(strings.ReplaceAll(out[:len(out)-len(tail)], "\n", ""))
				if strings.Contains(tail, "this is all its output") {
					assert.Equal(t, "[job "+jobID+" has finished with exit code 0; this is all its output (cursor=20004)]", tail)
					break
				}
				var next int
				_, err := fmtSscan(tail, &next)
				require.NoError(t, err)
				out = servertest.Must(t, call, "job_output", map[string]any{"sandbox_id": id, "job_id": jobID, "cursor": next})
			}
			assert.True(t, strings.HasSuffix(data.String(), "xxEND"), "the output ends: %q", data.String()[max(0, data.Len()-50):])
		})
	}
}
