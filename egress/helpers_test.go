package egress

import (
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// testUpstream is a DNS server on 127.0.0.1 (UDP and TCP on one port)
// answering from a fixed zone, counting the queries it gets per name.
type testUpstream struct {
	addr string
	zone []dnsmessage.Resource

	mu      sync.Mutex
	queries map[string]int // "udp name" / "tcp name", name lower case with a trailing dot
	silent  bool           // answer nothing (an upstream that does not answer)
}

// zoneRecords builds records from "name type value" lines (A, AAAA, CNAME).
func zoneRecords(t testing.TB, lines ...string) []dnsmessage.Resource {
	t.Helper()
	var rs []dnsmessage.Resource
	for _, l := range lines {
		f := strings.Fields(l)
		require.Len(t, f, 3, l)
		h := dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(f[0] + "."), Class: dnsmessage.ClassINET, TTL: 60}
		var body dnsmessage.ResourceBody
		switch f[1] {
		case "A":
			h.Type, body = dnsmessage.TypeA, &dnsmessage.AResource{A: netip.MustParseAddr(f[2]).As4()}
		case "AAAA":
			h.Type, body = dnsmessage.TypeAAAA, &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(f[2]).As16()}
		case "CNAME":
			h.Type, body = dnsmessage.TypeCNAME, &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName(f[2] + ".")}
		}
		rs = append(rs, dnsmessage.Resource{Header: h, Body: body})
	}
	return rs
}

func startUpstream(t testing.TB, zone []dnsmessage.Resource) *testUpstream {
	t.Helper()
	u := &testUpstream{zone: zone, queries: make(map[string]int)}
	pc, l := listenUDPAndTCP(t)
	u.addr = pc.LocalAddr().String()
	go u.serveUDP(pc)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go u.serveTCP(c)
		}
	}()
	return u
}

// listenUDPAndTCP listens on one port of 127.0.0.1 for both.
func listenUDPAndTCP(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		require.NoError(t, err)
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			continue
		}
		t.Cleanup(func() { pc.Close(); l.Close() })
		return pc, l
	}
	t.Fatal("no port of 127.0.0.1 free for both UDP and TCP")
	return nil, nil
}

func (u *testUpstream) count(network, name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.queries[network+" "+strings.ToLower(name)+"."]
}

func (u *testUpstream) serveUDP(pc net.PacketConn) {
	buf := make([]byte, 1<<16)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp := u.respond(buf[:n], "udp"); resp != nil {
			pc.WriteTo(resp, addr)
		}
	}
}

func (u *testUpstream) serveTCP(c net.Conn) {
	defer c.Close()
	for {
		msg, err := readTCPMessage(c)
		if err != nil {
			return
		}
		if resp := u.respond(msg, "tcp"); resp != nil {
			writeTCPMessage(c, resp)
		}
	}
}

// respond answers a query from the zone, following CNAMEs; over UDP an
// answer bigger than the query allows is sent truncated and empty.
func (u *testUpstream) respond(msg []byte, network string) []byte {
	var m dnsmessage.Message
	if m.Unpack(msg) != nil || len(m.Questions) != 1 {
		return nil
	}
	q := m.Questions[0]
	u.mu.Lock()
	u.queries[network+" "+strings.ToLower(q.Name.String())]++
	if u.silent {
		u.mu.Unlock()
		return nil
	}
	r := dnsmessage.Message{Header: dnsmessage.Header{ID: m.ID, Response: true, RecursionDesired: m.RecursionDesired, RecursionAvailable: true}, Questions: m.Questions}
	r.Answers, r.RCode = u.lookup(q)
	u.mu.Unlock()
	limit := 512
	for _, a := range m.Additionals {
		if a.Header.Type == dnsmessage.TypeOPT {
			limit = int(a.Header.Class)
			r.Additionals = append(r.Additionals, a)
		}
	}
	out, err := r.Pack()
	if err != nil {
		return nil
	}
	if network == "udp" && len(out) > limit {
		r.Answers, r.Truncated = nil, true
		out, _ = r.Pack()
	}
	return out
}

// setZone replaces the records the upstream answers from, and makes it
// answer (silent false) or not.
func (u *testUpstream) setZone(zone []dnsmessage.Resource, silent bool) {
	u.mu.Lock()
	u.zone, u.silent = zone, silent
	u.mu.Unlock()
}

