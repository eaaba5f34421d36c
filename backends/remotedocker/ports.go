package remotedocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Endpoint returns an address this machine can dial for a published TCP
// port of the sandbox:
//   - "remote" mode: docker_remote_host and the port the engine chose (or
//     the address the entry bound it to);
//   - "tunnel" mode, or a port the entry bound to the remote's loopback: a
//     127.0.0.1 listener here whose connections are forwarded through the
//     SSH connection (it lives until Destroy or Close).
func (s *Sandbox) Endpoint(ctx context.Context, port int) (string, error) {
	if port <= 0 || port > 65535 {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, endpointTimeout)
		defer cancel()
	}
	if err := s.b.ready(ctx); err != nil {
		return "", s.opErr("endpoint", err)
	}
	ip, hostPort, err := s.binding(ctx, port)
	if err != nil {
		return "", s.opErr("endpoint", err)
	}
	addr, err := netip.ParseAddr(ip)
	loopback := err == nil && addr.IsLoopback()
	if s.b.ports == PortsTunnel || loopback {
		if s.b.ssh == nil {
			return "", s.opErr("endpoint", fmt.Errorf("%w: port %d is published on the remote's loopback %s, which only an ssh:// docker_host can tunnel to",
				backend.ErrUnavailable, port, ip))
		}
		if ip == "" || (err == nil && addr.IsUnspecified()) {
			ip = "127.0.0.1"
		}
		local, err := s.b.tunnels.open(s.cid, net.JoinHostPort(ip, hostPort))
		if err != nil {
			return "", s.opErr("endpoint", err)
		}
		return local, nil
	}
	if ip == "" || (err == nil && addr.IsUnspecified()) {
		return net.JoinHostPort(s.b.remoteHost, hostPort), nil
	}
	return net.JoinHostPort(ip, hostPort), nil
}

// binding returns where the remote engine published port/tcp: the host
// address ("" or unspecified: every interface) and port. A container on
// the host network publishes nothing: its port is the remote's own.
func (s *Sandbox) binding(ctx context.Context, port int) (string, string, error) {
	c, err := s.b.cli.ContainerInspect(ctx, s.cid)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", "", fmt.Errorf("%w: the sandbox's container is gone: %s", backend.ErrNotFound, err.Error())
		}
		if _, ok := errors.AsType[*DroppedError](err); ok || errors.Is(err, backend.ErrUnavailable) {
			return "", "", err
		}
		return "", "", errors.New(err.Error())
	}
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsHost() {
		return "", strconv.Itoa(port), nil
	}
	if c.NetworkSettings != nil {
		for p, binds := range c.NetworkSettings.Ports {
			if p.Proto() != "tcp" || p.Int() != port {
				continue
			}
			for _, bnd := range binds {
				if bnd.HostPort != "" {
					return bnd.HostIP, bnd.HostPort, nil
				}
			}
		}
	}
	return "", "", fmt.Errorf("%w: port %d/tcp is not published (add it to the sandbox entry's ports)", backend.ErrNotFound, port)
}

// tunnels are the 127.0.0.1 listeners of "tunnel" mode, one per container
// and remote address.
type tunnels struct {
	b      *Backend
	mu     sync.Mutex
	m      map[tunnelKey]*tunnel
	closed bool
}

type tunnelKey struct{ cid, remote string }

type tunnel struct {
	ln     net.Listener
	remote string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	done   chan struct{}
}

func newTunnels(b *Backend) *tunnels {
	return &tunnels{b: b, m: map[tunnelKey]*tunnel{}}
}

// open returns the local address forwarding to remote (an address as seen
// from the remote host), starting a listener the first time.
func (ts *tunnels) open(cid, remote string) (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return "", fmt.Errorf("%w: %w", backend.ErrUnavailable, errClosed)
	}
	key := tunnelKey{cid, remote}
	if t, ok := ts.m[key]; ok {
		return t.ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("%w: tunnel to %s: listening on 127.0.0.1: %v", backend.ErrUnavailable, remote, err)
	}
	t := &tunnel{ln: ln, remote: remote, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	ts.m[key] = t
	go t.serve(ts.b)
	ts.b.log.Debug("tunnel open", "local", ln.Addr().String(), "remote", remote, "container", cid)
	return ln.Addr().String(), nil
}

// tunnelDialTimeout bounds opening the forwarded connection on the remote.
const tunnelDialTimeout = 30 * time.Second

func (t *tunnel) serve(b *Backend) {
	defer close(t.done)
	for {
		local, err := t.ln.Accept()
		if err != nil {
			return
		}
		go func() {
			if !t.track(local) {
				local.Close()
				return
			}
			defer t.untrack(local)
			ctx, cancel := context.WithTimeout(context.Background(), tunnelDialTimeout)
			remote, err := b.ssh.dialTCP(ctx, t.remote)
			cancel()
			if err != nil {
				b.log.Warn("tunnel: cannot reach the sandbox's port on the remote", "remote", t.remote, "err", err)
				local.Close()
				return
			}
			if !t.track(remote) {
				remote.Close()
				local.Close()
				return
			}
			defer t.untrack(remote)
			pipe(local, remote)
		}()
	}
}

// track records c for close; false when the tunnel is closed already.
func (t *tunnel) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tunnel) untrack(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, c)
}

func (t *tunnel) close() {
	t.ln.Close()
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	<-t.done
}

// pipe copies both ways, passing each side's EOF on as a half-close, and
// returns when both directions are done.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// closeFor closes the tunnels of one container.
func (ts *tunnels) closeFor(cid string) {
	ts.mu.Lock()
	var mine []*tunnel
	for k, t := range ts.m {
		if k.cid == cid {
			mine = append(mine, t)
			delete(ts.m, k)
		}
	}
	ts.mu.Unlock()
	for _, t := range mine {
		t.close()
	}
}

func (ts *tunnels) closeAll() {
	ts.mu.Lock()
	ts.closed = true
	all := ts.m
	ts.m = map[tunnelKey]*tunnel{}
	ts.mu.Unlock()
	for _, t := range all {
		t.close()
	}
}
