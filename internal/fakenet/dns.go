package fakenet

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	dnsTTL = 60
	// tunnelZone is where any name has a TXT record holding its first
	// label, as a DNS tunnel's server would answer.
	tunnelZone = "tunnel.denied.test"
	dnsIdle    = 30 * time.Second
)

// dnsServer answers for the .test zone: A for the test domains, TXT under
// tunnelZone, NXDOMAIN for other .test names, REFUSED for anything else.
type dnsServer struct {
	hosts map[string]netip.Addr

	mu     sync.Mutex
	counts map[string]int
}

func newDNSServer(hosts map[string]netip.Addr) *dnsServer {
	return &dnsServer{hosts: hosts, counts: map[string]int{}}
}

func (d *dnsServer) queries(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[name]
}

func (d *dnsServer) serveUDP(c *net.UDPConn) {
	buf := make([]byte, 64<<10)
	for {
		k, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp := d.answer(buf[:k]); resp != nil {
			c.WriteToUDPAddrPort(resp, from)
		}
	}
}

func (d *dnsServer) serveTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go d.serveConn(c)
	}
}

// serveConn answers the length-prefixed queries of one TCP connection until
// the client closes it or stays idle for dnsIdle.
func (d *dnsServer) serveConn(c net.Conn) {
	defer c.Close()
	var size [2]byte
	for {
		c.SetDeadline(time.Now().Add(dnsIdle))
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		resp := d.answer(req)
		if resp == nil {
			return
		}
		if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(resp)))); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// soa is the .test zone's, sent with negative answers so resolvers can
// cache them.
var soa = dnsmessage.SOAResource{
	NS:      dnsmessage.MustNewName("ns.test."),
	MBox:    dnsmessage.MustNewName("hostmaster.test."),
	Serial:  1,
	Refresh: 3600,
	Retry:   600,
	Expire:  86400,
	MinTTL:  dnsTTL,
}

// answer builds the response to the query req, or nil when req is not a
// query worth answering (no header, or a response).
func (d *dnsServer) answer(req []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil || h.Response {
		return nil
	}
	resp := dnsmessage.Header{
		ID:               h.ID,
		Response:         true,
		OpCode:           h.OpCode,
		RecursionDesired: h.RecursionDesired,
	}
	q, err := p.Question()
	if err != nil {
		resp.RCode = dnsmessage.RCodeFormatError
		return packResponse(resp, nil, nil)
	}
	name := canonical(q.Name.String())
	d.mu.Lock()
	d.counts[name]++
	d.mu.Unlock()

	inZone := name == "test" || strings.HasSuffix(name, ".test")
	inTunnel := name == tunnelZone || strings.HasSuffix(name, "."+tunnelZone)
	addr, isHost := d.hosts[name]
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: dnsTTL}
	switch {
	case h.OpCode != 0:
		resp.RCode = dnsmessage.RCodeNotImplemented
		return packResponse(resp, &q, nil)
	case !inZone || q.Class != dnsmessage.ClassINET:
		resp.RCode = dnsmessage.RCodeRefused
		return packResponse(resp, &q, nil)
	}
	resp.Authoritative = true
	switch {
	case inTunnel && q.Type == dnsmessage.TypeTXT:
		label, _, _ := strings.Cut(q.Name.String(), ".")
		return packResponse(resp, &q, func(b *dnsmessage.Builder) error {
			return b.TXTResource(rh, dnsmessage.TXTResource{TXT: []string{label}})
		})
	case isHost && q.Type == dnsmessage.TypeA:
		return packResponse(resp, &q, func(b *dnsmessage.Builder) error {
			return b.AResource(rh, dnsmessage.AResource{A: addr.As4()})
		})
	case isHost || inTunnel || name == "test":
		// The name exists, without records of this type.
	default:
		resp.RCode = dnsmessage.RCodeNameError
	}
	return packResponse(resp, &q, func(b *dnsmessage.Builder) error {
		if err := b.StartAuthorities(); err != nil {
			return err
		}
		return b.SOAResource(dnsmessage.ResourceHeader{
			Name: dnsmessage.MustNewName("test."), Class: dnsmessage.ClassINET, TTL: dnsTTL,
		}, soa)
	})
}

// packResponse packs a response: header h, question q (when not nil), and what
// records adds (answers unless it starts another section).
func packResponse(h dnsmessage.Header, q *dnsmessage.Question, records func(*dnsmessage.Builder) error) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q != nil {
		if err := b.StartQuestions(); err != nil {
			return nil
		}
		if err := b.Question(*q); err != nil {
			return nil
		}
	}
	if records != nil {
		if err := b.StartAnswers(); err != nil {
			return nil
		}
		if err := records(&b); err != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
