package egress

import (
	"errors"
	"net/netip"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRule(t *testing.T) {
	pfx := netip.MustParsePrefix
	for _, tc := range []struct {
		in   string
		want Rule
	}{
		{"example.com", Rule{Domain: "example.com"}},
		{"Example.COM.", Rule{Domain: "example.com"}},
		{"*.example.com", Rule{Domain: "example.com", Wildcard: true}},
		{"*.Example.com.:443", Rule{Domain: "example.com", Wildcard: true, Ports: []PortRange{{443, 443}}}},
		{"example.com:443", Rule{Domain: "example.com", Ports: []PortRange{{443, 443}}}},
		{"*.example.com:8000-8100", Rule{Domain: "example.com", Wildcard: true, Ports: []PortRange{{8000, 8100}}}},
		{"example.com:80,443,8000-8001", Rule{Domain: "example.com", Ports: []PortRange{{80, 80}, {443, 443}, {8000, 8001}}}},
		{"_dmarc.my-host.example", Rule{Domain: "_dmarc.my-host.example"}},
		{"xn--bcher-kva.example", Rule{Domain: "xn--bcher-kva.example"}},
		{"10.1.2.3", Rule{Prefix: pfx("10.1.2.3/32")}},
		{"10.0.0.0/8", Rule{Prefix: pfx("10.0.0.0/8")}},
		{"10.0.0.0/8:53", Rule{Prefix: pfx("10.0.0.0/8"), Ports: []PortRange{{53, 53}}}},
		{"10.1.2.3:1-65535", Rule{Prefix: pfx("10.1.2.3/32"), Ports: []PortRange{{1, 65535}}}},
		{"2001:db8::/32", Rule{Prefix: pfx("2001:db8::/32")}},
		{"2001:db8::1", Rule{Prefix: pfx("2001:db8::1/128")}},
		{"[2001:db8::1]:443", Rule{Prefix: pfx("2001:db8::1/128"), Ports: []PortRange{{443, 443}}}},
		{"2001:db8::/32:443", Rule{Prefix: pfx("2001:db8::/32"), Ports: []PortRange{{443, 443}}}},
		{"[2001:db8::/32]:443", Rule{Prefix: pfx("2001:db8::/32"), Ports: []PortRange{{443, 443}}}},
		{"[2001:db8::1]", Rule{Prefix: pfx("2001:db8::1/128")}},
		{"::ffff:10.1.2.3", Rule{Prefix: pfx("10.1.2.3/32")}},
		{"::ffff:10.0.0.0/104", Rule{Prefix: pfx("10.0.0.0/8")}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRule(tc.in)
			require.NoError(t, err)
			tc.want.Text = tc.in
			require.Equal(t, tc.want, got)
		})
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		{"", "empty"},
		{"*", `"*" alone`},
		{"*.", `"*" alone`},
		{"*:443", `"*" alone`},
		{"*foo.com", "whole first label"},
		{"a.*.com", "whole first label"},
		{"*.*.com", "whole first label"},
		{"example.com:0", `port "0" is out of range`},
		{"example.com:65536", `port "65536" is out of range`},
		{"example.com:99999999999999999999", "out of range"},
		{"example.com:9000-8000", `port range "9000-8000" is reversed`},
		{"example.com:", `no port after ":"`},
		{"example.com:http", `port "http" is not a number`},
		{"example.com:80,", `port "" is not a number`},
		{"example.com:-80", `port "" is not a number`},
		{":443", "no host"},
		{"10.0.0.0/33", "bad CIDR"},
		{"10.0.0.1/8", "did you mean 10.0.0.0/8?"},
		{"10.0.0.0/", "bad CIDR"},
		{"2001:db8::/129", "bad CIDR"},
		{"10.0.0.256", "bad IP address"},
		{"1.2.3", "bad IP address"},
		{"fe80::1%eth0", "zone"},
		{"https://example.com", "a URL"},
		{"example.com/path", "a host with a path"},
		{"example.com evil.com", "white space"},
		{" example.com", "space"},
		{"example.com\t", "space"},
		{"exa!mple.com", `character '!'`},
		{"ex..com", "empty label"},
		{"bücher.example", "punycode"},
		{"[example.com]:443", "brackets are only for IPv6"},
		{"[10.0.0.1]:443", "brackets are only for IPv6"},
		{"[2001:db8::1:443", `"[" without "]"`},
		{"[2001:db8::1]443", `unexpected "443"`},
		{"example.com:80:90", "bad IP address"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseRule(tc.in)
			require.Error(t, err)
			var re *RuleError
			require.True(t, errors.As(err, &re))
			require.Equal(t, tc.in, re.Rule)
			require.Contains(t, err.Error(), "egress rule "+strconv.Quote(tc.in), "the error quotes the rule")
			require.Contains(t, err.Error(), tc.reason)
			require.Contains(t, err.Error(), `allowed: "example.com", "*.example.com"`, "the error says what is allowed")
		})
	}
}

func TestRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		rule, name string
		port       uint16
		want       bool
	}{
		{"example.com", "example.com", 443, true},
		{"example.com", "www.example.com", 443, false},
		{"example.com", "badexample.com", 443, false},
		{"*.example.com", "www.example.com", 80, true},
		{"*.example.com", "a.b.example.com", 80, true},
		{"*.example.com", "example.com", 80, false},
		{"*.example.com", "wwwexample.com", 80, false},
		{"example.com:443", "example.com", 443, true},
		{"example.com:443", "example.com", 80, false},
		{"example.com:8000-8100", "example.com", 8100, true},
		{"example.com:8000-8100", "example.com", 8101, false},
		{"example.com:80,443", "example.com", 443, true},
		{"10.0.0.0/8", "10.0.0.1", 80, false}, // address rules match no names
	} {
		r, err := ParseRule(tc.rule)
		require.NoError(t, err)
		require.Equal(t, tc.want, r.matchesName(tc.name, tc.port), "%s vs %s:%d", tc.rule, tc.name, tc.port)
	}
}
