package egress

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// startHelloOn serves HTTP on addr ("127.0.0.3:0"), greeting by Host
// ("/") or streaming ticks until the client goes ("/stream").
func startHelloOn(t testing.TB, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			fmt.Fprintf(w, "hello %s", r.Host)
			return
		}
		for {
			if _, err := fmt.Fprint(w, "tick\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})}
	go s.Serve(l)
	t.Cleanup(func() { s.Close() })
	return l.Addr().String()
}

// A deny name rule under a default allow holds by address too: the
// denied host's address is refused whatever name the connection shows,
// and the backend's hook is told the address for other protocols.
func TestProxyDeniedNameByAddress(t *testing.T) {
	up := proxyZone(t) // denied.test A 127.0.0.3
	denied := startHelloOn(t, "127.0.0.3:0")
	var mu sync.Mutex
	var hooked []netip.Addr
	te := startEnforcer(t, mustPolicy(t, Allow, nil, []string{"denied.test"}), up.addr, func(o *Options) {
		o.OnDeniedAddrs = func(_ *Policy, addrs []netip.Addr) error {
			mu.Lock()
			hooked = addrs
			mu.Unlock()
			return nil
		}
	})
	want := []netip.Addr{netip.MustParseAddr("127.0.0.3")}
	require.Equal(t, want, te.DeniedAddrs())
	mu.Lock()
	require.Equal(t, want, hooked, "the backend's hook was not told the denied name's address")
	mu.Unlock()

	// Another Host, no name at all, a raw protocol: all refused.
	c := clientVia(te.startProxy(t, denied))
	for _, host := range []string{"web.test", "127.0.0.3"} {
		req, _ := http.NewRequest("GET", "http://"+denied+"/", nil)
		req.Host = host
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		require.Error(t, err, "Host %s reached the denied host's address", host)
		d := te.denials.next(t)
		require.Equal(t, "127.0.0.3", d.Dest)
		require.Contains(t, d.Reason, `resolved for "denied.test", denied by rule "denied.test"`)
	}

	// A policy without the rule lets the address through again.
	te.SetPolicy(mustPolicy(t, Allow, nil, nil))
	require.Empty(t, te.DeniedAddrs())
	body, err := get(clientVia(te.startProxy(t, denied)), "http://web.test/")
	require.NoError(t, err)
	require.Equal(t, "hello web.test", body)
}

// A connection that no rule could let through is refused at once, even
// when the client waits for the server to speak first (it used to wait
// for the peek's 10 s), and is recorded.
func TestProxyRefusesAtOnce(t *testing.T) {
	up := proxyZone(t)
	banner := startBanner(t) // 127.0.0.1, resolved for no allowed name
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"elsewhere.test"}, nil), up.addr)
	c, err := net.Dial("tcp", te.startProxy(t, banner))
	require.NoError(t, err)
	defer c.Close()
	// Well under peekTimeout: a proxy waiting for a name would still be
	// waiting when this passes.
	c.SetReadDeadline(time.Now().Add(peekTimeout / 2))
	_, err = bufio.NewReader(c).ReadString('\n')
	require.Error(t, err)
	require.False(t, strings.Contains(err.Error(), "i/o timeout"), "the refusal waited for the first bytes: %v", err)
	d := te.denials.next(t)
	require.Contains(t, d.Reason, "no name allowed on that port was resolved to it")

	// A client that speaks first still has its name recorded.
	c2 := clientVia(te.startProxy(t, banner))
	_, err = get(c2, "http://web.test/")
	require.Error(t, err)
	d = te.denials.next(t)
	require.Equal(t, "web.test", d.Name)
	require.Equal(t, `name "web.test" is not allowed`, d.Reason)
}

// A denied name is resolved again while its policy lives: when the
// upstream does not answer at first (the enforcer waits a second, then
// goes on), the address it answers later is refused too, the hook is told,
// and an open connection to it is cut.
func TestDeniedNameResolvedLater(t *testing.T) {
	up := startUpstream(t, nil)
	up.setZone(zoneRecords(t, "denied.test A 127.0.0.4"), true)
	moved := startHelloOn(t, "127.0.0.4:0")
	hooked := make(chan []netip.Addr, 10)
	te := startEnforcer(t, mustPolicy(t, Allow, nil, []string{"denied.test"}), up.addr, func(o *Options) {
		o.UpstreamTimeout = 200 * time.Millisecond
		o.OnDeniedAddrs = func(_ *Policy, addrs []netip.Addr) error { hooked <- addrs; return nil }
	})
	require.Empty(t, <-hooked, "nothing resolved yet")
	require.Empty(t, te.DeniedAddrs())
	// Not known yet: a stream to the address opens.
	r := stream(t, clientVia(te.startProxy(t, moved)), "http://web.test/stream")
	up.setZone(zoneRecords(t, "denied.test A 127.0.0.4"), false)
	want := []netip.Addr{netip.MustParseAddr("127.0.0.4")}
	select {
	case got := <-hooked:
		require.Equal(t, want, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the denied name was not resolved again")
	}
	require.Equal(t, want, te.DeniedAddrs())
	cutWithin(t, r, 5*time.Second)
	_, err := get(clientVia(te.startProxy(t, moved)), "http://web.test/")
	require.Error(t, err, "the denied name's address is still reachable")
}
