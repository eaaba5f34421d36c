package main

import (
	"context"
	"crypto/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// TestMain lets the MCP stdio test start this test binary as sbx.
func TestMain(m *testing.M) {
	if os.Getenv("SBX_TEST_RUN_SBX") == "1" {
		main()
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
