package egress

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// dialTimeout bounds the proxy's outbound connects.
const dialTimeout = 10 * time.Second

// proxyConn is one redirected connection. Its fields are set by its
// handler before upstream is published under Enforcer.mu; SetPolicy reads
// them only once upstream is set.
type proxyConn struct {
	client   net.Conn
	dst      netip.AddrPort // the original destination, unmapped
	upstream net.Conn       // set once admitted and connected
	sniffed  bool           // whether the first bytes were read for a name
	verified bool           // whether dst was found resolved for the name
	peeked
}

func (pc *proxyConn) denial(reason string) Denial {
	return Denial{Proto: "tcp", Dest: pc.dst.Addr().String(), Port: pc.dst.Port(), Name: pc.name, Reason: reason}
}

// abort closes both sides with a reset, so that neither end takes the
// cut for a clean end of data.
func (pc *proxyConn) abort() {
	resetClose(pc.client)
	if pc.upstream != nil {
		resetClose(pc.upstream)
	}
}

func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// ServeProxy serves the TCP connections redirected to l (by nftables or
// iptables REDIRECT/DNAT) until l or the enforcer is closed. dst returns
// each connection's original destination: OriginalDst for such redirects.
// Each connection is let through, spliced to its destination, or closed
// with a reset and recorded (see the package documentation).
func (e *Enforcer) ServeProxy(l net.Listener, dst func(net.Conn) (netip.AddrPort, error)) error {
	return e.serve(l, func(c net.Conn) { e.proxy(c, dst) })
}

