package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxyZone: web.test and keep.test are the local servers' address;
// elsewhere.test is allowed but resolves elsewhere; denied.test would be
// the servers' address, but is never allowed.
func proxyZone(t testing.TB) *testUpstream {
	return startUpstream(t, zoneRecords(t,
		"web.test A 127.0.0.1",
		"keep.test A 127.0.0.1",
		"elsewhere.test A 127.0.0.2",
		"denied.test A 127.0.0.3",
	))
}

// webServers are an HTTP and an HTTPS server on 127.0.0.1 that greet by
// Host ("/") or stream until the client goes ("/stream").
type webServers struct {
	http, https *httptest.Server
	hits        atomic.Int64
}

func startWebServers(t testing.TB) *webServers {
	ws := &webServers{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws.hits.Add(1)
		if r.URL.Path != "/stream" {
			fmt.Fprintf(w, "hello %s", r.Host)
			return
		}
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, "tick\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	ws.http, ws.https = httptest.NewServer(h), httptest.NewTLSServer(h)
	t.Cleanup(ws.http.Close)
	t.Cleanup(ws.https.Close)
	return ws
}

func serverAddr(s *httptest.Server) string { return s.Listener.Addr().String() }

// clientVia is an HTTP client whose every connection goes to proxy.
func clientVia(proxy string) *http.Client {
	var d net.Dialer
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "tcp", proxy) },
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // the test certificate is not for *.test names
			DisableKeepAlives: true,
		},
	}
}

func get(c *http.Client, url string) (string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// resolve looks name up through the enforcer's DNS, as a sandbox does.
func (te *testEnforcer) resolve(t testing.TB, name string) []netip.Addr {
	t.Helper()
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		if strings.HasPrefix(network, "tcp") {
			return d.DialContext(ctx, network, te.dnsTCP)
		}
		return d.DialContext(ctx, network, te.dnsUDP)
	}}
	addrs, err := r.LookupNetIP(context.Background(), "ip4", name+".")
	require.NoError(t, err)
	return addrs
}

func TestProxyAllowedNameOverHTTPAndHTTPS(t *testing.T) {
	up, ws := proxyZone(t), startWebServers(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"web.test"}, nil), up.addr)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, te.resolve(t, "web.test"))

	body, err := get(clientVia(te.startProxy(t, serverAddr(ws.http))), "http://web.test/")
	require.NoError(t, err)
	require.Equal(t, "hello web.test", body)

	body, err = get(clientVia(te.startProxy(t, serverAddr(ws.https))), "https://WEB.test/")
	require.NoError(t, err)
	require.Equal(t, "hello WEB.test", body)

	te.denials.none(t)
	require.Equal(t, uint64(2), te.Stats().ConnsAllowed)
}

func TestProxyDeniedName(t *testing.T) {
	up, ws := proxyZone(t), startWebServers(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"web.test"}, nil), up.addr)
	for _, s := range []*httptest.Server{ws.http, ws.https} {
		scheme := strings.TrimSuffix(s.URL[:5], ":")
		_, err := get(clientVia(te.startProxy(t, serverAddr(s))), scheme+"://denied.test/")
		require.Error(t, err, "closed without a response")
		d := te.denials.next(t)
		require.Equal(t, Denial{Time: d.Time, Proto: "tcp", Dest: "127.0.0.1", Port: s.Listener.Addr().(*net.TCPAddr).AddrPort().Port(),
			Name: "denied.test", Reason: `name "denied.test" is not allowed`}, d)
	}
	require.Zero(t, ws.hits.Load())
	require.Equal(t, uint64(2), te.Stats().ConnsDenied)
}

// An allowed name is not enough: the destination must be an address the
// enforcer resolved for it.
func TestProxySpoofedNameRefused(t *testing.T) {
	up, ws := proxyZone(t), startWebServers(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"web.test", "elsewhere.test"}, nil), up.addr)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("127.0.0.2")}, te.resolve(t, "elsewhere.test"))
	for _, s := range []*httptest.Server{ws.https, ws.http} {
		scheme := strings.TrimSuffix(s.URL[:5], ":")
		_, err := get(clientVia(te.startProxy(t, serverAddr(s))), scheme+"://elsewhere.test/")
		require.Error(t, err)
		d := te.denials.next(t)
		require.Equal(t, "elsewhere.test", d.Name)
		require.Equal(t, `address 127.0.0.1 was not resolved for "elsewhere.test"`, d.Reason)
	}
	// web.test is allowed too, but was never resolved.
	_, err := get(clientVia(te.startProxy(t, serverAddr(ws.https))), "https://web.test/")
	require.Error(t, err)
	require.Equal(t, `address 127.0.0.1 was not resolved for "web.test"`, te.denials.next(t).Reason)
	require.Zero(t, ws.hits.Load())
}

// startBanner serves on 127.0.0.1 a protocol where the server speaks
// first; half-closing the client makes it echo what it read and close.
func startBanner(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "banner\n")
				b, _ := io.ReadAll(c)
				c.Write(b)
			}()
		}
	}()
	return l.Addr().String()
}

func TestProxyAddressRuleSplicesWithoutName(t *testing.T) {
	up := proxyZone(t)
	banner := startBanner(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"127.0.0.0/8:" + strings.Split(banner, ":")[1]}, nil), up.addr)
	c, err := net.Dial("tcp", te.startProxy(t, banner))
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// Nothing is sent first: a proxy waiting for a name would wait too.
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "banner\n", line)
	// Half-closing passes through: the server sees the end and answers.
	_, err = io.WriteString(c, "ping")
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	rest, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "ping", string(rest))
	te.denials.none(t)
}

