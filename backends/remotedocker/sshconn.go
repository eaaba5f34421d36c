package remotedocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
)

// sshConn is the one SSH connection to the remote host that carries every
// Engine API request (each a direct-streamlocal channel to the engine's
// socket) and every tunnelled port. It connects on first use, sends
// keepalives, and after the connection drops connects again on the next
// dial. Streams that were open on a dropped connection fail with an error
// wrapping backend.ErrUnavailable rather than ending as if the remote had
// finished (see streamConn).
type sshConn struct {
	target   *sshTarget
	socket   string // the engine's socket on the remote
	identity string // identity_file
	known    string // known_hosts
	insecure bool
	log      *slog.Logger

	sem    chan struct{} // held while connecting: one attempt at a time
	mu     sync.Mutex
	cur    *generation
	closed bool
	gens   atomic.Int64 // connections made, for tests and logs
}

// generation is one established connection (and its jump hosts).
type generation struct {
	n      int64
	client *ssh.Client
	hops   []*ssh.Client
	dead   chan struct{}
	once   sync.Once
	err    error // why it ended; set before dead is closed
	// socketOK: a stream to the engine's socket opened on this connection.
	socketOK atomic.Bool
}

func (g *generation) isDead() bool {
	select {
	case <-g.dead:
		return true
	default:
		return false
	}
}

// end marks g dead with the reason and closes its connections. The first
// reason wins.
func (g *generation) end(err error) {
	g.once.Do(func() {
		g.err = err
		close(g.dead)
		if g.client != nil { // nil while the handshake runs
			g.client.Close()
		}
		for i := len(g.hops) - 1; i >= 0; i-- {
			g.hops[i].Close()
		}
	})
}

func newSSHConn(t *sshTarget, cfg Config, log *slog.Logger) *sshConn {
	return &sshConn{
		target:   t,
		socket:   cmp(cfg.RemoteSocket, DefaultRemoteSocket),
		identity: cfg.IdentityFile,
		known:    cfg.KnownHosts,
		insecure: cfg.InsecureIgnoreHostKey,
		log:      log,
		sem:      make(chan struct{}, 1),
	}
}

var errClosed = errors.New("the remotedocker backend is closed")

// get returns the live connection, connecting when there is none.
func (c *sshConn) get(ctx context.Context) (*generation, error) {
	if g, err := c.current(); g != nil || err != nil {
		return g, err
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.sem }()
	// Someone else may have connected while this call waited.
	if g, err := c.current(); g != nil || err != nil {
		return g, err
	}
	g, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		g.end(errClosed)
		return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, errClosed)
	}
	c.cur = g
	return g, nil
}

func (c *sshConn) current() (*generation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("%w: %w", backend.ErrUnavailable, errClosed)
	}
	if c.cur != nil && !c.cur.isDead() {
		return c.cur, nil
	}
	return nil, nil
}

// Close ends the connection; later dials fail.
func (c *sshConn) Close() error {
	c.mu.Lock()
	c.closed = true
	g := c.cur
	c.mu.Unlock()
	if g != nil {
		g.end(errClosed)
	}
	return nil
}

// connect dials the first hop over TCP, each further hop through the one
// before, and the target last, verifying every host key.
func (c *sshConn) connect(ctx context.Context) (*generation, error) {
	g := &generation{n: c.gens.Add(1), dead: make(chan struct{})}
	chain := append(append([]*sshTarget{}, c.target.jumps...), c.target)
	var prev *ssh.Client
	for i, t := range chain {
		cl, err := c.handshake(ctx, g, prev, t, i == len(chain)-1)
		if err != nil {
			for j := len(g.hops) - 1; j >= 0; j-- {
				g.hops[j].Close()
			}
			return nil, err
		}
		if i < len(chain)-1 {
			g.hops = append(g.hops, cl)
		} else {
			g.client = cl
		}
		prev = cl
	}
	// The connection is dead when its transport fails (see watchedConn) or
	// Wait returns for any other reason.
	go func() {
		err := g.client.Wait()
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		g.end(err)
	}()
	go c.keepalive(g)
	c.log.Debug("ssh connected", "target", c.target.String(), "generation", g.n)
	return g, nil
}

