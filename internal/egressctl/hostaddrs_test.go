package egressctl

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/egress"
)

func TestHostAddrsFlagRoundTrip(t *testing.T) {
	in := []netip.Prefix{netip.MustParsePrefix("172.17.0.1/32"), netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::1/128")}
	flag := HostAddrsFlag(in)
	require.Equal(t, "172.17.0.1,10.1.0.0/16,fd00::1", flag)
	got, err := ParseHostAddrs(flag)
	require.NoError(t, err)
	require.Equal(t, in, got)
	_, err = ParseHostAddrs("172.17.0.1,nope")
	require.ErrorContains(t, err, `"nope"`)
}

// The proxy's guard refuses the host's addresses that the backend named
// (the Docker host's, seen from an enforcer in a container) unless a
// default-deny policy's address rule names them.
func TestGuardRefusesNamedHostAddrs(t *testing.T) {
	host := netip.MustParseAddr("192.0.2.10")
	g := newHostGuard([]netip.Prefix{netip.PrefixFrom(host, 32)})
	require.True(t, g.special(host))
	require.False(t, g.special(netip.MustParseAddr("192.0.2.11")))
	require.True(t, g.special(netip.MustParseAddr("127.0.0.1")))

	for _, tc := range []struct {
		def    string
		allow  []string
		denied bool
	}{
		{egress.Allow, nil, true},
		{egress.Deny, []string{"hostname.test"}, true},
		{egress.Allow, []string{"192.0.2.0/24"}, true},
		{egress.Deny, []string{"192.0.2.10:80"}, false},
	} {
		p, err := egress.NewPolicy(tc.def, tc.allow, nil)
		require.NoError(t, err)
		dial := guardedDial(func() *egress.Policy { return p }, g, nil)
		// A refusal comes before any dial (a nil dialer would panic).
		if tc.denied {
			_, err := dial(t.Context(), "tcp", "192.0.2.10:80")
			require.ErrorContains(t, err, "is the host's or a special address", "%+v", tc)
		}
	}
}

// Other protocols: the address chain refuses the denied names' addresses
// and deny rules first, then the host's (unless the default is deny), then
// accepts allow rules.
func TestDenyRules(t *testing.T) {
	p, err := egress.NewPolicy(egress.Allow, []string{"192.0.2.0/24:53"}, []string{"denied.test:53", "198.51.100.0/24"})
	require.NoError(t, err)
	rules := DenyRules(AddrRules{Policy: p, Host: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")}, Denied: []netip.Addr{netip.MustParseAddr("192.0.2.20")}})
	var got []string
	for _, r := range rules {
		got = append(got, r.Prefix.String())
	}
	require.Equal(t, []string{"192.0.2.20/32", "198.51.100.0/24", "192.0.2.10/32"}, got)
	require.Len(t, rules[0].Ports, 1, "a denied name's address is refused on its rule's ports")

	p, err = egress.NewPolicy(egress.Deny, []string{"192.0.2.10:53"}, nil)
	require.NoError(t, err)
	require.Empty(t, DenyRules(AddrRules{Policy: p, Host: []netip.Prefix{netip.MustParsePrefix("192.0.2.10/32")}}),
		"under a default deny, an allow rule may name the host")
}
