//go:build !linux

package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// OriginalDst returns where a connection redirected by nftables or
// iptables was going. It needs Linux's conntrack: elsewhere it fails with
// an error wrapping errors.ErrUnsupported.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("egress: original destination: %w (Linux only)", errors.ErrUnsupported)
}
