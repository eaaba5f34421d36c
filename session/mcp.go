package session

import (
	"slices"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
)

// planMCP builds the readiness probe of the entry's mcp_services
// ([mcp.services.NAME] tables), bounded by the member's initializer
// timeout. It runs after the initializer's own probe, for every type: the
// entry names the services it wants up. (OpenSage's neo4j, joern and
// coverage initializers replace the default readiness and so ignore
// mcp_services.) A service inside the sandbox whose port the merged Spec
// does not publish is refused here, so config check reports it.
func (l *Launcher) planMCP(m *member, e *config.Entry) error {
	if len(e.MCPServices) == 0 {
		return nil
	}
	tables := l.Config.MCPServices()
	var services []initializers.MCPService
	for i, name := range e.MCPServices {
		if slices.Contains(e.MCPServices[:i], name) {
			continue
		}
		t := tables[name]
		services = append(services, initializers.MCPService{Name: name, Port: t.SSEPort, Host: t.SSEHost})
	}
	probe, err := initializers.ForMCPServices(services, m.spec)
	if err != nil {
		return backend.InvalidConfigf("%s: %s.mcp_services: %s", l.Config.Describe(), config.EntryKey(m.name), stripSentinel(err))
	}
	m.mcp = probe.WithTimeout(m.timeout)
	return nil
}
