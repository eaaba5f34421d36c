package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestMCPServices(t *testing.T) {
	unsetenv(t, "GDB_PORT")
	cfg := mustParse(t, `
GDB_PORT = 2345
[mcp]
other_tool_setting = "the embedding program's"
[mcp.services.gdb_mcp]
sse_port = "${GDB_PORT}"
[mcp.services.remote]
sse_port = 9000
sse_host = "10.0.0.7"
[mcp.services.unused]
[sandbox.sandboxes.gdb_mcp]
mcp_services = ["gdb_mcp", "remote"]
`)
	assert.Equal(t, map[string]MCPService{
		"gdb_mcp": {SSEPort: 2345},
		"remote":  {SSEPort: 9000, SSEHost: "10.0.0.7"},
		"unused":  {},
	}, cfg.MCPServices())
	assert.Equal(t, []string{"gdb_mcp", "remote"}, cfg.Sandbox.Sandboxes["gdb_mcp"].MCPServices)
	assert.Nil(t, mustParse(t, "[sandbox]\n").MCPServices(), "no [mcp] table")
}

// Errors name the key: a misspelt key, a value of the wrong type, a port
// out of range, and an entry's mcp_services naming a service without a
// table (or without sse_port) names the entry's key and the service.
func TestMCPServicesErrors(t *testing.T) {
	for _, tt := range []struct{ name, text, want string }{
		{"misspelt key", `
[mcp.services.gdb_mcp]
sse_prot = 1111
`, `unknown key "mcp.services.gdb_mcp.sse_prot" (did you mean "sse_port"?)`},
		{"port of the wrong type", `
[mcp.services.gdb_mcp]
sse_port = "eleven"
`, `mcp.services.gdb_mcp.sse_port: want an integer, got "eleven"`},
		{"host of the wrong type", `
[mcp.services.gdb_mcp]
sse_port = 1111
sse_host = [1]
`, `mcp.services.gdb_mcp.sse_host: want text, got a list`},
		{"port out of range", `
[mcp.services.gdb_mcp]
sse_port = 70000
`, `mcp.services.gdb_mcp.sse_port: 70000: want 1-65535`},
		{"port zero", `
[mcp.services.gdb_mcp]
sse_port = 0
`, `mcp.services.gdb_mcp.sse_port: 0: want 1-65535`},
		{"services not a table", `
[mcp]
services = ["gdb_mcp"]
`, `mcp.services: want a table of [mcp.services.NAME] tables, got a list`},
		{"service not a table", `
[mcp.services]
gdb_mcp = 1111
`, `mcp.services.gdb_mcp: want a table, got 1111`},
		{"unknown service", `
[mcp.services.gdb_mcp]
sse_port = 1111
[sandbox.sandboxes.main]
mcp_services = ["gdb_mpc"]
`, `sandbox.sandboxes.main.mcp_services: service "gdb_mpc" has no [mcp.services.gdb_mpc] table (known: gdb_mcp) (did you mean "gdb_mcp"?)`},
		{"no services at all", `
[sandbox.sandboxes.main]
mcp_services = ["pdb_mcp"]
`, `sandbox.sandboxes.main.mcp_services: service "pdb_mcp" has no [mcp.services.pdb_mcp] table (known: none)`},
		{"service without a port", `
[mcp.services.pdb_mcp]
sse_host = "127.0.0.1"
[sandbox.sandboxes.main]
mcp_services = ["pdb_mcp"]
`, `sandbox.sandboxes.main.mcp_services: service "pdb_mcp": [mcp.services.pdb_mcp] has no sse_port`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, errors.Is(err, backend.ErrInvalidConfig), "wraps ErrInvalidConfig: %v", err)
		})
	}
}
