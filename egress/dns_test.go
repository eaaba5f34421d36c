package egress

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

func testZone(t testing.TB) []dnsmessage.Resource {
	lines := []string{
		"allowed.test A 192.0.2.10",
		"allowed.test AAAA 2001:db8::10",
		"www.allowed.test CNAME edge.cdn.test",
		"edge.cdn.test CNAME edge2.cdn.test",
		"edge2.cdn.test A 192.0.2.20",
		"denied.test A 192.0.2.66",
		"other.test A 192.0.2.30",
	}
	for i := range 40 {
		lines = append(lines, fmt.Sprintf("big.test A 198.51.100.%d", i+1))
	}
	return zoneRecords(t, lines...)
}

func TestDNSAllowedNameIsForwarded(t *testing.T) {
	up := startUpstream(t, testZone(t))
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"allowed.test", "www.allowed.test:443"}, nil), up.addr)

	m := ask(t, "udp", te.dnsUDP, "AlLoWeD.test", dnsmessage.TypeA, 0)
	require.Equal(t, dnsmessage.RCodeSuccess, m.RCode)
	require.Equal(t, "AlLoWeD.test.", m.Questions[0].Name.String(), "the question comes back as asked")
	require.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.10")}, answerAddrsOf(m))
	require.Equal(t, 1, up.count("udp", "allowed.test"))

	m = ask(t, "udp", te.dnsUDP, "allowed.test", dnsmessage.TypeAAAA, 1232)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("2001:db8::10")}, answerAddrsOf(m))

	require.True(t, te.resolved.has("allowed.test", netip.MustParseAddr("192.0.2.10")))
	require.True(t, te.resolved.has("allowed.test", netip.MustParseAddr("2001:db8::10")))
	require.False(t, te.resolved.has("allowed.test", netip.MustParseAddr("192.0.2.30")))

	// A CNAME chain's addresses count for the name asked, not for the
	// names on the way, which the policy did not allow.
	m = ask(t, "udp", te.dnsUDP, "www.allowed.test", dnsmessage.TypeA, 0)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("192.0.2.20")}, answerAddrsOf(m))
	require.Len(t, m.Answers, 3)
	require.True(t, te.resolved.has("www.allowed.test", netip.MustParseAddr("192.0.2.20")))
	require.False(t, te.resolved.has("edge2.cdn.test", netip.MustParseAddr("192.0.2.20")))

	// Other types of allowed names are forwarded too.
	m = ask(t, "udp", te.dnsUDP, "allowed.test", dnsmessage.TypeTXT, 0)
	require.Equal(t, dnsmessage.RCodeSuccess, m.RCode)
	require.Equal(t, uint64(4), te.Stats().DNSForwarded)
	te.denials.none(t)
}

func TestDNSDeniedNameNeverReachesUpstream(t *testing.T) {
	up := startUpstream(t, testZone(t))
	for _, p := range []*Policy{
		mustPolicy(t, Deny, []string{"allowed.test"}, nil),
		mustPolicy(t, Allow, nil, []string{"denied.test"}),
	} {
		t.Run(p.Default, func(t *testing.T) {
			te := startEnforcer(t, p, up.addr)
			// The enforcer asks for the names of deny rules itself (their
			// addresses are refused too); what the sandbox asks must add
			// nothing to that.
			before := up.count("udp", "denied.test") + up.count("tcp", "denied.test")
			for _, network := range []string{"udp", "tcp"} {
				addr := te.dnsUDP
				if network == "tcp" {
					addr = te.dnsTCP
				}
				m := ask(t, network, addr, "Denied.Test", dnsmessage.TypeA, 0)
				require.Equal(t, dnsmessage.RCodeRefused, m.RCode)
				require.Empty(t, m.Answers)
				require.Equal(t, "Denied.Test.", m.Questions[0].Name.String())
				d := te.denials.next(t)
				require.Equal(t, "dns", d.Proto)
				require.Equal(t, "denied.test", d.Dest)
				require.Equal(t, "denied.test", d.Name)
				require.Equal(t, `name "denied.test" is not allowed`, d.Reason)
				require.WithinDuration(t, time.Now(), d.Time, time.Minute)
			}
			// The upstream answers an allowed name, so it would have
			// counted the denied one had it been sent.
			require.Equal(t, dnsmessage.RCodeSuccess, ask(t, "udp", te.dnsUDP, "allowed.test", dnsmessage.TypeA, 0).RCode)
			require.Positive(t, up.count("udp", "allowed.test"))
			require.Equal(t, before, up.count("udp", "denied.test")+up.count("tcp", "denied.test"))
			require.Equal(t, uint64(2), te.Stats().DNSRefused)
		})
	}
}

func TestDNSOverTCP(t *testing.T) {
	up := startUpstream(t, testZone(t))
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"allowed.test"}, nil), up.addr)
	c, err := net.Dial("tcp", te.dnsTCP)
	require.NoError(t, err)
	defer c.Close()
	// Two queries on one connection.
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(typ), RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("allowed.test."), Type: typ, Class: dnsmessage.ClassINET})
		q, err := b.Finish()
		require.NoError(t, err)
		require.NoError(t, writeTCPMessage(c, q))
		resp, err := readTCPMessage(c)
		require.NoError(t, err)
		var m dnsmessage.Message
		require.NoError(t, m.Unpack(resp))
		require.Equal(t, uint16(typ), m.ID)
		require.Len(t, answerAddrsOf(m), 1)
	}
}

