package opensandbox_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	assert.Regexp(t, `^http://127\.0\.0\.1:\d+/proxy/`+fmt.Sprint(port)+`$`, re.URL)
	assert.ErrorContains(t, err, re.URL)

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
