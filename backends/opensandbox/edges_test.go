package opensandbox_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// A real server answers GET /sandboxes with 500 DOCKER::SANDBOX_QUERY_FAILED
// when a container vanishes while it lists them; List asks again.
func TestListRetriesARemovalRace(t *testing.T) {
	t.Parallel()
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, RemovalTime: 400 * time.Millisecond})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	keep := create(t, b, backend.Spec{Name: "keep", Session: "race"})
	going, err := b.Create(testCtx(t), backend.Spec{Name: "going", Session: "race", Image: testImage})
	require.NoError(t, err)

	before := srv.Requests()["GET /v1/sandboxes"]
	destroyed := make(chan error, 1)
	go func() { destroyed <- going.Destroy(testCtx(t)) }()
	// Wait until the removal is under way: a listing now fails.
	require.Eventually(t, func() bool {
		ids := srv.SandboxIDs()
		return len(ids) == 2 && removing(t, srv)
	}, 5*time.Second, 10*time.Millisecond)

	infos, err := b.List(testCtx(t), backend.Filter{Session: "race"})
	require.NoError(t, err, "List gives up on a listing that raced a removal")
	require.NoError(t, <-destroyed)
	assert.GreaterOrEqual(t, srv.Requests()["GET /v1/sandboxes"]-before, 2, "List asked again")
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
	}
	assert.Contains(t, names, "keep")
	_ = keep

	t.Run("other server errors are not retried", func(t *testing.T) {
		var calls int
		var mu sync.Mutex
		srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, Intercept: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method != http.MethodGet || r.URL.Path != "/v1/sandboxes" {
				return false
			}
			mu.Lock()
			calls++
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"code":"DOCKER::SANDBOX_LIST_FAILED","message":"the daemon is down"}`)
			return true
		}})
		b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
		_, err := b.List(testCtx(t), backend.Filter{})
		assert.ErrorContains(t, err, "the daemon is down")
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, 1, calls)
	})
}

// removing reports whether a listing fails right now with the race's error.
func removing(t *testing.T, srv *opensandboxtest.Server) bool {
	req, err := http.NewRequest(http.MethodGet, srv.URL()+"/v1/sandboxes", nil)
	require.NoError(t, err)
	req.Header.Set("OPEN-SANDBOX-API-KEY", testAPIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusInternalServerError && strings.Contains(string(body), "No such container")
}

// A port the server publishes only through execd's proxy comes back as
// host:port/proxy/PORT: Endpoint says so with the URL, and the URL works.
func TestEndpointOfARoutedPort(t *testing.T) {
	t.Parallel()
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, RoutedPorts: true})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})

	// A service "in the sandbox": the in-process server's sandboxes share
	// this host's network.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "service saw %s", r.URL.Path)
	})}
	go hs.Serve(l)
	t.Cleanup(func() { hs.Close() })

	sb := create(t, b, backend.Spec{Name: "routed", Ports: []backend.Port{{Port: port}}})
	_, err = sb.(backend.Endpointer).Endpoint(testCtx(t), port)
	require.Error(t, err)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	re, ok := errors.AsType[*opensandbox.RouteError](err)
	require.True(t, ok, "%T: %v", err, err)
	assert.Equal(t, port, re.Port)
	assert.ErrorContains(t, err, re.URL)
	execd, _, err := sb.(*opensandbox.Sandbox).HTTPEndpoint(testCtx(t), 44772)
	require.NoError(t, err)
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/`, re.URL)
	assert.Equal(t, execd+"/proxy/"+fmt.Sprint(port), re.URL, "execd's endpoint and its proxy route")

	url, h, err := sb.(*opensandbox.Sandbox).HTTPEndpoint(testCtx(t), port)
	require.NoError(t, err)
	assert.Equal(t, re.URL, url)
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, url+"/mcp", nil)
	require.NoError(t, err)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "service saw /mcp", string(body), "the route reaches the service")

	// Commands still work: execd itself is published directly.
	res, err := sb.Exec(testCtx(t), backend.ExecRequest{Cmd: []string{"echo", "ok"}})
	require.NoError(t, err)
	assert.Equal(t, "ok\n", string(res.Stdout))
}