func TestDNSTruncatedAnswerRetriedOverTCP(t *testing.T) {
	up := startUpstream(t, testZone(t))
	te := startEnforcer(t, mustPolicy(t, Deny, []string{"big.test"}, nil), up.addr)

	// 40 records do not fit 512 bytes: the upstream truncates over UDP,
	// the enforcer asks again over TCP, and remembers all of them, but
	// the client over UDP gets a truncated reply of its own.
	m := ask(t, "udp", te.dnsUDP, "big.test", dnsmessage.TypeA, 0)
	require.True(t, m.Truncated)
	require.Empty(t, m.Answers)
	require.Equal(t, dnsmessage.RCodeSuccess, m.RCode)
	require.Equal(t, 1, up.count("tcp", "big.test"))
	require.True(t, te.resolved.has("big.test", netip.MustParseAddr("198.51.100.40")))

	m = ask(t, "tcp", te.dnsTCP, "big.test", dnsmessage.TypeA, 0)
	require.False(t, m.Truncated)
	require.Len(t, answerAddrsOf(m), 40)

	m = ask(t, "udp", te.dnsUDP, "big.test", dnsmessage.TypeA, 4096)
	require.False(t, m.Truncated)
	require.Len(t, answerAddrsOf(m), 40)
	require.Equal(t, 2, up.count("tcp", "big.test"), "an EDNS query that fits needs no TCP")
}

func TestDNSUpstreamTimeoutIsServfail(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	te := startEnforcer(t, mustPolicy(t, Allow, nil, nil), silent.LocalAddr().String(), func(o *Options) {
		o.UpstreamTimeout = 200 * time.Millisecond
	})
	start := time.Now()
	m := ask(t, "udp", te.dnsUDP, "allowed.test", dnsmessage.TypeA, 0)
	require.Equal(t, dnsmessage.RCodeServerFailure, m.RCode)
	require.Less(t, time.Since(start), 5*time.Second)

	// The query did reach the silent upstream.
	silent.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	n, _, err := silent.ReadFrom(buf)
	require.NoError(t, err)
	var q dnsmessage.Message
	require.NoError(t, q.Unpack(buf[:n]))
	require.Equal(t, "allowed.test.", q.Questions[0].Name.String())
}

func TestDNSMalformedQueries(t *testing.T) {
	up := startUpstream(t, testZone(t))
	te := startEnforcer(t, mustPolicy(t, Allow, nil, []string{"denied.test"}), up.addr)
	build := func(h dnsmessage.Header, qs ...dnsmessage.Question) []byte {
		b := dnsmessage.NewBuilder(nil, h)
		b.StartQuestions()
		for _, q := range qs {
			require.NoError(t, b.Question(q))
		}
		msg, err := b.Finish()
		require.NoError(t, err)
		return msg
	}
	q := func(name string, class dnsmessage.Class) dnsmessage.Question {
		return dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: class}
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		want dnsmessage.RCode
	}{
		{"two questions", build(dnsmessage.Header{ID: 1}, q("allowed.test.", dnsmessage.ClassINET), q("other.test.", dnsmessage.ClassINET)), dnsmessage.RCodeFormatError},
		{"no question", build(dnsmessage.Header{ID: 2}), dnsmessage.RCodeFormatError},
		{"chaos class", build(dnsmessage.Header{ID: 3}, q("version.bind.", dnsmessage.ClassCHAOS)), dnsmessage.RCodeFormatError},
		{"status opcode", build(dnsmessage.Header{ID: 4, OpCode: 2}, q("allowed.test.", dnsmessage.ClassINET)), dnsmessage.RCodeNotImplemented},
		{"truncated question", build(dnsmessage.Header{ID: 5}, q("allowed.test.", dnsmessage.ClassINET))[:20], dnsmessage.RCodeFormatError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m dnsmessage.Message
			require.NoError(t, m.Unpack(exchangeRaw(t, "udp", te.dnsUDP, tc.msg)))
			require.Equal(t, tc.want, m.RCode)
			require.Equal(t, binaryID(tc.msg), m.ID)
		})
	}
	require.Zero(t, up.count("udp", "allowed.test")+up.count("udp", "other.test"), "nothing malformed was forwarded")

	t.Run("responses are not answered", func(t *testing.T) {
		c, err := net.Dial("udp", te.dnsUDP)
		require.NoError(t, err)
		defer c.Close()
		// Were it answered, the response would be REFUSED at once,
		// before the query that the upstream answers.
		_, err = c.Write(build(dnsmessage.Header{ID: 100, Response: true}, q("denied.test.", dnsmessage.ClassINET)))
		require.NoError(t, err)
		_, err = c.Write(build(dnsmessage.Header{ID: 101}, q("allowed.test.", dnsmessage.ClassINET)))
		require.NoError(t, err)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 1<<16)
		n, err := c.Read(buf)
		require.NoError(t, err)
		require.Equal(t, uint16(101), binaryID(buf[:n]))
		te.denials.none(t)
	})
}

func binaryID(msg []byte) uint16 { return uint16(msg[0])<<8 | uint16(msg[1]) }

func TestDNSClosedEnforcer(t *testing.T) {
	te := startEnforcer(t, mustPolicy(t, Deny, nil, nil), "127.0.0.1:53")
	te.Close()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	require.ErrorIs(t, te.ServeDNS(pc), ErrClosed)
}
