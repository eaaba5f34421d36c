package initializers_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// Which sandbox port the probe asks the backend for, and which services
// are refused because the host cannot reach them.
func TestForMCPServicesPorts(t *testing.T) {
	svc := func(port int, host string) []initializers.MCPService {
		return []initializers.MCPService{{Name: "gdb_mcp", Port: port, Host: host}}
	}
	for _, tt := range []struct {
		name     string
		services []initializers.MCPService
		spec     backend.Spec
		want     string // "" ok, else in the error
	}{
		{"OpenSage: sandbox port 1111 published at host port sse_port", svc(2345, ""),
			backend.Spec{Ports: []backend.Port{{Port: 1111, HostPort: 2345}}}, ""},
		{"sse_port published as the sandbox port", svc(1111, ""),
			backend.Spec{Ports: []backend.Port{{Port: 1111, Protocol: "tcp"}}}, ""},
		{"the host's network", svc(1111, ""), backend.Spec{Network: "host"}, ""},
		{"an sse_host is dialed as written", svc(1111, "10.1.2.3"), backend.Spec{}, ""},
		{"not published", svc(1111, ""), backend.Spec{Ports: []backend.Port{{Port: 22}}},
			`service "gdb_mcp": its sse_port 1111 is not published, so it cannot be reached from the host: add "1111/tcp" = 1111 to the entry's ports`},
		{"udp does not count", svc(1111, ""), backend.Spec{Ports: []backend.Port{{Port: 1111, Protocol: "udp"}}},
			`its sse_port 1111 is not published`},
		{"no port", svc(0, ""), backend.Spec{Network: "host"}, `service "gdb_mcp": sse_port 0: want 1-65535`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := initializers.ForMCPServices(tt.services, tt.spec)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(p.String(), "gdb_mcp") {
					t.Errorf("String() %q does not name the service", p.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, backend.ErrInvalidConfig) {
				t.Errorf("error %v, want one wrapping ErrInvalidConfig containing %q", err, tt.want)
			}
		})
	}
}

// sseHandler answers GET /sse as an MCP SSE endpoint does: 200, an event
// stream, an endpoint event, then nothing until the client leaves.
func sseHandler(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != initializers.MCPSSEPath {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write([]byte("event: endpoint\ndata: /messages?session_id=1\n\n"))
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// hostPort splits a test server's address.
func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// Services with an sse_host are dialed as written, so these run against
// in-process servers without a sandbox; see session's tests for services
// inside a sandbox on the local backend.
func TestMCPServicesProbe(t *testing.T) {
	ready := httptest.NewServer(http.HandlerFunc(sseHandler))
	defer ready.Close()
	notSSE := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html>starting</html>"))
	}))
	defer notSSE.Close()
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()

	for _, tt := range []struct {
		name string
		srv  *httptest.Server
		want string // "" ready, else in the error
	}{
		{"an event stream", ready, ""},
		{"200 without an event stream", notSSE, `Content-Type "text/html" (want text/event-stream`},
		{"404", missing, "status 404 (want 200)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			host, port := hostPort(t, tt.srv.Listener.Addr().String())
			p, err := initializers.ForMCPServices([]initializers.MCPService{{Name: "pdb_mcp", Port: port, Host: host}}, backend.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			p.WithTimeout(300 * time.Millisecond).WithPollInterval(50 * time.Millisecond)
			start := time.Now()
			err = p.WaitUntilReady(context.Background(), nil)
			url := "http://" + tt.srv.Listener.Addr().String() + "/sse"
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := p.URLs()["pdb_mcp"]; got != url {
					t.Errorf("URLs()[pdb_mcp] = %q, want %q", got, url)
				}
				if time.Since(start) > 250*time.Millisecond {
					t.Errorf("an open event stream took %s: the probe must not read it to the end", time.Since(start))
				}
				return
			}
			// The deadline's error names the service, the URL and the
			// last thing seen.
			for _, want := range []string{`mcp service "pdb_mcp"`, "GET " + url, tt.want} {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want it to contain %q", err, want)
				}
			}
			if !errors.Is(err, wait.ErrNotReady) {
				t.Errorf("error %v does not wrap wait.ErrNotReady", err)
			}
		})
	}
}
