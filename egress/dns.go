package egress

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

const (
	maxDNSInflight = 256              // UDP queries answered at once; more wait in the socket
	dnsTCPIdle     = 10 * time.Second // a DNS TCP connection with no query for this long is closed
	maxResolvedTTL = 24 * time.Hour   // answers are remembered at most this long
)

// ServeDNS answers the DNS queries that come to pc (UDP) until pc or the
// enforcer is closed: names the policy does not let resolve get REFUSED
// and are never sent upstream; the others are forwarded to Upstream.
func (e *Enforcer) ServeDNS(pc net.PacketConn) error {
	if !e.track(pc) {
		return ErrClosed
	}
	defer e.untrack(pc)
	sem := make(chan struct{}, maxDNSInflight)
	buf := make([]byte, 1<<16)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if e.isClosed() {
				return ErrClosed
			}
			return err
		}
		msg := bytes.Clone(buf[:n])
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			if resp := e.answer(msg, true); resp != nil {
				pc.WriteTo(resp, addr)
			}
		}()
	}
}

// ServeDNSTCP answers DNS over the TCP connections accepted on l, as
// ServeDNS does, until l or the enforcer is closed.
func (e *Enforcer) ServeDNSTCP(l net.Listener) error {
	return e.serve(l, e.serveDNSConn)
}

func (e *Enforcer) serveDNSConn(c net.Conn) {
	defer c.Close()
	if !e.track(c) {
		return
	}
	defer e.untrack(c)
	var n [2]byte
	for {
		c.SetReadDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return
		}
		msg := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, msg); err != nil {
			return
		}
		resp := e.answer(msg, false)
		if resp == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(dnsTCPIdle))
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

// answer returns the reply to the DNS message msg, nil for none.
func (e *Enforcer) answer(msg []byte, udp bool) []byte {
	q, rcode, ok := parseQuery(msg)
	switch {
	case !ok:
		return nil
	case rcode != dnsmessage.RCodeSuccess:
		return q.reply(dnsmessage.Header{RCode: rcode})
	}
	name := normalizeName(q.question.Name.String())
	if !e.Policy().AllowResolve(name) {
		e.deny(Denial{Proto: "dns", Dest: name, Name: name, Reason: fmt.Sprintf("name %q is not allowed", name)})
		return q.reply(dnsmessage.Header{RCode: dnsmessage.RCodeRefused})
	}
	e.dnsForwarded.Add(1)
	resp, err := e.forward(q)
	if err != nil {
		e.log.Warn("egress: DNS upstream", "name", name, "type", q.question.Type, "err", err)
		return q.reply(dnsmessage.Header{RCode: dnsmessage.RCodeServerFailure})
	}
	// Remembered before the client has the answer, so that it cannot
	// connect before its address counts.
	if addrs, ttl := answerAddrs(resp, name); len(addrs) > 0 {
		e.resolved.add(name, addrs, min(ttl, maxResolvedTTL))
	}
	binary.BigEndian.PutUint16(resp, q.header.ID)
	if udp && len(resp) > q.udpLimit() {
		// Too big for the client: it asks again over TCP.
		var p dnsmessage.Parser
		h, _ := p.Start(resp)
		h.Truncated = true
		return q.reply(h)
	}
	return resp
}

// dnsQuery is what answer needs of a query.
type dnsQuery struct {
	header      dnsmessage.Header
	question    dnsmessage.Question
	hasQuestion bool
	edns        bool   // the query had an OPT record
	ednsSize    uint16 // its UDP payload size
	dnssecOK    bool
}

// parseQuery parses msg. ok false: not a query, send nothing; rcode: the
// error to answer with, RCodeSuccess for a query to decide.
func parseQuery(msg []byte) (q dnsQuery, rcode dnsmessage.RCode, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return q, 0, false
	}
	q.header = h
	if h.OpCode != 0 {
		return q, dnsmessage.RCodeNotImplemented, true
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return q, dnsmessage.RCodeFormatError, true
	}
	q.question, q.hasQuestion = qs[0], true
	if qs[0].Class != dnsmessage.ClassINET {
		return q, dnsmessage.RCodeFormatError, true
	}
	if p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return q, dnsmessage.RCodeFormatError, true
	}
	for {
		rh, err := p.AdditionalHeader()
		if err == dnsmessage.ErrSectionDone {
			return q, dnsmessage.RCodeSuccess, true
		}
		if err != nil || p.SkipAdditional() != nil {
			return q, dnsmessage.RCodeFormatError, true
		}
		if rh.Type == dnsmessage.TypeOPT {
			q.edns, q.ednsSize, q.dnssecOK = true, uint16(rh.Class), rh.DNSSECAllowed()
		}
	}
}

// udpLimit is the size of the largest reply the client takes over UDP.
func (q *dnsQuery) udpLimit() int {
	if q.edns {
		return max(512, int(q.ednsSize))
	}
	return 512
}

