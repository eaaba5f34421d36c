package wait_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// fakeSandbox is an in-process stand-in for a sandbox: its ports are
// listeners on this host, its log and exec results are set by the test.
type fakeSandbox struct {
	backend.Sandbox
	ports map[int]string
	logs  atomic.Value // string
	exit  atomic.Int32
	execs atomic.Int32
}

func (f *fakeSandbox) ID() string { return "fake" }

func (f *fakeSandbox) Endpoint(_ context.Context, port int) (string, error) {
	if a, ok := f.ports[port]; ok {
		return a, nil
	}
	return "", fmt.Errorf("%w: port %d is not published", backend.ErrNotFound, port)
}

func (f *fakeSandbox) Logs(context.Context, int) ([]byte, error) {
	s, _ := f.logs.Load().(string)
	return []byte(s), nil
}

func (f *fakeSandbox) Exec(_ context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	f.execs.Add(1)
	return backend.ExecResult{ExitCode: int(f.exit.Load()), Stdout: []byte("out of " + strings.Join(req.Cmd, " "))}, nil
}

func fast[T interface {
	WithTimeout(time.Duration) T
	WithPollInterval(time.Duration) T
}](p T, timeout time.Duration) T {
	return p.WithTimeout(timeout).WithPollInterval(20 * time.Millisecond)
}

// listen accepts connections and holds them open (a real server), or
// closes them at once (docker's port proxy with nothing behind it).
func listen(t *testing.T, closeAtOnce bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if closeAtOnce {
				c.Close()
				continue
			}
			go func() { time.Sleep(2 * time.Second); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestListeningPort(t *testing.T) {
	ctx := context.Background()
	sb := &fakeSandbox{ports: map[int]string{1: listen(t, false), 2: closedPort(t), 3: listen(t, true)}}
	if err := fast(wait.ForListeningPort(1), 5*time.Second).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("listening port: %v", err)
	}
	err := fast(wait.ForListeningPort(2), 300*time.Millisecond).WaitUntilReady(ctx, sb)
	if !errors.Is(err, wait.ErrNotReady) || !strings.Contains(err.Error(), "tcp port 2") {
		t.Errorf("closed port: want ErrNotReady naming the probe, got %v", err)
	}
	err = fast(wait.ForListeningPort(3), 500*time.Millisecond).WaitUntilReady(ctx, sb)
	if !errors.Is(err, wait.ErrNotReady) || !strings.Contains(err.Error(), "closed the connection at once") {
		t.Errorf("accept-and-close: want not ready, got %v", err)
	}
	// An unpublished port cannot become ready by waiting: fail at once.
	start := time.Now()
	err = fast(wait.ForListeningPort(4), time.Minute).WaitUntilReady(ctx, sb)
	if !errors.Is(err, backend.ErrNotFound) || errors.Is(err, wait.ErrNotReady) || time.Since(start) > 30*time.Second {
		t.Errorf("unpublished port: want a permanent ErrNotFound, got %v", err)
	}
}

func TestHTTP(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if n < 3 {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodPost {
			fmt.Fprint(w, `{"success": true}`)
			return
		}
		fmt.Fprint(w, `{"bolt_direct": "bolt://x:7687"}`)
	}))
	defer srv.Close()
	sb := &fakeSandbox{ports: map[int]string{80: strings.TrimPrefix(srv.URL, "http://")}}
	ctx := context.Background()
	if err := fast(wait.ForHTTP(80, "/").WithBodyMatch("bolt"), 10*time.Second).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("http: %v", err)
	}
	if calls.Load() < 3 {
		t.Errorf("ready after %d calls, want it to wait for the third", calls.Load())
	}
	err := fast(wait.ForHTTP(80, "/").WithBodyMatch("nope"), 200*time.Millisecond).WaitUntilReady(ctx, sb)
	if !errors.Is(err, wait.ErrNotReady) || !strings.Contains(err.Error(), "bolt_direct") {
		t.Errorf("body mismatch: want ErrNotReady with the last body, got %v", err)
	}
	p := wait.ForHTTP(80, "/q").WithMethod(http.MethodPost, `{"query":"1"}`).WithBodyMatch(`"success": true`)
	if err := fast(p, 5*time.Second).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("POST: %v", err)
	}
	if err := fast(wait.ForHTTP(80, "/").WithStatus(http.StatusTeapot), 200*time.Millisecond).WaitUntilReady(ctx, sb); !errors.Is(err, wait.ErrNotReady) {
		t.Errorf("status: want ErrNotReady, got %v", err)
	}
}

