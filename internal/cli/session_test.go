package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// TestUpStatusDownSession launches a session on the native backend with
// plain progress, shows it with status, and ends it with down.
func TestUpStatusDownSession(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	id := fmt.Sprintf("c%011x", time.Now().UnixNano()&0xfffffffffff)
	dockertest.AssertNoLeftovers(t, cli, backend.LabelSession, id)
	cfg := writeConfig(t, `
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.web]
image = "`+dockertest.BusyboxImage+`"
command = "httpd -f -p 8080"
ports = { "8080/tcp" = 0 }
`)
	r := sbx(t, "--config", cfg, "--progress", "plain", "up", "--id", id)
	r.expect(t, 0)
	t.Cleanup(func() { sbx(t, "--config", cfg, "down", id) })
	for _, want := range []string{"[main] creating", "[web] started", "[web] ready", "[main] ready"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, r.stderr)
		}
	}
	if !strings.Contains(r.stdout, "session "+id) || !strings.Contains(r.stdout, "8080->127.0.0.1:") {
		t.Errorf("up printed:\n%s", r.stdout)
	}

	var st upResult
	if err := json.Unmarshal([]byte(must(t, "--config", cfg, "--json", "status", id)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Session != id || len(st.Sandboxes) != 2 || st.Sandboxes[1].Endpoints["8080"] == "" {
		t.Errorf("status %s: %+v", id, st)
	}
	if all := must(t, "--config", cfg, "status"); !strings.Contains(all, id) || !strings.Contains(all, "web(running)") {
		t.Errorf("status:\n%s", all)
	}
	if out := must(t, "--config", cfg, "down", id); !strings.Contains(out, "removed 2 sandbox(es)") {
		t.Errorf("down printed %q", out)
	}
	r = sbx(t, "--config", cfg, "status", id)
	r.expect(t, 1)
	if !strings.Contains(r.stderr, "no sandboxes carry this session ID") {
		t.Errorf("status after down: %q", r.stderr)
	}
}
