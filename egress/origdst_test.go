package egress

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Without a redirect there is nothing to undo: conntrack, when it tracks
// the connection, gives its own destination back; when it does not (no
// netfilter rule in this namespace asked for it), ENOENT. Redirected
// connections are the lite backend's tests', which make the nftables
// rules this machine's tests may not.
func TestOriginalDst(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_, err := OriginalDst(a)
	require.ErrorContains(t, err, "is not a *net.TCPConn")

	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			l, err := net.Listen(network, addr)
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			defer l.Close()
			c, err := net.Dial(network, l.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			s, err := l.Accept()
			require.NoError(t, err)
			defer s.Close()
			got, err := OriginalDst(s)
			if errors.Is(err, unix.ENOENT) {
				t.Logf("not tracked by conntrack here: %v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, netip.MustParseAddrPort(l.Addr().String()), got)
		})
	}
}
