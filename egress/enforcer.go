package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by the Serve methods of a closed Enforcer.
var ErrClosed = errors.New("egress: enforcer closed")

// Denial is one refused query or connection.
type Denial struct {
	Time   time.Time
	Proto  string // "dns", "tcp", "udp"
	Dest   string // the address (IP) or, for dns, the name
	Port   uint16 // 0 for dns
	Name   string // the SNI, Host or DNS name involved, if any
	Reason string // short, for people: `name "x.test" is not allowed`
}

// DialFunc makes an outbound connection, as net.Dialer.DialContext does.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Options configure an Enforcer.
type Options struct {
	Policy *Policy // required
	// Upstream is the DNS server (host:port) allowed queries are
	// forwarded to, over UDP and again over TCP when the answer is
	// truncated. Required.
	Upstream string
	// UpstreamTimeout bounds each forwarded query; the client gets
	// SERVFAIL when it passes. 0: 5 s.
	UpstreamTimeout time.Duration
	// Dial makes the proxy's outbound connections; nil: a net.Dialer.
	// The DNS forwarding does not use it.
	Dial DialFunc
	// UpstreamDial makes the connections to Upstream; nil: a net.Dialer.
	UpstreamDial DialFunc
	// OnDeny is called for every refusal, synchronously from the
	// goroutine that refused: it must return quickly (hand slow work to
	// a goroutine of its own). May be nil.
	OnDeny func(Denial)
	// OnBrokered is called, as OnDeny is, for every request that carried
	// brokered credentials (SetCredentials). May be nil.
	OnBrokered func(Brokered)
	// OnDeniedAddrs, when set, is told the addresses the exact names of
	// the policy's deny rules resolve to (see DeniedAddrs) whenever they
	// change, so that the backend refuses them for other protocols too.
	// Calls never overlap; an error is logged.
	OnDeniedAddrs func(p *Policy, addrs []netip.Addr) error
	Logger        *slog.Logger // nil: discard
}

// Stats counts an enforcer's decisions since New.
type Stats struct {
	DNSForwarded, DNSRefused  uint64 // queries sent upstream / refused by the policy
	ConnsAllowed, ConnsDenied uint64 // proxied connections let through / refused, including those SetPolicy closed
	ConnsOpen                 int    // proxied connections open now
}

// Enforcer answers a sandbox's DNS and proxies its TCP connections,
// following a Policy that can be swapped while it runs. See the package
// documentation for the model.
type Enforcer struct {
	upstream        string
	upstreamDial    DialFunc
	upstreamTimeout time.Duration
	onDeny          func(Denial)
	onBrokered      func(Brokered)
	log             *slog.Logger
	dial            atomic.Pointer[DialFunc]
	broker          atomic.Pointer[Broker] // nil: no brokered credentials
	policy          atomic.Pointer[Policy]
	resolved        *resolvedAddrs
	denied          atomic.Pointer[deniedAddrs] // what the policy's deny names resolve to
	onDeniedAddrs   func(*Policy, []netip.Addr) error
	hookMu          sync.Mutex         // serialises onDeniedAddrs calls
	setMu           sync.Mutex         // serialises SetPolicy; guards stopDenied
	stopDenied      context.CancelFunc // ends the policy in force's refreshDenied
	ctx             context.Context    // cancelled by Close
	cancel          context.CancelFunc

	mu      sync.Mutex // guards what follows; SetPolicy holds it while it swaps and re-checks
	closed  bool
	closers map[io.Closer]struct{} // listeners, packet conns and DNS TCP conns being served
	conns   map[*proxyConn]struct{}

	dnsForwarded, dnsRefused, connsAllowed, connsDenied atomic.Uint64
}

// New returns an Enforcer; it serves once its Serve methods are called.
func New(o Options) (*Enforcer, error) {
	if o.Policy == nil {
		return nil, errors.New("egress: Options.Policy is nil (NewPolicy makes one; a deny-all policy is NewPolicy(\"deny\", nil, nil))")
	}
	if _, _, err := net.SplitHostPort(o.Upstream); err != nil {
		return nil, fmt.Errorf("egress: Options.Upstream %q: want the DNS server as host:port (%v)", o.Upstream, err)
	}
	e := &Enforcer{
		upstream:        o.Upstream,
		upstreamTimeout: o.UpstreamTimeout,
		onDeny:          o.OnDeny,
		onBrokered:      o.OnBrokered,
		onDeniedAddrs:   o.OnDeniedAddrs,
		log:             o.Logger,
		resolved:        newResolvedAddrs(),
		closers:         make(map[io.Closer]struct{}),
		conns:           make(map[*proxyConn]struct{}),
	}
	if e.upstreamDial = o.UpstreamDial; e.upstreamDial == nil {
		var d net.Dialer
		e.upstreamDial = d.DialContext
	}
	if e.upstreamTimeout <= 0 {
		e.upstreamTimeout = 5 * time.Second
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.SetDial(o.Dial)
	e.SetPolicy(o.Policy)
	return e, nil
}

// SetDial replaces the proxy's outbound dial (nil: a net.Dialer), for a
// dial that needs the Enforcer, such as one consulting its Policy.
func (e *Enforcer) SetDial(dial DialFunc) {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	e.dial.Store(&dial)
}

// SetCredentials makes the enforcer broker creds (see broker.go) with
// certificates of ca: a TLS connection the policy lets through to a host
// a credential goes to is ended and its requests forwarded with it; the
// enforcer's dial reaches the real servers. nil creds: none (connections
// are spliced as before). Connections already open keep their way.
func (e *Enforcer) SetCredentials(ca *CA, creds []*Credential, rootCAs *x509.CertPool) error {
	if len(creds) == 0 {
		if old := e.broker.Swap(nil); old != nil {
			old.Close()
		}
		return nil
	}
	b, err := NewBroker(ca, creds, BrokerOptions{
		RootCAs: rootCAs,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (*e.dial.Load())(ctx, network, addr)
		},
		Deny:     e.deny,
		Brokered: e.brokered,
	})
	if err != nil {
		return err
	}
	if old := e.broker.Swap(b); old != nil {
		old.Close()
	}
	return nil
}

