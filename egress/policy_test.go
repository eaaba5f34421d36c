package egress

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewPolicy(t *testing.T) {
	p, err := NewPolicy("", []string{"example.com", "10.0.0.0/8:53"}, []string{"evil.example.com"})
	require.NoError(t, err)
	require.Equal(t, Deny, p.Default, `default "" is deny`)
	require.Len(t, p.Allow, 2)
	require.Equal(t, "evil.example.com", p.Deny[0].Domain)

	def, allow, deny := p.Spec()
	require.Equal(t, Deny, def)
	require.Equal(t, []string{"example.com", "10.0.0.0/8:53"}, allow)
	require.Equal(t, []string{"evil.example.com"}, deny)

	p2, err := NewPolicy(def, allow, deny)
	require.NoError(t, err)
	require.Equal(t, p, p2, "Spec gives back what NewPolicy takes")

	def, allow, deny = (&Policy{}).Spec()
	require.Equal(t, Deny, def)
	require.Empty(t, allow)
	require.Empty(t, deny)
}

func TestNewPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		def         string
		allow, deny []string
		want        []string
	}{
		{"maybe", nil, nil, []string{`egress default "maybe"`, `"allow" or "deny"`}},
		{"Allow", nil, nil, []string{`egress default "Allow"`}},
		{"deny", []string{"a.com", "b.com", "*foo.com"}, nil, []string{`egress allow[2] "*foo.com"`, "first label"}},
		{"allow", nil, []string{"a.com:0"}, []string{`egress deny[0] "a.com:0"`, "out of range"}},
	} {
		_, err := NewPolicy(tc.def, tc.allow, tc.deny)
		require.Error(t, err)
		for _, w := range tc.want {
			require.Contains(t, err.Error(), w)
		}
	}
	_, err := NewPolicy("deny", []string{"x", "https://x"}, nil)
	var re *RuleError
	require.True(t, errors.As(err, &re))
	require.Equal(t, RuleError{List: "allow", Index: 1, Rule: "https://x", Reason: re.Reason}, *re)
}

func mustPolicy(t testing.TB, def string, allow, deny []string) *Policy {
	t.Helper()
	p, err := NewPolicy(def, allow, deny)
	require.NoError(t, err)
	return p
}

func TestAllowName(t *testing.T) {
	deny := mustPolicy(t, Deny, []string{"example.com", "*.api.test:443", "both.test", "ports.test:80,8000-8100"}, []string{"bad.api.test", "both.test:22"})
	allow := mustPolicy(t, Allow, []string{"example.com"}, []string{"evil.test", "*.evil.test", "mail.test:25"})
	for _, tc := range []struct {
		p    *Policy
		name string
		port uint16
		want bool
	}{
		{deny, "example.com", 443, true},
		{deny, "EXAMPLE.com.", 80, true},
		{deny, "www.example.com", 443, false},
		{deny, "other.test", 443, false},
		{deny, "x.api.test", 443, true},
		{deny, "x.api.test", 80, false},
		{deny, "api.test", 443, false},
		{deny, "bad.api.test", 443, false}, // deny wins over the wildcard allow
		{deny, "both.test", 443, true},
		{deny, "both.test", 22, false},
		{deny, "ports.test", 80, true},
		{deny, "ports.test", 8050, true},
		{deny, "ports.test", 443, false},
		{deny, "10.0.0.1", 80, false},
		{allow, "anything.test", 443, true},
		{allow, "example.com", 443, true},
		{allow, "evil.test", 443, false},
		{allow, "a.b.evil.test", 80, false},
		{allow, "notevil.test", 80, true},
		{allow, "mail.test", 25, false},
		{allow, "mail.test", 587, true},
	} {
		require.Equal(t, tc.want, tc.p.AllowName(tc.name, tc.port), "%s %s:%d", tc.p.Default, tc.name, tc.port)
	}
}

