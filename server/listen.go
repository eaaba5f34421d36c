package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ShutdownGrace is how long calls in flight may run on after a shutdown
// began; then they are cancelled.
const ShutdownGrace = 10 * time.Second

// CheckListen refuses to listen on anything but loopback without an API
// key, unless insecure is set.
func CheckListen(addr string, hasKey, insecure bool) error {
	host, _, err := splitListen(addr)
	if err != nil {
		return err
	}
	if hasKey || insecure || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("listen address %q is not loopback and no API key is set: set $%s or [sandbox.serve] api_key, "+
		"listen on 127.0.0.1, or pass --insecure to serve without a key", addr, EnvAPIKey)
}

func splitListen(addr string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(addr)
	if err != nil {
		return "", "", fmt.Errorf("listen address %q: %v (want host:port, e.g. 127.0.0.1:8765)", addr, err)
	}
	return host, port, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxHeaderBytes bounds a request's headers (net/http's default is 1 MiB:
// a thousand connections sending that much would hold a GiB).
const maxHeaderBytes = 64 << 10

// Serve serves Handler on ln until ctx ends, then shuts down: new
// connections are refused, calls in flight get ShutdownGrace to finish and
// are then cancelled. It holds to the connection limits and timeouts of
// Options (MaxConns, MaxConnsPerClient, ReadHeaderTimeout, IdleTimeout)
// and Handler's body limits. It does not Close s.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	lim := newConnLimiter(ln, max(s.opts.MaxConns, 0), max(s.opts.MaxConnsPerClient, 0))
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: max(s.opts.ReadHeaderTimeout, 0),
		IdleTimeout:       max(s.opts.IdleTimeout, 0),
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         lim.track,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	ln = lim
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	graceCtx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	err := hs.Shutdown(graceCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		// Streams (MCP's event streams) and long calls are still open:
		// cancel the calls, then drop the connections.
		s.stopLife()
		err = hs.Close()
	}
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
