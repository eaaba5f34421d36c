package config

import (
	"cmp"
	"strings"

	"github.com/BurntSushi/toml"
)

// MCPService is one root [mcp.services.NAME] table of an OpenSage file: an
// MCP server speaking the SSE transport at http://HOST:SSE_PORT/sse. An
// entry's mcp_services names such tables; the session waits for each one
// after provisioning the entry (a GET of the URL answering 200 with an
// event stream), as OpenSage's default readiness does.
//
// The table is decoded strictly: a misspelt key or a value of the wrong
// type is an error naming it ("mcp.services.gdb_mcp.sse_prot"). Other keys
// of [mcp] belong to the embedding program and are ignored.
type MCPService struct {
	// SSEPort is the port the service's SSE endpoint is reached at; 1-65535.
	// It is required of a service an entry names.
	SSEPort int `toml:"sse_port"`
	// SSEHost is the host of the URL. "" (absent): the service runs inside
	// the sandbox whose entry names it and is reached at that sandbox's
	// published address of SSEPort, as OpenSage's backends replace its
	// default_host by where they publish ports. Set: the URL is used as
	// written.
	SSEHost string `toml:"sse_host"`
}

// MCPServices returns the [mcp.services.NAME] tables by name (nil when the
// file has none).
func (c *Config) MCPServices() map[string]MCPService { return c.mcp }

// decodeMCP decodes the root [mcp.services] tables, with ${VAR} templates,
// into p.cfg.mcp.
func (p *parser) decodeMCP(doc map[string]any) {
	var services any
	switch v := doc["mcp"].(type) {
	case nil:
		return
	case map[string]any:
		services = v["services"]
	default:
		p.errorf("mcp", "want a table, got %s", describeValue(v))
		return
	}
	switch v := services.(type) {
	case nil:
	case map[string]any:
		out := map[string]MCPService{}
		p.decodeStrict(v, toml.Key{"mcp", "services"}, &out, nil)
		for _, name := range sortedKeys(out) {
			table, _ := v[name].(map[string]any)
			if _, written := table["sse_port"]; written && (out[name].SSEPort < 1 || out[name].SSEPort > 65535) {
				p.errorf(toml.Key{"mcp", "services", name, "sse_port"}.String(), "%d: want 1-65535", out[name].SSEPort)
			}
		}
		p.cfg.mcp = out
	default:
		p.errorf("mcp.services", "want a table of [mcp.services.NAME] tables, got %s", describeValue(v))
	}
}

// checkMCPServices checks each entry's mcp_services: every name needs a
// [mcp.services.NAME] table with an sse_port.
func (p *parser) checkMCPServices() {
	known := sortedKeys(p.cfg.mcp)
	for _, name := range p.cfg.SandboxNames() {
		e := p.cfg.Sandbox.Sandboxes[name]
		key := append(entryKey(name), "mcp_services").String()
		for _, svc := range e.MCPServices {
			s, ok := p.cfg.mcp[svc]
			switch {
			case !ok:
				list := cmp.Or(strings.Join(known, ", "), "none")
				p.errorf(key, "service %q has no [mcp.services.%s] table (known: %s)%s", svc, svc, list, DidYouMean(svc, known))
			case s.SSEPort == 0:
				p.errorf(key, "service %q: [mcp.services.%s] has no sse_port (the port its SSE endpoint listens on)", svc, svc)
			}
		}
	}
}
