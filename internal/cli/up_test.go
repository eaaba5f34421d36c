package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// A second sbx down of the same session says it is not there, and fails.
func TestDownTwice(t *testing.T) {
	setup(t)
	t.Setenv("SBX_CONFIG", writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
`))
	id := fmt.Sprintf("d%011x", time.Now().UnixNano()&0xfffffffffff)
	must(t, "up", "--id", id)
	if out := must(t, "down", id); !strings.Contains(out, "session "+id+": removed 1 sandbox(es)") {
		t.Errorf("down printed %q", out)
	}
	for _, args := range [][]string{{"down", id}, {"--json", "down", id}, {"down", "no-such-session"}} {
		r := sbx(t, args...)
		r.expect(t, 1)
		if !strings.Contains(r.stderr, "not found") || r.stdout != "" {
			t.Errorf("sbx %s: stdout %q, stderr %q", strings.Join(args, " "), r.stdout, r.stderr)
		}
	}
}

// sbx up shows a service's URL with its path (gdb_mcp's MCP endpoint), in
// text as in JSON.
func TestUpShowsServiceURLs(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	const gdbImage = "sandboxkit-test/debian-gdb:1" // scripts/gdb-image.sh
	dockertest.RequireImage(t, cli, gdbImage)
	id := fmt.Sprintf("u%011x", time.Now().UnixNano()&0xfffffffffff)
	dockertest.AssertNoLeftovers(t, cli, backend.LabelSession, id)
	cfg := writeConfig(t, `
[sandbox]
backend = "native"
[sandbox.sandboxes.gdb_mcp]
image = "`+gdbImage+`"
`)
	out := must(t, "--config", cfg, "--progress", "none", "up", "--id", id)
	t.Cleanup(func() { sbx(t, "--config", cfg, "down", id) })
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/mcp`).FindString(out)
	if url == "" || !strings.Contains(out, "URLS") {
		t.Fatalf("up shows no MCP URL:\n%s", out)
	}
	// The SSE endpoint too, for OpenSage's clients.
	sse := strings.TrimSuffix(url, "/mcp") + "/sse"
	if !strings.Contains(out, url+" "+sse) {
		t.Errorf("up shows no SSE URL %s:\n%s", sse, out)
	}
	var st upResult
	if err := json.Unmarshal([]byte(must(t, "--config", cfg, "--json", "status", id)), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Sandboxes) != 1 || !slices.Equal(st.Sandboxes[0].URLs, []string{url, sse}) {
		t.Errorf("status %+v, want the URLs %s and %s", st, url, sse)
	}
}

// A port the OpenSandbox server publishes only through its proxy is shown
// as its URL, with a warning saying why, not dropped.
func TestUpShowsARoutedPort(t *testing.T) {
	setup(t)
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: "k", RoutedPorts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	t.Setenv("OPEN_SANDBOX_API_KEY", "k")
	t.Setenv("SBX_CONFIG", writeConfig(t, `
[sandbox]
backend = "opensandbox"
default_image = "ubuntu:24.04"
[sandbox.opensandbox]
domain = "`+srv.Domain()+`"
[sandbox.sandboxes.web]
ports = { "9000/tcp" = 0 }
`))
	id := fmt.Sprintf("r%011x", time.Now().UnixNano()&0xfffffffffff)
	r := sbx(t, "--progress", "none", "up", "--id", id)
	r.expect(t, 0)
	t.Cleanup(func() { sbx(t, "down", id) })
	// execd's endpoint (sbx serve's: /execd/ID on the server) and its
	// proxy route to the port.
	if !regexp.MustCompile(`9000->http://127\.0\.0\.1:\d+/execd/[0-9a-f]+/proxy/9000 `).MatchString(r.stdout) {
		t.Errorf("up does not show the port's URL:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "warning: web:") || !strings.Contains(r.stderr, "port 9000 has no TCP address") {
		t.Errorf("up does not say why:\n%s", r.stderr)
	}
}