// handshake makes one SSH connection to t, over prev when t is a jumped host.
func (c *sshConn) handshake(ctx context.Context, g *generation, prev *ssh.Client, t *sshTarget, last bool) (*ssh.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, t.connectTimeout)
	defer cancel()
	var raw net.Conn
	var err error
	if prev == nil {
		raw, err = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext(ctx, "tcp", t.addr())
	} else {
		raw, err = prev.DialContext(ctx, "tcp", t.addr())
	}
	if err != nil {
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: connecting to sshd at %s for %s: no answer within %s (is the host up and reachable?)",
					backend.ErrUnavailable, t.addr(), c.target, t.connectTimeout)
			}
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: cannot reach sshd at %s for %s: %s (is the host up and sshd running? try: ssh -p %d %s@%s true)",
			backend.ErrUnavailable, t.addr(), c.target, describeDialErr(err), t.port, t.user, t.host)
	}
	hk, err := newHostKeys(c.known, t, c.insecure, c.log.Warn)
	if err != nil {
		raw.Close()
		return nil, err
	}
	au, err := newAuth(c.identity, t)
	if err != nil {
		raw.Close()
		return nil, err
	}
	defer au.closer()
	var keyErr error
	verify := hk.callback(t)
	cfg := &ssh.ClientConfig{
		User: t.user,
		Auth: au.methods(),
		HostKeyCallback: func(h string, r net.Addr, k ssh.PublicKey) error {
			keyErr = verify(h, r, k)
			return keyErr
		},
		HostKeyAlgorithms: hk.algorithms(t),
		ClientVersion:     "SSH-2.0-sandboxkit-remotedocker",
	}
	// Only the last hop's transport decides whether the Engine API's
	// streams died; a hop's failure reaches it as an error too.
	conn := raw
	if last {
		conn = &watchedConn{Conn: raw, g: g}
	}
	// Bound the handshake by the context (SetDeadline where the
	// connection has one, else by closing it).
	stop := context.AfterFunc(ctx, func() { raw.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(conn, t.addr(), cfg)
	stopped := stop()
	if err != nil {
		raw.Close()
		switch {
		case keyErr != nil:
			return nil, keyErr
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, fmt.Errorf("%w: %s", backend.ErrInvalidConfig, au.explain(t))
		case strings.Contains(err.Error(), "Too many authentication failures"):
			return nil, fmt.Errorf("%w: %s; sshd gave up after too many keys (offer fewer: IdentitiesOnly yes in ~/.ssh/config with the right IdentityFile, or identity_file)",
				backend.ErrInvalidConfig, au.explain(t))
		case !stopped && errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("%w: the SSH handshake with %s for %s did not finish within %s",
				backend.ErrUnavailable, t.addr(), c.target, t.connectTimeout)
		case !stopped:
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: SSH handshake with %s for %s: %s", backend.ErrUnavailable, t.addr(), c.target, describeDialErr(err))
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// keepalive asks the server for a reply every aliveInterval and ends the
// connection after aliveCountMax unanswered ones, so a silently dead link
// fails calls instead of hanging them.
func (c *sshConn) keepalive(g *generation) {
	t := c.target
	tick := time.NewTicker(t.aliveInterval)
	defer tick.Stop()
	missed := 0
	for {
		select {
		case <-g.dead:
			return
		case <-tick.C:
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := g.client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		select {
		case err := <-reply:
			if err != nil {
				g.end(fmt.Errorf("keepalive: %w", err))
				return
			}
			missed = 0
		case <-time.After(t.aliveInterval):
			missed++
			if missed >= t.aliveCountMax {
				g.end(fmt.Errorf("no answer to %d keepalives at %s intervals", missed, t.aliveInterval))
				return
			}
		case <-g.dead:
			return
		}
	}
}

// check connects when there is no connection and, once per connection,
// opens a stream to the engine's socket, so that a host without Docker is
// reported as that before any Engine API call.
func (c *sshConn) check(ctx context.Context) error {
	g, err := c.get(ctx)
	if err != nil {
		return err
	}
	if g.socketOK.Load() {
		return nil
	}
	conn, err := c.dial(ctx, "unix", c.socket)
	if err != nil {
		return err
	}
	conn.(*streamConn).g.socketOK.Store(true)
	return conn.Close()
}

// dialSocket opens a stream to the engine's socket on the remote: the
// dialer the Docker client uses. A connection found dead is replaced once.
func (c *sshConn) dialSocket(ctx context.Context, _, _ string) (net.Conn, error) {
	return c.dial(ctx, "unix", c.socket)
}

// dialPath opens a stream to the Unix socket at path on the remote host
// (a sandbox's agent; see native.WithAgentDialer).
func (c *sshConn) dialPath(ctx context.Context, path string) (net.Conn, error) {
	return c.dial(ctx, "unix", path)
}

// hostAddrs lists the remote host's addresses (native.WithHostAddrs),
// by running `ip -o addr show`, or `hostname -I` where there is no ip,
// on it.
func (c *sshConn) hostAddrs(ctx context.Context) ([]netip.Prefix, error) {
	g, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	sess, err := g.client.NewSession()
	if err != nil {
		return nil, fmt.Errorf("ssh session: %w", err)
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	out, err := sess.Output("ip -o addr show 2>/dev/null || hostname -I")
	if err != nil {
		return nil, fmt.Errorf("listing the host's addresses over ssh: %w", err)
	}
	addrs := native.ParseHostAddrs(string(out))
	if len(addrs) == 0 {
		return nil, errors.New("listing the host's addresses over ssh: neither `ip -o addr show` nor `hostname -I` named one")
	}
	return addrs, nil
}

// dialTCP opens a stream to addr as seen from the remote host (tunnels).
func (c *sshConn) dialTCP(ctx context.Context, addr string) (net.Conn, error) {
	return c.dial(ctx, "tcp", addr)
}

func (c *sshConn) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	for attempt := 0; ; attempt++ {
		g, err := c.get(ctx)
		if err != nil {
			return nil, err
		}
		ch, err := g.client.DialContext(ctx, network, addr)
		if err == nil {
			return &streamConn{Conn: ch, g: g, c: c}, nil
		}
		if oe, ok := errors.AsType[*ssh.OpenChannelError](err); ok {
			return nil, c.openError(network, addr, oe)
		}
		if ctx.Err() != nil {
			return nil, err
		}
		// The connection failed under us: forget it and connect again,
		// once.
		g.end(fmt.Errorf("opening a channel: %w", err))
		if attempt > 0 {
			return nil, c.dropped(g)
		}
	}
}

// openError explains why sshd refused to open a channel.
func (c *sshConn) openError(network, addr string, oe *ssh.OpenChannelError) error {
	t := c.target
	if network == "unix" {
		if oe.Reason == ssh.Prohibited {
			return fmt.Errorf("%w: sshd on %s refuses to forward Unix sockets (sshd_config: AllowStreamLocalForwarding no, or DisableForwarding yes), which remotedocker needs to reach the Docker socket %s: ask the server's admin to allow it for user %s (%s)",
				backend.ErrUnavailable, t.addr(), addr, t.user, oe.Error())
		}
		return fmt.Errorf("%w: sshd on %s could not open the Docker socket %s: it does not exist, or user %s may not use it (%s). Is Docker installed and running there (ssh -p %d %s@%s docker info), is %s in the docker group, or does the engine listen elsewhere (set remote_socket, e.g. /run/user/UID/docker.sock for rootless Docker)?",
			backend.ErrUnavailable, t.addr(), addr, t.user, oe.Error(), t.port, t.user, t.host, t.user)
	}
	if oe.Reason == ssh.Prohibited {
		return fmt.Errorf("%w: sshd on %s refuses TCP forwarding (sshd_config: AllowTcpForwarding), which ports = \"tunnel\" needs (%s); use ports = \"remote\"",
			backend.ErrUnavailable, t.addr(), oe.Error())
	}
	return fmt.Errorf("%w: the remote host %s could not connect to %s (%s)", backend.ErrUnavailable, t.addr(), addr, oe.Error())
}

// dropped is the error of a call whose stream was on connection g when it
// ended.
func (c *sshConn) dropped(g *generation) error {
	<-g.dead
	if errors.Is(g.err, errClosed) {
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, errClosed)
	}
	return &DroppedError{Target: c.target.String(), Cause: g.err}
}

// DroppedError reports that the SSH connection to the remote host ended
// while a call was using it. The call's effect on the remote is unknown (a
// command may still be running there); the next call connects again. It
// wraps backend.ErrUnavailable.
type DroppedError struct {
	Target string
	Cause  error
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("%v: the SSH connection to %s dropped during the call (%v); a command it started may still be running on the remote, and the next call reconnects",
		backend.ErrUnavailable, e.Target, e.Cause)
}

func (e *DroppedError) Unwrap() []error { return []error{backend.ErrUnavailable, e.Cause} }

// watchedConn is the SSH transport's connection. A read or write error
// marks the generation dead before the SSH library sees the error and ends
// its channels, so a stream ending at that moment can tell a dropped
// connection from a remote EOF.
type watchedConn struct {
	net.Conn
	g *generation
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil {
		w.g.end(transportErr(err))
	}
	return n, err
}

func (w *watchedConn) Write(p []byte) (int, error) {
	n, err := w.Conn.Write(p)
	if err != nil {
		w.g.end(transportErr(err))
	}
	return n, err
}

func transportErr(err error) error {
	if errors.Is(err, io.EOF) {
		return errors.New("the server closed the connection")
	}
	return err
}

// streamConn is one channel (an Engine API connection or a tunnelled TCP
// connection). When its connection died, EOF and write errors become a
// *DroppedError.
type streamConn struct {
	net.Conn
	g *generation
	c *sshConn
}

func (s *streamConn) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if err != nil && s.g.isDead() {
		return n, s.c.dropped(s.g)
	}
	return n, err
}

func (s *streamConn) Write(p []byte) (int, error) {
	n, err := s.Conn.Write(p)
	if err != nil && s.g.isDead() {
		return n, s.c.dropped(s.g)
	}
	return n, err
}

// CloseWrite sends EOF (the exec's stdin ends), as the Docker client
// expects of a hijacked connection.
func (s *streamConn) CloseWrite() error {
	if cw, ok := s.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// describeDialErr words a network error for a message. It avoids the
// phrases the Docker client rewrites into its own "Cannot connect to the
// Docker daemon at unix://..." message ("connection refused", "dial
// unix"), which would hide that the SSH hop failed.
func describeDialErr(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the host refused the TCP connection (nothing listens on that port)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the host"
	case errors.Is(err, syscall.ECONNRESET):
		return "the connection was reset"
	case errors.As(err, &dns):
		return "cannot resolve the host name: " + dns.Err
	}
	msg := err.Error()
	msg = strings.ReplaceAll(msg, "connection refused", "refused")
	msg = strings.ReplaceAll(msg, "dial unix", "unix")
	return msg
}