func (e *Enforcer) proxy(c net.Conn, dst func(net.Conn) (netip.AddrPort, error)) {
	ap, err := dst(c)
	if err != nil {
		e.deny(Denial{Proto: "tcp", Reason: "original destination unknown: " + err.Error()})
		resetClose(c)
		return
	}
	pc := &proxyConn{client: c, dst: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
	if local, err := netip.ParseAddrPort(c.LocalAddr().String()); err == nil &&
		netip.AddrPortFrom(local.Addr().Unmap(), local.Port()) == pc.dst {
		// Not redirected but made to the proxy itself: following it would
		// make the proxy connect to itself, again and again.
		e.deny(pc.denial("a connection to the proxy itself"))
		resetClose(c)
		return
	}
	if !e.addConn(pc) {
		resetClose(c)
		return
	}
	defer e.removeConn(pc)
	// The first bytes are waited for long only when the name could let
	// the connection through: a client that waits for the server to
	// speak first is otherwise refused at once, not after peekTimeout.
	br := e.broker.Load()
	if p := e.Policy(); p.needsName(pc.dst.Addr(), pc.dst.Port()) || (br != nil && br.wantsPort(pc.dst.Port())) {
		timeout := peekTimeout
		if ok, _ := e.precheck(p, pc); !ok {
			timeout = recordPeekTimeout
		}
		pc.sniffed, pc.peeked = true, peekName(c, timeout)
	}
	if !e.admit(pc) {
		return
	}
	if bs, ok := pc.upstream.(*brokerSide); ok {
		// The broker serves the sandbox's connection itself (no copy
		// between it and a splice); a re-check's or Close's abort resets
		// it as any other.
		bs.br.ServeConn(pc.client, pc.head, pc.name, pc.dst)
		return
	}
	if len(pc.head) > 0 {
		if _, err := pc.upstream.Write(pc.head); err != nil {
			pc.abort()
			return
		}
	}
	splice(pc.client, pc.upstream)
}

// admit decides pc under the policy in force and connects it; false if it
// was refused (and recorded) or could not connect. A policy swapped in
// while it decided or connected makes it decide again, so that no
// connection escapes SetPolicy's re-check.
func (e *Enforcer) admit(pc *proxyConn) bool {
	var up net.Conn
	for {
		p := e.Policy()
		if ok, reason := e.decide(p, pc, true); !ok {
			// Recorded first, so that the record exists once the client
			// sees the reset.
			e.deny(pc.denial(reason))
			if up != nil {
				up.Close()
			}
			resetClose(pc.client)
			return false
		}
		if up == nil {
			var err error
			if up, err = e.connect(pc); err != nil {
				e.log.Info("egress: connecting an allowed connection", "dest", pc.dst, "name", pc.name, "err", err)
				resetClose(pc.client)
				return false
			}
		}
		e.mu.Lock()
		closed, current := e.closed, e.policy.Load() == p
		if !closed && current {
			pc.upstream = up
		}
		e.mu.Unlock()
		switch {
		case closed:
			up.Close()
			resetClose(pc.client)
			return false
		case current:
			e.connsAllowed.Add(1)
			return true
		}
	}
}

func (e *Enforcer) connect(pc *proxyConn) (net.Conn, error) {
	if br := e.broker.Load(); br != nil && pc.name != "" && isTLSRecord(pc.head) && br.Wants(pc.name, pc.dst.Port()) {
		// A host a credential goes to: the broker serves the connection
		// (proxy) and reaches the real server itself. Everything else (the
		// policy's re-checks, Close) holds as for a spliced connection.
		return &brokerSide{br: br}, nil
	}
	ctx, cancel := context.WithTimeout(e.ctx, dialTimeout)
	defer cancel()
	return (*e.dial.Load())(ctx, "tcp", pc.dst.String())
}

// decide tells whether p lets pc through, and if not why. fresh: pc is
// its handler's still (not published), so decide may note on it that its
// address was found resolved for its name; a re-check then does not
// refuse it because that resolution expired since.
func (e *Enforcer) decide(p *Policy, pc *proxyConn, fresh bool) (bool, string) {
	ip, port := pc.dst.Addr(), pc.dst.Port()
	if r, ok := e.deniedFor(p).match(ip, port); ok {
		return false, fmt.Sprintf("address %s port %d was resolved for %q, denied by rule %q", ip, port, r.Domain, r.Text)
	}
	switch v, reason := p.byAddr(ip, port); v {
	case addrDenied:
		return false, reason
	case addrAllowed:
		return true, ""
	}
	switch {
	case !pc.sniffed:
		return false, "the policy needs the connection's name, which was not read when it opened"
	case pc.name == "":
		if p.defaultAllows() && !pc.web {
			return true, ""
		}
		if ok, reason := e.precheck(p, pc); !ok {
			return false, reason
		}
		return false, pc.why
	}
	if ok, reason := p.nameVerdict(pc.name, port); !ok {
		return false, reason
	}
	if p.defaultAllows() || pc.verified {
		return true, ""
	}
	if !e.resolved.has(pc.name, ip) {
		return false, fmt.Sprintf("address %s was not resolved for %q", ip, pc.name)
	}
	if fresh {
		pc.verified = true
	}
	return true, ""
}

// precheck decides what it can of a connection that needs a name before
// its name is read: under a default deny, only an address that the
// enforcer's DNS resolved for a name allowed on the port can be let
// through (decide checks it is the connection's name once it is read).
func (e *Enforcer) precheck(p *Policy, pc *proxyConn) (bool, string) {
	if r, ok := e.deniedFor(p).match(pc.dst.Addr(), pc.dst.Port()); ok {
		return false, fmt.Sprintf("address %s was resolved for %q, denied by rule %q", pc.dst.Addr(), r.Domain, r.Text)
	}
	if p.defaultAllows() || pc.verified {
		return true, ""
	}
	port := pc.dst.Port()
	if e.resolved.anyName(pc.dst.Addr(), func(name string) bool { ok, _ := p.nameVerdict(name, port); return ok }) {
		return true, ""
	}
	return false, fmt.Sprintf("address %s port %d: no address rule allows it, and no name allowed on that port was resolved to it", pc.dst.Addr(), port)
}

func (e *Enforcer) addConn(pc *proxyConn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.conns[pc] = struct{}{}
	return true
}

func (e *Enforcer) removeConn(pc *proxyConn) {
	e.mu.Lock()
	delete(e.conns, pc)
	e.mu.Unlock()
}

// splice copies between a and b both ways until both directions end. An
// end of data is passed on as a half-close; an error cuts both.
func splice(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		pipe(b, a)
		close(done)
	}()
	pipe(a, b)
	<-done
	a.Close()
	b.Close()
}

// pipe copies src to dst: io.Copy between two *net.TCPConn moves the
// bytes with splice(2) on Linux, without copying them through the proxy.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	resetClose(dst)
	resetClose(src)
}

// brokerSide is the upstream of a connection the broker serves: the
// broker's own connections to the real server are its, so this side holds
// nothing to read, write or close.
type brokerSide struct{ br *Broker }

func (*brokerSide) Read([]byte) (int, error)         { return 0, io.EOF }
func (*brokerSide) Write(p []byte) (int, error)      { return len(p), nil }
func (*brokerSide) Close() error                     { return nil }
func (*brokerSide) LocalAddr() net.Addr              { return nil }
func (*brokerSide) RemoteAddr() net.Addr             { return nil }
func (*brokerSide) SetDeadline(time.Time) error      { return nil }
func (*brokerSide) SetReadDeadline(time.Time) error  { return nil }
func (*brokerSide) SetWriteDeadline(time.Time) error { return nil }