// Policy returns the policy in force.
func (e *Enforcer) Policy() *Policy { return e.policy.Load() }

// SetPolicy puts p in force (nil: deny everything). New queries and
// connections follow it at once; proxied connections it no longer allows
// are closed before SetPolicy returns, and recorded as denials. The
// exact names of p's deny rules are resolved first (waiting a second at
// most; see DeniedAddrs), and again while p is in force.
func (e *Enforcer) SetPolicy(p *Policy) {
	if p == nil {
		p = &Policy{Default: Deny}
	}
	e.setMu.Lock()
	defer e.setMu.Unlock()
	if e.stopDenied != nil {
		e.stopDenied()
		e.stopDenied = nil
	}
	names := deniedNames(p)
	d, seen, ttl := e.resolveFirst(p, names)
	e.mu.Lock()
	e.policy.Store(p)
	e.denied.Store(d)
	cut, reasons := e.recheck(p)
	closed := e.closed
	e.mu.Unlock()
	e.cut(cut, reasons)
	if len(names) > 0 && !closed {
		ctx, cancel := context.WithCancel(e.ctx)
		e.stopDenied = cancel
		go e.refreshDenied(ctx, p, names, seen, ttl)
	}
	e.notifyDenied(p, d.sorted())
}

// recheck returns the proxied connections p refuses, with the reasons;
// e.mu is held.
func (e *Enforcer) recheck(p *Policy) (cut []*proxyConn, reasons []string) {
	for pc := range e.conns {
		if pc.upstream == nil {
			continue // not through its own check yet, which will see p
		}
		if ok, reason := e.decide(p, pc, false); !ok {
			cut, reasons = append(cut, pc), append(reasons, reason)
		}
	}
	return cut, reasons
}

// cut closes the connections recheck returned and records them.
func (e *Enforcer) cut(cut []*proxyConn, reasons []string) {
	for _, pc := range cut {
		pc.abort()
	}
	for i, pc := range cut {
		e.deny(pc.denial("policy changed: " + reasons[i]))
	}
}

// Stats returns the enforcer's counts.
func (e *Enforcer) Stats() Stats {
	e.mu.Lock()
	open := 0
	for pc := range e.conns {
		if pc.upstream != nil {
			open++
		}
	}
	e.mu.Unlock()
	return Stats{
		DNSForwarded: e.dnsForwarded.Load(), DNSRefused: e.dnsRefused.Load(),
		ConnsAllowed: e.connsAllowed.Load(), ConnsDenied: e.connsDenied.Load(),
		ConnsOpen: open,
	}
}

// Close stops the enforcer: the listeners and packet conns given to its
// Serve methods are closed, and so is every proxied connection.
func (e *Enforcer) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	closers, conns := e.closers, e.conns
	e.closers, e.conns = nil, nil
	e.mu.Unlock()
	e.cancel()
	for c := range closers {
		c.Close()
	}
	for pc := range conns {
		pc.abort()
	}
	if b := e.broker.Swap(nil); b != nil {
		b.Close()
	}
	return nil
}

// track adds c to what Close closes; false if the enforcer is closed.
func (e *Enforcer) track(c io.Closer) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.closers[c] = struct{}{}
	return true
}

func (e *Enforcer) untrack(c io.Closer) {
	e.mu.Lock()
	delete(e.closers, c)
	e.mu.Unlock()
}

func (e *Enforcer) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

// deny records a refusal.
func (e *Enforcer) deny(d Denial) {
	d.Time = time.Now()
	if d.Proto == "dns" {
		e.dnsRefused.Add(1)
	} else {
		e.connsDenied.Add(1)
	}
	e.log.Info("egress denied", "proto", d.Proto, "dest", d.Dest, "port", d.Port, "name", d.Name, "reason", d.Reason)
	if e.onDeny != nil {
		e.onDeny(d)
	}
}

func (e *Enforcer) brokered(r Brokered) {
	e.log.Info("egress credential applied", "name", r.Name, "method", r.Method, "path", r.Path, "status", r.Status, "credentials", r.Credentials)
	if e.onBrokered != nil {
		e.onBrokered(r)
	}
}

// serve accepts connections on l and hands each to handle in a goroutine
// of its own, until l or the enforcer is closed.
func (e *Enforcer) serve(l net.Listener, handle func(net.Conn)) error {
	if !e.track(l) {
		return ErrClosed
	}
	defer e.untrack(l)
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if e.isClosed() {
				return ErrClosed
			}
			// Running out of descriptors passes; wait, as net/http does.
			if te, ok := err.(interface{ Temporary() bool }); ok && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				e.log.Warn("egress: accept", "err", err, "retry in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		go handle(c)
	}
}
