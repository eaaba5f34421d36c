package egressctl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/egress"
)

// Denials of protocols the enforcer does not see itself (UDP but DNS,
// ICMP, ...): the nftables rules that drop them log them first, at most
// logRate a second, to an NFLOG group (nfnetlink_log), and the enforcer
// listens on that group and records them. The listener is bound while
// the enforcer still has its privileges.

// LogRate bounds the packets logged a second (per sandbox).
const LogRate = 20

// NetnsLogGroup is the NFLOG group of an in-namespace enforcer (groups
// are per network namespace).
const NetnsLogGroup = 21

// LogGroup is the NFLOG group of lite's sandbox of egress index n (groups
// are host-wide there).
func LogGroup(n int) uint16 { return uint16(20000 + n%40000) }

// nfnetlink_log's messages and attributes (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgPacket  = 0
	nfulnlMsgConfig  = 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulaPayload     = 9
	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2
)

// nflog is a listener of one NFLOG group.
type nflog struct{ c *netlink.Conn }

// openNflog binds group; it needs CAP_NET_ADMIN.
func openNflog(group uint16) (*nflog, error) {
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
	if err != nil {
		return nil, fmt.Errorf("nflog: %w", err)
	}
	config := func(attr uint16, value []byte) error {
		ae := netlink.NewAttributeEncoder()
		ae.ByteOrder = binary.BigEndian
		ae.Bytes(attr, value)
		attrs, err := ae.Encode()
		if err != nil {
			return err
		}
		// nfgenmsg: family, version, resource (the group, big endian).
		data := append([]byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, byte(group >> 8), byte(group)}, attrs...)
		_, err = c.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8 | nfulnlMsgConfig), Flags: netlink.Request | netlink.Acknowledge},
			Data:   data,
		})
		return err
	}
	// The packet's first 128 bytes: its IP and transport headers.
	mode := binary.BigEndian.AppendUint32(nil, 128)
	mode = append(mode, nfulnlCopyPacket, 0)
	if err := config(nfulaCfgCmd, []byte{nfulnlCfgCmdBind}); err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog group %d: %w", group, err)
	}
	if err := config(nfulaCfgMode, mode); err != nil {
		c.Close()
		return nil, fmt.Errorf("nflog group %d: %w", group, err)
	}
	return &nflog{c: c}, nil
}

// run records every logged packet with deny until the listener is closed.
func (l *nflog) run(deny func(egress.Denial)) {
	for {
		msgs, err := l.c.Receive()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				continue // a burst overflowed the socket: later ones come
			}
			return
		}
		for _, m := range msgs {
			if m.Header.Type != netlink.HeaderType(unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket) || len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				continue
			}
			for ad.Next() {
				if ad.Type() != nfulaPayload {
					continue
				}
				if proto, dst, port, ok := parsePacket(ad.Bytes()); ok {
					deny(egress.Denial{Time: time.Now(), Proto: proto, Dest: dst.String(), Port: port, Reason: "no address rule allows it"})
				}
			}
		}
	}
}

func (l *nflog) Close() error { return l.c.Close() }

// parsePacket reads an IP packet's protocol (by name where known),
// destination and destination port (0 for protocols without ports).
func parsePacket(p []byte) (proto string, dst netip.Addr, port uint16, ok bool) {
	if len(p) < 1 {
		return "", netip.Addr{}, 0, false
	}
	var next byte
	var transport []byte
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0x0f) * 4
		if len(p) < 20 || ihl < 20 || len(p) < ihl {
			return "", netip.Addr{}, 0, false
		}
		next = p[9]
		dst = netip.AddrFrom4([4]byte(p[16:20]))
		transport = p[ihl:]
	case 6:
		if len(p) < 40 {
			return "", netip.Addr{}, 0, false
		}
		next = p[6]
		dst = netip.AddrFrom16([16]byte(p[24:40]))
		transport = p[40:]
	default:
		return "", netip.Addr{}, 0, false
	}
	switch next {
	case unix.IPPROTO_UDP:
		proto = "udp"
	case unix.IPPROTO_TCP:
		proto = "tcp"
	case unix.IPPROTO_ICMP:
		return "icmp", dst, 0, true
	case unix.IPPROTO_ICMPV6:
		return "icmpv6", dst, 0, true
	default:
		return "ip-proto-" + strconv.Itoa(int(next)), dst, 0, true
	}
	if len(transport) >= 4 {
		port = binary.BigEndian.Uint16(transport[2:4])
	}
	return proto, dst, port, true
}
