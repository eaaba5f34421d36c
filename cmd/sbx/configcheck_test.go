package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// config check says which entries' types have no initializer (they run as
// plain sandboxes, as OpenSage's pdb_mcp does); an explicit type = "generic"
// is asked for, so not noted.
func TestConfigCheckPlainSandboxes(t *testing.T) {
	setup(t)
	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
[sandbox.sandboxes.pdb_mcp]
[sandbox.sandboxes.tools]
type = "generic"
[sandbox.sandboxes.worker]
`)
	r := sbx(t, "config", "check", cfg)
	r.expect(t, 0)
	want := "sandbox pdb_mcp: type pdb_mcp has no initializer; it runs as a plain sandbox from its keys\n" +
		"sandbox worker: type worker has no initializer; it runs as a plain sandbox from its keys\n"
	if !strings.HasSuffix(r.stdout, want) || strings.Contains(r.stdout, "sandbox main:") || strings.Contains(r.stdout, "sandbox tools:") {
		t.Errorf("stdout %q, want it to end with\n%s", r.stdout, want)
	}

	var res configCheckResult
	if err := json.Unmarshal([]byte(must(t, "--json", "config", "check", cfg)), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 2 || !strings.HasPrefix(res.Notes[0], "sandbox pdb_mcp: type pdb_mcp has no initializer") {
		t.Errorf("json notes %q", res.Notes)
	}
}

// config check reports an entry's mcp_services that the host cannot reach
// or that names no [mcp.services.NAME] table, naming the key.
func TestConfigCheckMCPServices(t *testing.T) {
	setup(t)
	const head = `
[mcp.services.pdb_mcp]
sse_port = 1112
[sandbox]
backend = "local"
[sandbox.sandboxes.pdb_mcp]
`
	r := sbx(t, "config", "check", writeConfig(t, head+"network = \"host\"\nmcp_services = [\"pdb_mcp\"]\n"))
	r.expect(t, 0)
	for _, tt := range []struct{ entry, want string }{
		{`mcp_services = ["pdb_mcp"]`, `sandbox.sandboxes.pdb_mcp.mcp_services: service "pdb_mcp": its sse_port 1112 is not published`},
		{`mcp_services = ["gdb_mcp"]`, `sandbox.sandboxes.pdb_mcp.mcp_services: service "gdb_mcp" has no [mcp.services.gdb_mcp] table (known: pdb_mcp)`},
	} {
		r := sbx(t, "config", "check", writeConfig(t, head+tt.entry+"\n"))
		r.expect(t, 1)
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("stderr %q, want %q", r.stderr, tt.want)
		}
	}
}
