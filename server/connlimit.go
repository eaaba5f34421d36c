package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// connLimiter is a net.Listener that holds at most max connections at
// once, and at most perClient of one client (0: no cap). Past a cap, a new
// connection takes the place of the one that has waited longest for a
// request (a connection still sending its first request's headers, or
// idle between requests), if that one has waited evictAfter: those cost
// the server a file descriptor and serve nobody. Otherwise, the new one is
// answered 503 (429 past a client's own cap) and closed.
//
// It learns whether a connection is waiting for a request from
// http.Server.ConnState: set that to track.
type connLimiter struct {
	net.Listener
	max, perClient int

	mu      sync.Mutex
	conns   map[*limitedConn]struct{}
	clients map[netip.Prefix]int

	// lingering bounds the refused connections being closed gently at
	// once; past it they are closed at once.
	lingering chan struct{}
}

// limitedConn is a connection the limiter holds.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	client netip.Prefix
	once   sync.Once
	// Guarded by l.mu.
	waiting bool      // for a request: its headers, or the next one
	since   time.Time // in the waiting state since
}

// evictAfter is how long a connection must have waited for a request
// before a new one may take its place: a client sends its request as soon
// as it connects, so one that has sent nothing for this long is slow or
// idle, while a younger one's request may be on its way.
//
// refusalLinger is how long a refused connection is kept to read what the
// client sends before it is closed, so that the client reads the answer
// instead of a reset; maxLingering bounds how many linger at once (and a
// quarter of max, so they take few file descriptors beyond it).
const (
	evictAfter    = time.Second
	refusalLinger = 500 * time.Millisecond
	maxLingering  = 512
)

func newConnLimiter(ln net.Listener, maxConns, perClient int) *connLimiter {
	return &connLimiter{
		Listener: ln, max: maxConns, perClient: perClient,
		conns: map[*limitedConn]struct{}{}, clients: map[netip.Prefix]int{},
		lingering: make(chan struct{}, lingerSlots(maxConns)),
	}
}

func lingerSlots(maxConns int) int {
	if maxConns <= 0 {
		return maxLingering
	}
	return min(maxLingering, max(maxConns/4, 16))
}

// clientOf is the client an address counts as: its IP, or an IPv6
// address's /64 (which one client is usually given whole).
func clientOf(addr net.Addr) netip.Prefix {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Prefix{} // not IP: one client
	}
	ip := ap.Addr().Unmap().WithZone("")
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

// admit returns c held, or nil after refusing it.
func (l *connLimiter) admit(c net.Conn) *limitedConn {
	client := clientOf(c.RemoteAddr())
	var evicted []*limitedConn
	refusal := 0
	l.mu.Lock()
	if l.perClient > 0 && l.clients[client] >= l.perClient {
		if v := l.longestWaitingLocked(client, true); v != nil {
			l.forgetLocked(v)
			evicted = append(evicted, v)
		} else {
			refusal = http.StatusTooManyRequests
		}
	}
	if refusal == 0 && l.max > 0 && len(l.conns) >= l.max {
		if v := l.longestWaitingLocked(client, false); v != nil {
			l.forgetLocked(v)
			evicted = append(evicted, v)
		} else {
			refusal = http.StatusServiceUnavailable
		}
	}
	var lc *limitedConn
	if refusal == 0 {
		lc = &limitedConn{Conn: c, l: l, client: client, waiting: true, since: time.Now()}
		l.conns[lc] = struct{}{}
		l.clients[client]++
	}
	l.mu.Unlock()
	for _, v := range evicted {
		v.Conn.Close()
	}
	if refusal != 0 {
		l.refuse(c, refusal)
	}
	return lc
}

// longestWaitingLocked returns the connection that has waited longest for
// a request, of client when own is set, or nil if none has waited
// evictAfter.
func (l *connLimiter) longestWaitingLocked(client netip.Prefix, own bool) *limitedConn {
	var oldest *limitedConn
	for c := range l.conns {
		if c.waiting && (!own || c.client == client) && (oldest == nil || c.since.Before(oldest.since)) {
			oldest = c
		}
	}
	if oldest == nil || time.Since(oldest.since) < evictAfter {
		return nil
	}
	return oldest
}

// forgetLocked stops counting c.
func (l *connLimiter) forgetLocked(c *limitedConn) {
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	if l.clients[c.client]--; l.clients[c.client] <= 0 {
		delete(l.clients, c.client)
	}
}

// track is the http.Server's ConnState hook.
func (l *connLimiter) track(c net.Conn, state http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lc.waiting = state == http.StateNew || state == http.StateIdle
	lc.since = time.Now()
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.forgetLocked(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// refuse answers c with status and closes it.
func (l *connLimiter) refuse(c net.Conn, status int) {
	msg := fmt.Sprintf("the server holds its maximum of %d connections, all in requests: retry shortly", l.max)
	if status == http.StatusTooManyRequests {
		msg = fmt.Sprintf("your address holds its maximum of %d connections to the server, all in requests: retry shortly, or send more requests over each", l.perClient)
	}
	body, _ := json.Marshal(map[string]string{"error": msg}) // as writeError writes it
	answer := fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nRetry-After: %d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), retryAfter, len(body), body)
	// A fresh connection's send buffer is empty: the write does not wait.
	c.SetWriteDeadline(time.Now().Add(refusalLinger))
	if _, err := io.WriteString(c, answer); err != nil {
		c.Close()
		return
	}
	// Closed with the client's request unread, the connection would be
	// reset, and a client still sending might lose the answer: end our
	// side, read what comes for a moment, then close. Past maxLingering,
	// read only what has come already.
	select {
	case l.lingering <- struct{}{}:
	default:
		drainArrived(c)
		c.Close()
		return
	}
	go func() {
		defer func() { <-l.lingering }()
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		c.SetReadDeadline(time.Now().Add(refusalLinger))
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
		c.Close()
	}()
}

// drainArrived reads and drops what c has received so far, without
// waiting for more.
func drainArrived(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var buf [4096]byte
	raw.Read(func(fd uintptr) bool {
		for range 16 { // at most 64 KiB
			if n, err := syscall.Read(int(fd), buf[:]); n <= 0 || err != nil {
				break
			}
		}
		return true // done, whatever came: never wait
	})
}