// lookup answers q from the zone; u.mu is held.
func (u *testUpstream) lookup(q dnsmessage.Question) ([]dnsmessage.Resource, dnsmessage.RCode) {
	var ans []dnsmessage.Resource
	name, found := strings.ToLower(q.Name.String()), false
	for hops := 0; hops < 8; hops++ {
		next := ""
		for _, r := range u.zone {
			if strings.ToLower(r.Header.Name.String()) != name {
				continue
			}
			found = true
			if r.Header.Type == q.Type {
				ans = append(ans, r)
			} else if c, ok := r.Body.(*dnsmessage.CNAMEResource); ok {
				ans = append(ans, r)
				next = strings.ToLower(c.CNAME.String())
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	if !found {
		return nil, dnsmessage.RCodeNameError
	}
	return ans, dnsmessage.RCodeSuccess
}

func readTCPMessage(c net.Conn) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(n[:]))
	_, err := io.ReadFull(c, msg)
	return msg, err
}

func writeTCPMessage(c net.Conn, msg []byte) error {
	_, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(msg))), msg...))
	return err
}

// denials collects what an enforcer refuses.
type denials chan Denial

// next returns the next denial, failing the test if none comes soon.
func (d denials) next(t testing.TB) Denial {
	t.Helper()
	select {
	case x := <-d:
		return x
	case <-time.After(5 * time.Second):
		t.Fatal("no denial recorded")
		return Denial{}
	}
}

// none fails the test if a denial was recorded.
func (d denials) none(t testing.TB) {
	t.Helper()
	select {
	case x := <-d:
		t.Fatalf("unexpected denial %+v", x)
	default:
	}
}

// testEnforcer is an enforcer serving DNS (UDP and TCP) on 127.0.0.1.
type testEnforcer struct {
	*Enforcer
	dnsUDP, dnsTCP string
	denials        denials
	wg             sync.WaitGroup
}

func startEnforcer(t testing.TB, p *Policy, upstream string, tweak ...func(*Options)) *testEnforcer {
	t.Helper()
	te := &testEnforcer{denials: make(denials, 100)}
	o := Options{Policy: p, Upstream: upstream, OnDeny: func(d Denial) { te.denials <- d }}
	for _, f := range tweak {
		f(&o)
	}
	e, err := New(o)
	require.NoError(t, err)
	te.Enforcer = e
	pc, l := listenUDPAndTCP(t)
	te.dnsUDP, te.dnsTCP = pc.LocalAddr().String(), l.Addr().String()
	te.run(t, func() error { return e.ServeDNS(pc) })
	te.run(t, func() error { return e.ServeDNSTCP(l) })
	t.Cleanup(func() {
		e.Close()
		te.wg.Wait()
	})
	return te
}

// run runs a Serve method, which must end with ErrClosed at cleanup.
func (te *testEnforcer) run(t testing.TB, serve func() error) {
	te.wg.Add(1)
	go func() {
		defer te.wg.Done()
		if err := serve(); !errors.Is(err, ErrClosed) {
			t.Errorf("serve ended with %v, want ErrClosed", err)
		}
	}()
}

// startProxy serves the enforcer's proxy on 127.0.0.1; every connection
// to it counts as one to dst.
func (te *testEnforcer) startProxy(t testing.TB, dst string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ap := netip.MustParseAddrPort(dst)
	te.run(t, func() error {
		return te.ServeProxy(l, func(net.Conn) (netip.AddrPort, error) { return ap, nil })
	})
	return l.Addr().String()
}

// ask sends a query for name and type over network to addr and returns
// the parsed reply. edns > 0 adds an OPT record of that UDP size.
func ask(t testing.TB, network, addr, name string, typ dnsmessage.Type, edns int) dnsmessage.Message {
	t.Helper()
	id := uint16(rand.Uint32())
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	require.NoError(t, b.StartQuestions())
	require.NoError(t, b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: typ, Class: dnsmessage.ClassINET}))
	if edns > 0 {
		var rh dnsmessage.ResourceHeader
		require.NoError(t, rh.SetEDNS0(edns, dnsmessage.RCodeSuccess, false))
		require.NoError(t, b.StartAdditionals())
		require.NoError(t, b.OPTResource(rh, dnsmessage.OPTResource{}))
	}
	q, err := b.Finish()
	require.NoError(t, err)
	resp := exchangeRaw(t, network, addr, q)
	var m dnsmessage.Message
	require.NoError(t, m.Unpack(resp))
	require.Equal(t, id, m.ID, "the reply keeps the query's ID")
	require.True(t, m.Response)
	return m
}

// exchangeRaw sends msg over network to addr and returns the reply.
func exchangeRaw(t testing.TB, network, addr string, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial(network, addr)
	require.NoError(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if network == "tcp" {
		require.NoError(t, writeTCPMessage(c, msg))
		resp, err := readTCPMessage(c)
		require.NoError(t, err)
		return resp
	}
	_, err = c.Write(msg)
	require.NoError(t, err)
	buf := make([]byte, 1<<16)
	n, err := c.Read(buf)
	require.NoError(t, err)
	return buf[:n]
}

// answerAddrsOf returns the A and AAAA addresses of a reply.
func answerAddrsOf(m dnsmessage.Message) []netip.Addr {
	var out []netip.Addr
	for _, a := range m.Answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA))
		}
	}
	return out
}