// Short output comes back, byte-exact, in the request that ran the
// command: no download. Larger output is still downloaded, exactly.
func TestExecOutputComesWithTheCommand(t *testing.T) {
	t.Parallel()
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	sb := create(t, b, backend.Spec{Name: "inline"})
	ctx := testCtx(t)
	_, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}) // the sandbox's probe
	require.NoError(t, err)

	downloads := func() int {
		return srv.Requests()["execd GET /files/download"] + srv.Requests()["execd GET /files/info"]
	}
	for _, c := range []struct {
		name           string
		req            backend.ExecRequest
		stdout, stderr string
		exit           int
	}{
		{"no output", backend.ExecRequest{Cmd: []string{"true"}}, "", "", 0},
		{"lines", backend.ExecRequest{Shell: "echo hi; echo err >&2; exit 3"}, "hi\n", "err\n", 3},
		{"bytes a line stream loses", backend.ExecRequest{Shell: `printf 'a\r\nb\000\377\n\n\ntail'; printf '\r' >&2`}, "a\r\nb\x00\xff\n\n\ntail", "\r", 0},
		{"a slow command", backend.ExecRequest{Shell: "sleep 0.3; printf done"}, "done", "", 0},
		{"over the cap", backend.ExecRequest{Shell: "printf 0123456789", OutputLimit: 4}, "0123", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := downloads()
			res, err := sb.Exec(ctx, c.req)
			require.NoError(t, err)
			assert.Equal(t, c.exit, res.ExitCode)
			assert.Equal(t, c.stdout, string(res.Stdout))
			assert.Equal(t, c.stderr, string(res.Stderr))
			assert.Equal(t, c.req.OutputLimit > 0, res.Truncated)
			assert.Equal(t, n, downloads(), "files downloaded for a short output")
		})
	}
	t.Run("large output is downloaded", func(t *testing.T) {
		n := downloads()
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "head -c 300000 /dev/zero | tr '\\0' 'x'; printf end"})
		require.NoError(t, err)
		assert.Equal(t, strings.Repeat("x", 300000)+"end", string(res.Stdout))
		assert.Greater(t, downloads(), n)
	})
	t.Run("streamed to writers", func(t *testing.T) {
		var out, errb bytes.Buffer
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `printf 'x\ry'; sleep 0.2; printf 'z\377' >&2`, Stdout: &out, Stderr: &errb})
		require.NoError(t, err)
		assert.Equal(t, 0, res.ExitCode)
		assert.Equal(t, "x\ry", out.String())
		assert.Equal(t, "z\xff", errb.String())
	})
}

// On the timeout path a failed final download is reported, not dropped.
func TestTimeoutReportsAFailedDownload(t *testing.T) {
	t.Parallel()
	var failing sync.Map // paths whose download fails
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, Intercept: func(w http.ResponseWriter, r *http.Request) bool {
		if p := r.URL.Query().Get("path"); r.URL.Path != "/files/download" || !strings.Contains(p, ".sbx-exec-") || !strings.HasSuffix(p, "out") {
			return false
		}
		if _, ok := failing.Load("on"); !ok {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"code":"RUNTIME_ERROR","message":"error accessing file: input/output error"}`)
		return true
	}})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	sb := create(t, b, backend.Spec{Name: "timeout"})
	_, err := sb.Exec(testCtx(t), backend.ExecRequest{Cmd: []string{"true"}})
	require.NoError(t, err)

	failing.Store("on", true)
	res, err := sb.Exec(testCtx(t), backend.ExecRequest{Shell: "echo partial; sleep 30", Timeout: 300 * time.Millisecond})
	assert.True(t, res.TimedOut)
	assert.Equal(t, backend.TimeoutExitCode, res.ExitCode)
	require.Error(t, err, "the output that could not be read is reported")
	assert.ErrorContains(t, err, "input/output error")
	assert.ErrorContains(t, err, "timed out")
}

// Nothing of a command stays behind in its sandbox once the backend is
// closed: neither the wrapper's scratch files nor the output files a real
// execd keeps for every command (/tmp/<id>.stdout and .stderr).
func TestCommandsLeaveNoFiles(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, KeepCommandLogs: true})
	b, err := opensandbox.New(opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	require.NoError(t, err)
	sb := create(t, b, backend.Spec{Name: "tidy"})
	ours := func() []string {
		logs, _ := filepath.Glob("/tmp/*.stdout")
		errs, _ := filepath.Glob("/tmp/*.stderr")
		scratch, _ := filepath.Glob("/tmp/.sbx-exec-*")
		return append(append(logs, errs...), scratch...)
	}
	before := ours()
	for _, req := range []backend.ExecRequest{
		{Cmd: []string{"true"}},
		{Shell: "echo out; echo err >&2; exit 3"},
		{Shell: "head -c 200000 /dev/zero"},
		{Shell: "cat", Stdin: strings.NewReader("in\n")},
	} {
		_, err := sb.Exec(testCtx(t), req)
		require.NoError(t, err)
	}
	require.NoError(t, b.Close())
	var left []string
	for _, f := range ours() {
		if !slices.Contains(before, f) {
			left = append(left, f)
		}
	}
	assert.Empty(t, left, "files of the commands left after Close")
}
