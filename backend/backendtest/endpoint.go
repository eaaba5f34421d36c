package backendtest

import (
	"errors"
	"net"
	"slices"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testEndpointer starts an HTTP server inside a sandbox and fetches its
// page from this machine through the address Endpoint gives. A backend
// that publishes ports (Capabilities.Ports) gets the port in Spec.Ports;
// one that cannot but offers the host's network (local, lite) gets a
// sandbox on it, listening on a port that is free here.
func (s *suite) testEndpointer(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Endpointer](sb); !ok {
		t.Skip("the sandbox is not an Endpointer")
	}
	port := freePort(t)
	token := "endpoint " + randomHex(6)
	spec := s.spec("endpoint")
	s.needCommand(t)
	spec.Command, spec.ImageCommand = serveCommand(port, token), false
	switch {
	case s.caps.Ports:
		spec.Ports = []backend.Port{{Port: port}}
	case slices.Contains(s.caps.NetworkModes, "host"):
		spec.Network = "host"
	default:
		t.Skip("the backend can neither publish ports nor put a sandbox on the host's network")
	}
	sb = s.create(t, spec)
	e, ok := backend.As[backend.Endpointer](sb)
	if !ok {
		t.Fatal("a sandbox serving a port is not an Endpointer, though the suite's first sandbox is")
	}
	ctx := testCtx(t)
	addr, err := e.Endpoint(ctx, port)
	if errors.Is(err, errors.ErrUnsupported) {
		// A client whose server decides (the opensandbox backend in
		// front of a server whose sandboxes publish no ports).
		t.Skipf("Endpoint(%d): %v", port, err)
	}
	if err != nil {
		t.Fatalf("Endpoint(%d): %v", port, err)
	}
	if host, p, err := net.SplitHostPort(addr); err != nil || host == "" || p == "" || p == "0" {
		t.Fatalf("Endpoint(%d) = %q, want host:port", port, addr)
	}
	var body string
	var lastErr error
	if !poll(readyTimeout, func() bool {
		body, lastErr = httpGet(ctx, addr)
		return lastErr == nil
	}) {
		logs, _ := mainLogs(ctx, sb)
		t.Fatalf("GET http://%s/ (Endpoint(%d)) did not answer within %v: %v%s", addr, port, readyTimeout, lastErr, logs)
	}
	if body != token+"\n" {
		t.Errorf("GET http://%s/ (Endpoint(%d)) = %q, want %q from the server inside", addr, port, body, token+"\n")
	}
	if s.caps.Ports {
		other := port + 1
		if other > 65535 {
			other = port - 1
		}
		if addr, err := e.Endpoint(ctx, other); err == nil {
			t.Errorf("Endpoint of a port not published = %q, want an error", addr)
		}
	}
}