func TestLogAndExec(t *testing.T) {
	ctx := context.Background()
	sb := &fakeSandbox{}
	sb.logs.Store("booting\n")
	go func() {
		time.Sleep(100 * time.Millisecond)
		sb.logs.Store("booting\nstarted\nstarted\n")
	}()
	if err := fast(wait.ForLog("^started").WithOccurrences(2), 10*time.Second).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("log: %v", err)
	}
	err := fast(wait.ForLog("never"), 200*time.Millisecond).WaitUntilReady(ctx, sb)
	if !errors.Is(err, wait.ErrNotReady) || !strings.Contains(err.Error(), "0 of 1") {
		t.Errorf("log: want ErrNotReady, got %v", err)
	}
	sb.exit.Store(3)
	if err := fast(wait.ForExec("check").WithExitCode(3), time.Second).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("exec exit 3: %v", err)
	}
	err = fast(wait.ForExec("check"), 200*time.Millisecond).WaitUntilReady(ctx, sb)
	if !errors.Is(err, wait.ErrNotReady) || !strings.Contains(err.Error(), "exit code 3") || !strings.Contains(err.Error(), "out of check") {
		t.Errorf("exec: want ErrNotReady with the output, got %v", err)
	}
}

func TestMCP(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "probe-test", Version: "1"}, nil)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer srv.Close()
	notMCP := httptest.NewServer(http.NotFoundHandler())
	defer notMCP.Close()
	sb := &fakeSandbox{ports: map[int]string{
		1111: strings.TrimPrefix(srv.URL, "http://"),
		2222: strings.TrimPrefix(notMCP.URL, "http://"),
	}}
	ctx := context.Background()
	if err := fast(wait.ForMCP(1111, "/mcp"), 10*time.Second).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("mcp: %v", err)
	}
	if err := fast(wait.ForMCP(2222, "/mcp"), 300*time.Millisecond).WaitUntilReady(ctx, sb); !errors.Is(err, wait.ErrNotReady) {
		t.Errorf("not an MCP server: want ErrNotReady, got %v", err)
	}
}

func TestAllAnyAndCancel(t *testing.T) {
	ctx := context.Background()
	sb := &fakeSandbox{ports: map[int]string{1: listen(t, false), 2: closedPort(t)}}
	up := fast(wait.ForListeningPort(1), 5*time.Second)
	down := fast(wait.ForListeningPort(2), 300*time.Millisecond)
	if err := wait.All(up, up).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("all of ready probes: %v", err)
	}
	if err := wait.All(up, down).WaitUntilReady(ctx, sb); !errors.Is(err, wait.ErrNotReady) {
		t.Errorf("all with one down: want ErrNotReady, got %v", err)
	}
	if err := wait.Any(down, up).WaitUntilReady(ctx, sb); err != nil {
		t.Errorf("any with one up: %v", err)
	}
	err := wait.Any(down, down).WaitUntilReady(ctx, sb)
	if !errors.Is(err, wait.ErrNotReady) || !strings.Contains(err.Error(), "none of 2") {
		t.Errorf("any of none: %v", err)
	}
	// The combined deadline bounds slow probes.
	slow := fast(wait.ForListeningPort(2), time.Hour)
	if err := wait.All(slow).WithTimeout(200*time.Millisecond).WaitUntilReady(ctx, sb); err == nil {
		t.Error("combined deadline: want an error")
	}
	// Cancelling the caller's context reports its cause.
	cctx, cancel := context.WithCancelCause(ctx)
	go func() { time.Sleep(50 * time.Millisecond); cancel(errors.New("launch aborted")) }()
	err = slow.WaitUntilReady(cctx, sb)
	if err == nil || !strings.Contains(err.Error(), "launch aborted") || errors.Is(err, wait.ErrNotReady) {
		t.Errorf("cancel: want the cause, got %v", err)
	}
	if s := wait.Any(up, down).String(); s != "tcp port 1 or tcp port 2" {
		t.Errorf("String: %q", s)
	}
}
