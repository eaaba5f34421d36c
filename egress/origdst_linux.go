package egress

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h),
// which x/sys/unix does not define; it has SO_ORIGINAL_DST's value, at
// level SOL_IPV6.
const ip6tSoOriginalDst = 80

// OriginalDst returns where a connection redirected by nftables or
// iptables (REDIRECT, DNAT) was going: the destination conntrack recorded
// before the rewrite. c must be a *net.TCPConn accepted from the
// redirect's target.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("egress: original destination: a %T is not a *net.TCPConn", c)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if local.Addr().Unmap().Is4() {
			ap, serr = originalDst4(int(fd))
		} else {
			ap, serr = originalDst6(int(fd))
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("egress: original destination of %s: %w (was it redirected by nftables or iptables?)", c.RemoteAddr(), err)
	}
	return ap, nil
}

// originalDst4 reads SO_ORIGINAL_DST, a struct sockaddr_in. x/sys/unix
// has no getter of that type; IPv6Mreq is as long and a plain byte array
// where the sockaddr lands.
func originalDst4(fd int) (netip.AddrPort, error) {
	m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, err
	}
	sa := m.Multiaddr // family (host order), port (network order), address
	if binary.NativeEndian.Uint16(sa[0:2]) != unix.AF_INET {
		return netip.AddrPort{}, errors.New("not an IPv4 address")
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), binary.BigEndian.Uint16(sa[2:4])), nil
}

// originalDst6 reads IP6T_SO_ORIGINAL_DST, a struct sockaddr_in6, which
// IPv6MTUInfo begins with.
func originalDst6(fd int) (netip.AddrPort, error) {
	m, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, ip6tSoOriginalDst)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if m.Addr.Family != unix.AF_INET6 {
		return netip.AddrPort{}, errors.New("not an IPv6 address")
	}
	var port [2]byte
	binary.NativeEndian.PutUint16(port[:], m.Addr.Port) // the field holds network order
	return netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr).Unmap(), binary.BigEndian.Uint16(port[:])), nil
}
