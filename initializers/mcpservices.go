package initializers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// MCPSSEPath is the path of an MCP service's SSE endpoint: OpenSage's
// [mcp.services.NAME] tables give the URL http://HOST:SSE_PORT/sse.
const MCPSSEPath = "/sse"

// MCPPollInterval is the time between two attempts of an MCP service's
// readiness check (OpenSage retries its SSE connect every second).
const MCPPollInterval = time.Second

// MCPService is an MCP service a sandbox waits for once provisioned: an
// [mcp.services.NAME] table named by the entry's mcp_services.
type MCPService struct {
	Name string
	// Port is sse_port.
	Port int
	// Host is sse_host: "" means the service runs inside the sandbox and
	// is reached at the sandbox's published address of Port (OpenSage's
	// backends put default_host, the host of such URLs, where they publish
	// ports); else the URL http://Host:Port/sse is dialed as written.
	Host string
}

// MCPServicesProbe is the readiness of an entry's mcp_services, OpenSage's
// default readiness with a deadline: each service in turn must answer a
// GET of its SSE URL with status 200 and Content-Type text/event-stream,
// tried every MCPPollInterval. A service that has not answered when the
// deadline (WithTimeout) or ctx ends fails the probe with an error naming
// the service, its URL and the last error.
type MCPServicesProbe struct {
	// Timeout bounds the wait for all services (0: wait.DefaultTimeout).
	Timeout time.Duration
	// PollInterval is the time between attempts (0: MCPPollInterval).
	PollInterval time.Duration

	targets []mcpTarget

	mu   sync.Mutex
	urls map[string]string // service -> URL last tried
}

// mcpTarget is a service and the port to ask the sandbox's backend for.
type mcpTarget struct {
	MCPService
	sandboxPort int // 0: Host is set, dial it as written
}

// ForMCPServices returns the readiness probe of services for a sandbox made
// from spec. A service inside the sandbox must be reachable from the host,
// where the probe runs: spec publishes its sse_port, either as the host
// port of a binding (OpenSage's "1111/tcp" = SSE_PORT, the probe then asks
// for sandbox port 1111) or as a sandbox port, or the sandbox shares the
// host's network (network = "host"). Otherwise the error (wrapping
// backend.ErrInvalidConfig) names the service and how to publish the port.
func ForMCPServices(services []MCPService, spec backend.Spec) (*MCPServicesProbe, error) {
	p := &MCPServicesProbe{}
	var problems []string
	for _, s := range services {
		t := mcpTarget{MCPService: s}
		switch port, published := sandboxPortOf(s.Port, spec); {
		case s.Port < 1 || s.Port > 65535:
			problems = append(problems, fmt.Sprintf("service %q: sse_port %d: want 1-65535", s.Name, s.Port))
			continue
		case s.Host != "":
		case !published:
			problems = append(problems, fmt.Sprintf(`service %q: its sse_port %d is not published, so it cannot be reached from the host: `+
				`add "%d/tcp" = %d to the entry's ports (or map the port the service listens on inside to host port %d), `+
				`give the service an sse_host, or set network = "host" where the sandbox shares the host's network (as on the local backend)`,
				s.Name, s.Port, s.Port, s.Port, s.Port))
			continue
		default:
			t.sandboxPort = port
		}
		p.targets = append(p.targets, t)
	}
	if len(problems) > 0 {
		return nil, invalidf("%s", strings.Join(problems, "; "))
	}
	return p, nil
}

// sandboxPortOf finds the sandbox port behind an SSE port: a TCP binding
// whose host port is ssePort, else a published sandbox port ssePort, else
// ssePort itself on the host's network.
func sandboxPortOf(ssePort int, spec backend.Spec) (int, bool) {
	tcp := func(p backend.Port) bool { return cmp.Or(p.Protocol, "tcp") == "tcp" }
	for _, p := range spec.Ports {
		if tcp(p) && p.HostPort == ssePort {
			return p.Port, true
		}
	}
	for _, p := range spec.Ports {
		if tcp(p) && p.Port == ssePort {
			return p.Port, true
		}
	}
	return ssePort, spec.Network == "host"
}

// WithTimeout sets the deadline of the whole wait.
func (p *MCPServicesProbe) WithTimeout(d time.Duration) *MCPServicesProbe { p.Timeout = d; return p }

// WithPollInterval sets the time between attempts.
func (p *MCPServicesProbe) WithPollInterval(d time.Duration) *MCPServicesProbe {
	p.PollInterval = d
	return p
}

// String names the services: `mcp services gdb_mcp (sse_port 1111), ...`.
func (p *MCPServicesProbe) String() string {
	var parts []string
	for _, t := range p.targets {
		where := "sse_port " + strconv.Itoa(t.Port)
		if t.Host != "" {
			where = t.url(net.JoinHostPort(t.Host, strconv.Itoa(t.Port)))
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", t.Name, where))
	}
	return "mcp services " + strings.Join(parts, ", ")
}

// URLs returns the SSE URL of each service as the host dials it (the
// sandbox's published address for services inside it), once the probe
// has tried it.
func (p *MCPServicesProbe) URLs() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.urls)
}

// WaitUntilReady waits for each service in turn, all within Timeout.
func (p *MCPServicesProbe) WaitUntilReady(ctx context.Context, sb backend.Sandbox) error {
	timeout := cmp.Or(p.Timeout, wait.DefaultTimeout)
	deadline := time.Now().Add(timeout)
	for _, t := range p.targets {
		name := fmt.Sprintf("mcp service %q", t.Name)
		left := time.Until(deadline).Round(time.Millisecond)
		if left <= 0 {
			return fmt.Errorf("%s: %w: the deadline (%s) ran out waiting for the services before it", name, wait.ErrNotReady, timeout)
		}
		poll := wait.ForFunc(name, func(ctx context.Context, sb backend.Sandbox) error {
			u, err := p.resolve(ctx, sb, t)
			if err != nil {
				return err
			}
			return wait.CheckSSE(ctx, u)
		}).WithTimeout(left).WithPollInterval(cmp.Or(p.PollInterval, MCPPollInterval))
		if err := poll.WaitUntilReady(ctx, sb); err != nil {
			return err
		}
	}
	return nil
}

// resolve returns t's URL and records it.
func (p *MCPServicesProbe) resolve(ctx context.Context, sb backend.Sandbox, t mcpTarget) (string, error) {
	addr := net.JoinHostPort(t.Host, strconv.Itoa(t.Port))
	if t.sandboxPort != 0 {
		ep, ok := backend.As[backend.Endpointer](sb)
		if !ok {
			return "", wait.Permanent(fmt.Errorf("the sandbox's backend publishes no ports, so sse_port %d cannot be reached from the host (give the service an sse_host): %w", t.Port, errors.ErrUnsupported))
		}
		a, err := ep.Endpoint(ctx, t.sandboxPort)
		if err != nil {
			err = fmt.Errorf("the host address of sandbox port %d: %w", t.sandboxPort, err)
			if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrInvalidConfig) {
				err = wait.Permanent(err)
			}
			return "", err
		}
		addr = a
	}
	u := t.url(addr)
	p.mu.Lock()
	if p.urls == nil {
		p.urls = map[string]string{}
	}
	p.urls[t.Name] = u
	p.mu.Unlock()
	return u, nil
}

func (t mcpTarget) url(hostPort string) string { return "http://" + hostPort + MCPSSEPath }