func TestAllowResolve(t *testing.T) {
	for _, tc := range []struct {
		def         string
		allow, deny []string
		name        string
		want        bool
	}{
		{Deny, []string{"example.com"}, nil, "example.com", true},
		{Deny, []string{"example.com"}, nil, "Example.Com.", true},
		{Deny, []string{"example.com"}, nil, "www.example.com", false},
		{Deny, []string{"*.example.com:443"}, nil, "www.example.com", true},
		{Deny, nil, nil, "example.com", false},
		{Deny, []string{"10.0.0.0/8"}, nil, "example.com", false},
		{Deny, []string{"example.com:443"}, []string{"example.com"}, "example.com", false},
		{Deny, []string{"example.com:443"}, []string{"example.com:80"}, "example.com", true},
		{Deny, []string{"example.com:80-90"}, []string{"example.com:80-85", "example.com:86-90"}, "example.com", false},
		{Deny, []string{"example.com:80-91"}, []string{"example.com:80-85", "example.com:86-90"}, "example.com", true},
		{Deny, []string{"example.com:80-90"}, []string{"example.com:81-90"}, "example.com", true},
		{Deny, []string{"example.com"}, []string{"example.com:1-65534"}, "example.com", true},
		{Deny, []string{"example.com"}, []string{"example.com:1-65535"}, "example.com", false},
		{Allow, nil, nil, "anything.test", true},
		{Allow, nil, []string{"evil.test"}, "evil.test", false},
		{Allow, nil, []string{"*.evil.test"}, "x.evil.test", false},
		{Allow, nil, []string{"*.evil.test"}, "evil.test", true},
		{Allow, nil, []string{"evil.test:443"}, "evil.test", true}, // port 80 could still be allowed
		{Allow, nil, []string{"10.0.0.0/8"}, "evil.test", true},
	} {
		p := mustPolicy(t, tc.def, tc.allow, tc.deny)
		require.Equal(t, tc.want, p.AllowResolve(tc.name), "%s allow %v deny %v: %s", tc.def, tc.allow, tc.deny, tc.name)
	}
}

func TestAllowAddr(t *testing.T) {
	ip := netip.MustParseAddr
	deny := mustPolicy(t, Deny, []string{"10.0.0.0/8", "192.0.2.1:53", "2001:db8::/32:443", "example.com"}, []string{"10.9.0.0/16", "10.1.2.3:22"})
	allow := mustPolicy(t, Allow, []string{"10.9.9.9"}, []string{"10.9.0.0/16", "198.51.100.0/24:25", "evil.test"})
	for _, tc := range []struct {
		p    *Policy
		ip   string
		port uint16
		want bool
	}{
		{deny, "10.1.1.1", 80, true},
		{deny, "::ffff:10.1.1.1", 80, true}, // IPv4-mapped addresses are IPv4
		{deny, "10.9.1.1", 80, false},       // deny wins
		{deny, "10.1.2.3", 22, false},
		{deny, "10.1.2.3", 23, true},
		{deny, "192.0.2.1", 53, true},
		{deny, "192.0.2.1", 80, false},
		{deny, "2001:db8::5", 443, true},
		{deny, "2001:db8::5", 80, false},
		{deny, "11.0.0.1", 80, false},
		{allow, "11.0.0.1", 80, true},
		{allow, "10.9.9.9", 80, false}, // deny wins over the allow rule too
		{allow, "198.51.100.7", 25, false},
		{allow, "198.51.100.7", 587, true},
	} {
		require.Equal(t, tc.want, tc.p.AllowAddr(ip(tc.ip), tc.port), "%s %s:%d", tc.p.Default, tc.ip, tc.port)
	}
}

func TestByAddr(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.7")
	for _, tc := range []struct {
		def         string
		allow, deny []string
		port        uint16
		want        addrVerdict
	}{
		{Deny, nil, nil, 443, addrNeedsName},
		{Deny, []string{"192.0.2.0/24"}, nil, 443, addrAllowed},
		{Deny, []string{"192.0.2.0/24"}, []string{"192.0.2.7"}, 443, addrDenied},
		{Allow, nil, nil, 443, addrAllowed},
		{Allow, nil, []string{"evil.test"}, 443, addrNeedsName},
		{Allow, nil, []string{"evil.test:443"}, 22, addrAllowed}, // no deny name rule can refuse port 22
		{Allow, nil, []string{"192.0.2.7:22"}, 22, addrDenied},
	} {
		p := mustPolicy(t, tc.def, tc.allow, tc.deny)
		got, _ := p.byAddr(ip, tc.port)
		require.Equal(t, tc.want, got, "%s allow %v deny %v port %d", tc.def, tc.allow, tc.deny, tc.port)
	}
}
