package native

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseHostAddrs(t *testing.T) {
	ipOut := `1: lo    inet 127.0.0.1/8 scope host lo\       valid_lft forever preferred_lft forever
2: eth0    inet 10.99.0.2/24 brd 10.99.0.255 scope global eth0\       valid_lft forever preferred_lft forever
3: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\       valid_lft forever preferred_lft forever
2: eth0    inet6 fe80::1/64 scope link \       valid_lft forever preferred_lft forever
`
	want := []netip.Prefix{netip.MustParsePrefix("10.99.0.2/32"), netip.MustParsePrefix("172.17.0.1/32"), netip.MustParsePrefix("fe80::1/128")}
	require.Equal(t, want, ParseHostAddrs(ipOut))
	require.Equal(t, want[:2], ParseHostAddrs("10.99.0.2 172.17.0.1 \n"))
	require.Empty(t, ParseHostAddrs("sh: ip: not found\n"))
}