func TestProxyNoNameRefused(t *testing.T) {
	up := proxyZone(t)
	banner := startBanner(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"web.test"}, nil), up.addr)
	for _, first := range []string{"\x00\x01binary", "SSH-2.0-x\r\n", "GET / HTTP/1.0\r\n\r\n"} {
		c, err := net.Dial("tcp", te.startProxy(t, banner))
		require.NoError(t, err)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, first)
		b, err := io.ReadAll(c)
		require.Error(t, err, "reset")
		require.Empty(t, b, "nothing of the server's came through")
		c.Close()
		d := te.denials.next(t)
		require.Empty(t, d.Name)
		// 127.0.0.1 was resolved for no allowed name: that is the reason.
		require.Contains(t, d.Reason, "no address rule allows it, and no name allowed on that port was resolved to it")
	}
}

func TestProxyDefaultAllow(t *testing.T) {
	up, ws := proxyZone(t), startWebServers(t)
	banner := startBanner(t)
	te := startEnforcer(t, mustPolicy(t, Allow, nil, []string{"denied.test"}), up.addr)
	c := clientVia(te.startProxy(t, serverAddr(ws.http)))

	// Not resolved through the enforcer, yet allowed: default allow does
	// not tie names to addresses.
	body, err := get(c, "http://web.test/")
	require.NoError(t, err)
	require.Equal(t, "hello web.test", body)

	_, err = get(c, "http://denied.test/")
	require.Error(t, err)
	require.Equal(t, `name "denied.test" is denied by rule "denied.test"`, te.denials.next(t).Reason)

	// TLS without SNI would get around the deny rule: refused.
	tc, err := tls.Dial("tcp", te.startProxy(t, serverAddr(ws.https)), &tls.Config{InsecureSkipVerify: true})
	if err == nil {
		tc.Close()
	}
	require.Error(t, err)
	require.Equal(t, "TLS ClientHello without SNI", te.denials.next(t).Reason)

	// Other protocols pass.
	raw, err := net.Dial("tcp", te.startProxy(t, banner))
	require.NoError(t, err)
	defer raw.Close()
	io.WriteString(raw, "\x00hi")
	raw.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(raw)
	require.NoError(t, err)
	require.Equal(t, "banner\n\x00hi", string(b))
	te.denials.none(t)
}

// stream opens a streaming response and returns its reader once the first
// tick came: the connection is then spliced.
func stream(t testing.TB, c *http.Client, url string) *bufio.Reader {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "tick\n", line)
	return r
}

// cutWithin reads r until it fails, which must happen within d.
func cutWithin(t testing.TB, r *bufio.Reader, d time.Duration) {
	t.Helper()
	failed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, r)
		failed <- err
	}()
	select {
	case <-failed:
	case <-time.After(d):
		t.Fatalf("the connection was not cut within %s", d)
	}
}

func TestSetPolicyCutsConnectionsNoLongerAllowed(t *testing.T) {
	up, ws := proxyZone(t), startWebServers(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"web.test", "keep.test"}, nil), up.addr)
	te.resolve(t, "web.test")
	te.resolve(t, "keep.test")
	c := clientVia(te.startProxy(t, serverAddr(ws.https)))
	cut := stream(t, c, "https://web.test/stream")
	kept := stream(t, c, "https://keep.test/stream")
	require.Equal(t, 2, te.Stats().ConnsOpen)

	start := time.Now()
	te.SetPolicy(mustPolicy(t, Deny, []string{"keep.test"}, nil))
	cutWithin(t, cut, time.Second)
	t.Logf("cut %s after SetPolicy", time.Since(start))
	d := te.denials.next(t)
	require.Equal(t, "web.test", d.Name)
	require.Equal(t, `policy changed: name "web.test" is not allowed`, d.Reason)

	// The connection the new policy allows goes on.
	for range 3 {
		line, err := kept.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "tick\n", line)
	}
	require.Equal(t, 1, te.Stats().ConnsOpen)

	// New connections follow the new policy at once.
	_, err := get(c, "https://web.test/")
	require.Error(t, err)
	te.denials.next(t)
}

func TestCloseCutsProxiedConnections(t *testing.T) {
	up, ws := proxyZone(t), startWebServers(t)
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"web.test"}, nil), up.addr)
	te.resolve(t, "web.test")
	r := stream(t, clientVia(te.startProxy(t, serverAddr(ws.http))), "http://web.test/stream")
	require.NoError(t, te.Close())
	cutWithin(t, r, time.Second)
	te.wg.Wait() // every Serve method returned ErrClosed
}

func TestProxyDestinationUnknown(t *testing.T) {
	te := startEnforcer(t, mustPolicy(t, Allow, nil, nil), "127.0.0.1:53")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	te.run(t, func() error {
		return te.ServeProxy(l, func(net.Conn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("no conntrack entry") })
	})
	// The reset may come before the connect returns, or after.
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		require.Error(t, err)
	}
	require.Equal(t, "original destination unknown: no conntrack entry", te.denials.next(t).Reason)
}

func TestProxyRefusesConnectionsToItself(t *testing.T) {
	te := startEnforcer(t, mustPolicy(t, Allow, nil, nil), "127.0.0.1:53")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// What OriginalDst gives for a connection that was not redirected.
	te.run(t, func() error {
		return te.ServeProxy(l, func(c net.Conn) (netip.AddrPort, error) { return netip.ParseAddrPort(c.LocalAddr().String()) })
	})
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		require.Error(t, err)
	}
	d := te.denials.next(t)
	require.Equal(t, "a connection to the proxy itself", d.Reason)
	require.Equal(t, l.Addr().String(), fmt.Sprintf("%s:%d", d.Dest, d.Port))
	require.Equal(t, uint64(1), te.Stats().ConnsDenied, "no connection of its own came back")
}
