package cli

import (
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/server/servertest"

	// An initializer in a package of its own, linked by this one import,
	// as a blank import in package catalog's list links one into sbx.
	_ "github.com/sandboxkit/sandboxkit/internal/initest"
)

// An initializer from a package of its own (internal/initest registers type
// "initest" from its init function) is known to sbx config check, sbx up
// and sbx serve, with its [extra] keys checked.
func TestInitializerFromItsOwnPackage(t *testing.T) {
	setup(t)
	const entry = `
[sandbox]
backend = "local"
[sandbox.sandboxes.greeter]
type = "initest"
[sandbox.sandboxes.greeter.extra]
`
	cfg := writeConfig(t, entry+`greeting = "hi there"`+"\n")
	t.Setenv("SBX_CONFIG", cfg)

	r := sbx(t, "config", "check")
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, "unknown initializer") {
		t.Fatalf("config check: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	bad := writeConfig(t, entry+`greeting = " "`+"\n")
	r = sbx(t, "--config", bad, "config", "check")
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "sandbox.sandboxes.greeter.extra: greeting: empty") {
		t.Fatalf("config check of an empty greeting: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	ids := up(t, "greeter")
	id := ids["greeter"]
	if id == "" {
		t.Fatalf("up made no greeter: %v", ids)
	}
	t.Cleanup(func() { sbx(t, "rm", id) })
	if got := must(t, "exec", id, "--", "sh", "-c", `cat initest.txt; echo " $INITEST_GREETING"`); got != "hi there hi there\n" {
		t.Errorf("the greeter's file and variable: %q, want %q", got, "hi there hi there\n")
	}

	t.Setenv("SBX_API_KEY", "k")
	url, _ := startServe(t, "--listen", "127.0.0.1:0")
	api := servertest.HTTP(url, "k", "initest-conv")
	sid := servertest.Create(t, api, map[string]any{"type": "greeter"})
	if out := servertest.Must(t, api, "execute", map[string]any{"sandbox_id": sid, "command": "cat initest.txt"}); !strings.Contains(out, "hi there") {
		t.Errorf("sbx serve's greeter: execute printed %q, want the greeting", out)
	}
	servertest.Must(t, api, "delete_sandbox", map[string]any{"sandbox_id": sid})
}