// reply builds an answer without records: h's flags and rcode, the
// query's ID and question, and an OPT record if the query had one.
func (q *dnsQuery) reply(h dnsmessage.Header) []byte {
	h.ID, h.Response, h.OpCode = q.header.ID, true, q.header.OpCode
	h.RecursionDesired, h.RecursionAvailable = q.header.RecursionDesired, true
	return q.build(h)
}

// build packs h, the question and (for an EDNS query) an OPT record.
func (q *dnsQuery) build(h dnsmessage.Header) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	if q.hasQuestion {
		if b.StartQuestions() != nil || b.Question(q.question) != nil {
			return nil
		}
	}
	if q.edns {
		var rh dnsmessage.ResourceHeader
		if b.StartAdditionals() != nil || rh.SetEDNS0(min(max(512, int(q.ednsSize)), 4096), dnsmessage.RCodeSuccess, q.dnssecOK) != nil ||
			b.OPTResource(rh, dnsmessage.OPTResource{}) != nil {
			return nil
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// forward asks the upstream server q's question, over UDP and then over
// TCP if the answer was truncated. The query is built anew, not copied:
// nothing of what the sandbox sent but the question (and its EDNS size and
// DO bit) reaches the upstream.
func (e *Enforcer) forward(q dnsQuery) ([]byte, error) {
	id := uint16(rand.Uint32())
	query := q.build(dnsmessage.Header{ID: id, RecursionDesired: q.header.RecursionDesired,
		CheckingDisabled: q.header.CheckingDisabled, AuthenticData: q.header.AuthenticData})
	if query == nil {
		return nil, errors.New("packing the query")
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.upstreamTimeout)
	defer cancel()
	resp, err := e.exchange(ctx, "udp", query, id, q.question)
	if err == nil && resp[2]&0x02 != 0 { // TC
		resp, err = e.exchange(ctx, "tcp", query, id, q.question)
	}
	return resp, err
}

func (e *Enforcer) exchange(ctx context.Context, network string, query []byte, id uint16, q dnsmessage.Question) ([]byte, error) {
	c, err := e.upstreamDial(ctx, network, e.upstream)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	defer context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })()
	if network == "tcp" {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(query))), query...)); err != nil {
			return nil, err
		}
		var n [2]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return nil, err
		}
		resp := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			return nil, err
		}
		if !isAnswerTo(resp, id, q) {
			return nil, errors.New("the upstream answered another query")
		}
		return resp, nil
	}
	if _, err := c.Write(query); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<16)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if isAnswerTo(buf[:n], id, q) { // anything else is stray or forged: wait on
			return bytes.Clone(buf[:n]), nil
		}
	}
}

// isAnswerTo reports whether resp is the response to query id asking q.
func isAnswerTo(resp []byte, id uint16, q dnsmessage.Question) bool {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil || !h.Response || h.ID != id {
		return false
	}
	rq, err := p.Question()
	return err == nil && rq.Type == q.Type && rq.Class == q.Class && normalizeName(rq.Name.String()) == normalizeName(q.Name.String())
}

// answerAddrs returns the A and AAAA records of resp's answer section
// that belong to qname or to a name its CNAME chain leads to, and the
// least TTL of them.
func answerAddrs(resp []byte, qname string) ([]netip.Addr, time.Duration) {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil || h.RCode != dnsmessage.RCodeSuccess || p.SkipAllQuestions() != nil {
		return nil, 0
	}
	records, cnames := answerRecords(&p)
	chain := map[string]bool{qname: true}
	for n := qname; ; {
		next, ok := cnames[n]
		if !ok || chain[next] {
			break
		}
		chain[next], n = true, next
	}
	var addrs []netip.Addr
	ttl := uint32(1<<32 - 1)
	for _, r := range records {
		if chain[r.owner] {
			addrs, ttl = append(addrs, r.addr.Unmap()), min(ttl, r.ttl)
		}
	}
	return addrs, time.Duration(ttl) * time.Second
}

type addrRecord struct {
	owner string
	addr  netip.Addr
	ttl   uint32
}

// answerRecords reads the answer section p is at: its address records,
// and its CNAMEs as a map from owner to target. A malformed record ends it.
func answerRecords(p *dnsmessage.Parser) ([]addrRecord, map[string]string) {
	var records []addrRecord
	cnames := make(map[string]string)
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			return records, cnames
		}
		owner := normalizeName(rh.Name.String())
		var addr netip.Addr
		switch rh.Type {
		case dnsmessage.TypeA:
			var r dnsmessage.AResource
			if r, err = p.AResource(); err == nil {
				addr = netip.AddrFrom4(r.A)
			}
		case dnsmessage.TypeAAAA:
			var r dnsmessage.AAAAResource
			if r, err = p.AAAAResource(); err == nil {
				addr = netip.AddrFrom16(r.AAAA)
			}
		case dnsmessage.TypeCNAME:
			var r dnsmessage.CNAMEResource
			if r, err = p.CNAMEResource(); err == nil {
				cnames[owner] = normalizeName(r.CNAME.String())
			}
		default:
			err = p.SkipAnswer()
		}
		if err != nil {
			return records, cnames
		}
		if addr.IsValid() {
			records = append(records, addrRecord{owner, addr, rh.TTL})
		}
	}
}
