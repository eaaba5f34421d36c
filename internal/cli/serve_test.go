package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/catalog"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/servecmd"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// TestMain lets the MCP stdio test start this test binary as sbx.
// testFeatures are sbx-full's: the tests run every command in-process
// (and as this test binary, SBX_TEST_RUN_SBX=1); cmd/sbx's hand-over has
// its own test (TestHandsOverToFull).
var testFeatures = Features{Backends: catalog.Backends, Server: servecmd.Server()}

func TestMain(m *testing.M) {
	if os.Getenv("SBX_TEST_RUN_SBX") == "1" {
		Main(testFeatures)
	}
	features = testFeatures
	// The sbx processes these tests start handle SIGHUP and SIGINT even
	// when this test runs with them ignored (under nohup, as a background
	// job), as sbx keeps an ignored stop signal ignored: a handler here
	// gives the children the default, which they handle. Only then: a
	// handler would keep Ctrl-C from stopping the tests.
	for _, s := range []os.Signal{syscall.SIGHUP, os.Interrupt} {
		if signal.Ignored(s) {
			signal.Notify(make(chan os.Signal, 1), s)
		}
	}
	os.Exit(m.Run())
}

var listeningRE = regexp.MustCompile(`listening on (http://\S+)`)

// startServe runs sbx serve in-process and returns its URL and a func that
// stops it and returns its exit code and stderr.
func startServe(t *testing.T, args ...string) (string, func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), strings.NewReader(""), &stdout, &stderr) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := listeningRE.FindStringSubmatch(stderr.String()); m != nil {
			stop := sync.OnceValues(func() (int, string) {
				cancel()
				return <-done, stderr.String()
			})
			t.Cleanup(func() { stop() })
			return m[1], stop
		}
		select {
		case code := <-done:
			t.Fatalf("sbx serve exited %d before listening: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sbx serve did not listen within 30s: %s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestServe(t *testing.T) {
	setup(t)
	t.Setenv("SBX_API_KEY", "k")
	url, stop := startServe(t, "--listen", "127.0.0.1:0")

	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %s", resp.Status)
	}
	resp, err = http.Get(url + "/sandbox/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/sandbox/status without the key: %s, want 401", resp.Status)
	}

	// An MCP agent and a JSON API caller, each with their own sandbox.
	hc := &http.Client{Transport: keyTransport{"k"}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	servertest.AgentTurn(t, servertest.MCP(cs), "")
	cs.Close()
	api := servertest.HTTP(url, "k", "api-conv")
	id := servertest.Create(t, api, nil)

	code, stderr := stop()
	if code != 0 {
		t.Fatalf("sbx serve exited %d: %s", code, stderr)
	}
	// The sandbox outlives the server: it is resumable.
	if got := listSandboxes(t); len(got) != 1 || got[0].ID != id {
		t.Fatalf("after shutdown: sandboxes %+v, want just %s", got, id)
	}
	must(t, "rm", id)
}

type keyTransport struct{ key string }

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

func TestServeRefusesOpenListenWithoutKey(t *testing.T) {
	setup(t)
	t.Setenv("SBX_API_KEY", "")
	r := sbx(t, "serve", "--listen", "0.0.0.0:0")
	r.expect(t, exitError)
	if !strings.Contains(r.stderr, "is not loopback and no API key is set") || !strings.Contains(r.stderr, "--insecure") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// TestServeAPIKeyWhitespace: a key read with its newline is used trimmed,
// with a warning, instead of refusing every request with 401.
func TestServeAPIKeyWhitespace(t *testing.T) {
	setup(t)
	t.Setenv("SBX_API_KEY", "k\n")
	url, stop := startServe(t, "--listen", "127.0.0.1:0")
	req, err := http.NewRequest(http.MethodGet, url+"/sandbox/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_, stderr := stop()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/sandbox/status with the key: %s, want 200\nstderr: %s", resp.Status, stderr)
	}
	if !strings.Contains(stderr, "warning: $SBX_API_KEY has whitespace around it") {
		t.Fatalf("no warning about the key's whitespace: %s", stderr)
	}
}

