package egress

import (
	"crypto/tls"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "10.0.0.0/8:53", "[2001:db8::1]:80,443",
		"2001:db8::/32:1-2", "*", "a.*.b", "x:0", "https://x", "::ffff:1.2.3.4", "ex..com", "1.2.3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			require.Contains(t, err.Error(), "egress rule")
			return
		}
		require.Equal(t, s, r.Text)
		require.NotEqual(t, r.Domain == "", !r.Prefix.IsValid(), "a rule is a name or an address")
		for _, p := range r.Ports {
			require.True(t, p.Lo >= 1 && p.Lo <= p.Hi)
		}
		if r.Domain != "" {
			require.Empty(t, checkName(r.Domain))
			require.Equal(t, !r.Wildcard, r.matchesName(r.Domain, r.portRanges()[0].Lo))
			require.True(t, r.matchesName("x."+r.Domain, r.portRanges()[0].Hi) == r.Wildcard)
		} else {
			require.True(t, r.matchesAddr(r.Prefix.Addr(), r.portRanges()[0].Lo))
		}
	})
}

func FuzzClientHelloSNI(f *testing.F) {
	for _, tc := range helloConfigs {
		hello := captureHello(f, tc.cfg)
		f.Add(hello)
		f.Add(reRecord(f, hello, 40))
	}
	f.Add(captureHello(f, &tls.Config{ServerName: "x.test", MaxVersion: tls.VersionTLS12}))
	f.Fuzz(func(t *testing.T, data []byte) {
		name, err := clientHelloSNI(data)
		if err != nil || name == "" {
			return
		}
		require.Empty(t, checkName(name), "a name returned is a host name")
		// What an earlier read of the same bytes would have decided
		// agrees: more was needed, or the same name was there.
		step := max(1, len(data)/64)
		for i := 0; i < len(data); i += step {
			got, err := clientHelloSNI(data[:i])
			if err != errNeedMore {
				require.NoError(t, err, "prefix of %d bytes", i)
				require.Equal(t, name, got, "prefix of %d bytes", i)
			}
		}
	})
}

func FuzzHTTPHost(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: example.test\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test:80\r\n\r\n",
		"POST /x HTTP/1.0\nhost: [::1]:8080\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"CONNECT a:443 HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		name, err := httpHost(data)
		if err != nil || name == "" {
			return
		}
		if _, err := netip.ParseAddr(name); err != nil {
			require.Empty(t, checkName(name), "a name returned is a host name or address: %q", name)
		}
		p, more := sniff(data)
		require.False(t, more)
		require.Equal(t, name, p.name)
	})
}

// FuzzDNSQuery feeds packets to the DNS handler. Allowed names go to an
// upstream on a closed port of 127.0.0.1, which fails at once.
func FuzzDNSQuery(f *testing.F) {
	for _, q := range []dnsmessage.Question{
		{Name: dnsmessage.MustNewName("allowed.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET},
		{Name: dnsmessage.MustNewName("denied.test."), Type: dnsmessage.TypeAAAA, Class: dnsmessage.ClassINET},
		{Name: dnsmessage.MustNewName("x.test."), Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassCHAOS},
	} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
		b.StartQuestions()
		b.Question(q)
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, true)
		b.StartAdditionals()
		b.OPTResource(rh, dnsmessage.OPTResource{})
		msg, _ := b.Finish()
		f.Add(msg)
	}
	e, err := New(Options{Policy: mustPolicy(f, Deny, []string{"allowed.test"}, nil), Upstream: "127.0.0.1:1"})
	require.NoError(f, err)
	f.Cleanup(func() { e.Close() })
	f.Fuzz(func(t *testing.T, msg []byte) {
		resp := e.answer(msg, true)
		if resp == nil {
			return
		}
		var m dnsmessage.Message
		require.NoError(t, m.Unpack(resp), "replies parse")
		require.True(t, m.Response)
		require.Equal(t, binaryID(msg), m.ID)
		require.LessOrEqual(t, len(resp), 65535)
	})
}
