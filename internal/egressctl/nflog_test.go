package egressctl

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// ipv4 is an IPv4 header (no options) of protocol proto to dst, followed
// by transport.
func ipv4(proto byte, dst [4]byte, transport []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	h[9] = proto
	copy(h[16:], dst[:])
	return append(h, transport...)
}

func TestParsePacket(t *testing.T) {
	udp := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 40000), 7)
	v6 := make([]byte, 40)
	v6[0] = 0x60
	v6[6] = 17
	dst6 := netip.MustParseAddr("2001:db8::1").As16()
	copy(v6[24:], dst6[:])
	for _, tc := range []struct {
		name  string
		pkt   []byte
		proto string
		dst   string
		port  uint16
		ok    bool
	}{
		{"udp", ipv4(17, [4]byte{10, 251, 1, 14}, udp), "udp", "10.251.1.14", 7, true},
		{"icmp", ipv4(1, [4]byte{10, 0, 0, 1}, []byte{8, 0}), "icmp", "10.0.0.1", 0, true},
		{"sctp", ipv4(132, [4]byte{10, 0, 0, 1}, nil), "ip-proto-132", "10.0.0.1", 0, true},
		{"udp truncated", ipv4(17, [4]byte{10, 0, 0, 1}, []byte{1}), "udp", "10.0.0.1", 0, true},
		{"ipv6 udp", append(v6, udp...), "udp", "2001:db8::1", 7, true},
		{"short", []byte{0x45, 0}, "", "", 0, false},
		{"bad ihl", append([]byte{0x4f}, make([]byte, 30)...), "", "", 0, false},
		{"not ip", []byte{0x10, 0, 0}, "", "", 0, false},
		{"empty", nil, "", "", 0, false},
	} {
		proto, dst, port, ok := parsePacket(tc.pkt)
		if ok != tc.ok || proto != tc.proto || port != tc.port || (ok && dst.String() != tc.dst) {
			t.Errorf("%s: parsePacket = %q %v %d %v, want %q %s %d %v", tc.name, proto, dst, port, ok, tc.proto, tc.dst, tc.port, tc.ok)
		}
	}
}

// FuzzParsePacket: packets come from the sandbox; no input may crash the
// enforcer, and what it reads is a valid address.
func FuzzParsePacket(f *testing.F) {
	f.Add(ipv4(17, [4]byte{10, 0, 0, 1}, []byte{0, 1, 0, 7}))
	f.Add(append([]byte{0x60}, make([]byte, 50)...))
	f.Add([]byte{0x4f, 1, 2})
	f.Fuzz(func(t *testing.T, p []byte) {
		if _, dst, _, ok := parsePacket(p); ok && !dst.IsValid() {
			t.Fatalf("ok with no address for %x", p)
		}
	})
}
