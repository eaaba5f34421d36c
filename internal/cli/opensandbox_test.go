package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// TestOpenSandboxBackend drives sbx run, up, the agent tools, ls and rm with
// backend = "opensandbox" against the in-process OpenSandbox server (built
// from OpenSandbox's published specs; it runs commands on this host), as a
// user with a deployment would.
func TestOpenSandboxBackend(t *testing.T) {
	setup(t)
	const key = "sbx-cli-test-key"
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if v := srv.Violations(); len(v) > 0 {
			t.Errorf("protocol violations seen by the in-process server: %q", v)
		}
		srv.Close()
	})
	t.Setenv("OPEN_SANDBOX_API_KEY", key)
	t.Setenv("SBX_CONFIG", writeConfig(t, `
[sandbox]
backend = "opensandbox"
default_image = "ubuntu:24.04"
[sandbox.opensandbox]
domain = "`+srv.Domain()+`"
default_timeout_sec = 600
[sandbox.sandboxes.main]
environment = { GREETING = "hello" }
`))

	// The API key is never printed.
	if out := must(t, "config", "check"); strings.Contains(out, key) {
		t.Errorf("sbx config check printed the API key:\n%s", out)
	}

	r := sbx(t, "run", "--", "sh", "-c", `echo "$GREETING"; echo oops >&2; exit 3`)
	r.expect(t, 3)
	if r.stdout != "hello\n" || !strings.Contains(r.stderr, "oops") {
		t.Errorf("sbx run: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if list := listSandboxes(t); len(list) != 0 {
		t.Fatalf("sbx run left sandboxes behind: %+v", list)
	}

	ids := up(t, "main")
	id := ids["main"]
	if id == "" {
		t.Fatalf("sbx up made no main sandbox: %v", ids)
	}
	list := listSandboxes(t)
	if len(list) != 1 || list[0].ID != id {
		t.Fatalf("sbx ls: %+v, want the one sandbox %s", list, id)
	}
	// default_timeout_sec is the TTL (no default_ttl in the file).
	if exp := list[0].ExpiresAt; exp == nil || exp.Sub(list[0].CreatedAt).Round(time.Minute) != 10*time.Minute {
		t.Errorf("sandbox created %v expires %v, want 10 minutes later", list[0].CreatedAt, exp)
	}

	if out := must(t, "tools", "write", "main", "notes/a.txt", "--content", "alpha\nbeta\n"); !strings.Contains(out, "notes/a.txt") {
		t.Errorf("tools write: %q", out)
	}
	if out := must(t, "tools", "edit", "main", "notes/a.txt", "--old", "beta", "--new", "gamma"); !strings.Contains(out, "notes/a.txt") {
		t.Errorf("tools edit: %q", out)
	}
	if out := must(t, "tools", "read", "main", "notes/a.txt"); !strings.Contains(out, "alpha") || !strings.Contains(out, "gamma") || strings.Contains(out, "beta") {
		t.Errorf("tools read after edit: %q", out)
	}
	if out := must(t, "tools", "grep", "main", "gamma"); !strings.Contains(out, "a.txt") {
		t.Errorf("tools grep: %q", out)
	}
	r = sbx(t, "exec", "main", "--", "cat", "notes/a.txt")
	r.expect(t, 0)
	if r.stdout != "alpha\ngamma\n" {
		t.Errorf("sbx exec cat: %q", r.stdout)
	}

	must(t, "rm", id)
	if list := listSandboxes(t); len(list) != 0 {
		t.Errorf("sandboxes after sbx rm: %+v", list)
	}
	r = sbx(t, "exec", id, "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, id) {
		t.Errorf("exec on a removed sandbox: exit %d, stderr %q (want an error naming it)", r.code, r.stderr)
	}
}