// TestServeUnisolated: on the local backend (no isolation) sbx serve warns,
// and listening beyond loopback needs --allow-unisolated, API key or not.
func TestServeUnisolated(t *testing.T) {
	setup(t)
	t.Setenv("SBX_API_KEY", "k")
	// Bounded, so a server that starts anyway fails the test instead of
	// hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := sbxIn(t, ctx, "", "serve", "--listen", "0.0.0.0:8765")
	r.expect(t, exitError)
	for _, want := range []string{"no isolation", "is not loopback", "--allow-unisolated"} {
		if !strings.Contains(r.stderr, want) {
			t.Fatalf("sbx serve --listen 0.0.0.0:8765 on local: want %q in stderr: %s", want, r.stderr)
		}
	}

	url, stop := startServe(t, "--listen", "0.0.0.0:0", "--allow-unisolated")
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	code, stderr := stop()
	if code != 0 {
		t.Fatalf("sbx serve --allow-unisolated exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "warning: the local backend gives no isolation") {
		t.Fatalf("sbx serve on local: no isolation warning in stderr: %s", stderr)
	}
}

func TestMCPStdio(t *testing.T) {
	setup(t)
	mcpStdio(t, "", nil)
}

// TestMCPStdioBadLine: a malformed line on sbx mcp's stdin gets a JSON-RPC
// parse error and the session carries on, sandbox and all; sbx mcp on the
// local backend warns that it gives no isolation.
func TestMCPStdioBadLine(t *testing.T) {
	setup(t)
	stdin, in := io.Pipe()
	out, stdout := io.Pipe()
	var stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"mcp"}, stdin, stdout, &stderr)
		stdout.Close()
	}()
	t.Cleanup(func() { in.Close() })
	lines := bufio.NewScanner(out)
	lines.Buffer(nil, 16<<20)
	exchange := func(line string) map[string]any {
		t.Helper()
		if _, err := io.WriteString(in, line+"\n"); err != nil {
			t.Fatalf("writing %s: sbx mcp stopped reading (%v)\nstderr: %s", line, err, stderr.String())
		}
		if !lines.Scan() {
			t.Fatalf("after %s: sbx mcp's output ended\nstderr: %s", line, stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("answer to %s: %v: %s", line, err, lines.Text())
		}
		return m
	}
	exchange(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	created := fmt.Sprint(exchange(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_sandbox","arguments":{}}}`))
	m := regexp.MustCompile(`Created sandbox (\S+) `).FindStringSubmatch(created)
	if m == nil {
		t.Fatalf("create_sandbox: %s", created)
	}
	bad := exchange(`{oops`)
	if e, _ := bad["error"].(map[string]any); e == nil || e["code"] != -32700.0 || bad["id"] != nil {
		t.Fatalf("answer to {oops: %v, want a parse error (-32700) with id null", bad)
	}
	ran := fmt.Sprint(exchange(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute","arguments":{"sandbox_id":"` + m[1] + `","command":"echo alive"}}}`))
	if !strings.Contains(ran, "alive") {
		t.Fatalf("execute after the bad line: %s", ran)
	}
	in.Close()
	if code := <-done; code != 0 {
		t.Fatalf("sbx mcp exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "warning: the local backend gives no isolation") {
		t.Fatalf("sbx mcp on local: no isolation warning in stderr: %s", stderr.String())
	}
}

// TestMCPStdioNative runs sbx mcp on the native backend, from a config
// file.
func TestMCPStdioNative(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	run := rand.Text()
	dockertest.AssertNoLeftovers(t, cli, "sbx-test-run", run)
	cfg := filepath.Join(t.TempDir(), "sandbox.toml")
	if err := os.WriteFile(cfg, []byte(`[sandbox]
backend = "native"
[sandbox.native]
pull_policy = "never"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.main.labels]
sbx-test-run = "`+run+`"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SBX_CONFIG", cfg)
	// Other tests share the Docker engine: count only this test's.
	mcpStdio(t, "/tmp", map[string]string{"sbx-test-run": run})
}

// mcpStdio starts sbx mcp (this test binary) as an MCP client would and
// plays agent turns in dir, without and with --conversation. labels select
// the sandboxes that count (nil: all).
func mcpStdio(t *testing.T, dir string, labels map[string]string) {
	mine := func() []sandboxJSON {
		var out []sandboxJSON
	next:
		for _, sb := range listSandboxes(t) {
			for k, v := range labels {
				if sb.Labels[k] != v {
					continue next
				}
			}
			out = append(out, sb)
		}
		return out
	}
	for _, conversation := range []string{"", "resumable"} {
		args := []string{"mcp"}
		if conversation != "" {
			args = append(args, "--conversation", conversation)
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "SBX_TEST_RUN_SBX=1")
		var stderr syncbuf.Buffer
		cmd.Stderr = &stderr
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("sbx mcp: %v\n%s", err, stderr.String())
		}
		call := servertest.MCP(cs)
		servertest.AgentTurn(t, call, dir)
		id := servertest.Create(t, call, nil)
		if err := cs.Close(); err != nil {
			t.Fatalf("closing sbx mcp: %v\n%s", err, stderr.String())
		}
		got := mine()
		if conversation == "" {
			if len(got) != 0 {
				t.Fatalf("sbx mcp without --conversation left sandboxes: %+v\n%s", got, stderr.String())
			}
			continue
		}
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("sbx mcp --conversation: sandboxes %+v, want just %s", got, id)
		}
		must(t, "rm", id)
	}
}
