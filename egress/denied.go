package egress

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// A deny name rule is a claim about names, and the sandbox chooses what
// name a connection shows (its SNI, its Host header). So that a denied
// host cannot be reached at its address under another name, the enforcer
// resolves each exact name its deny rules name, itself, from its own
// upstream, while the policy lives, and refuses those addresses on the
// rule's ports whatever name the connection shows (the backend's packet
// rules get them too, through Options.OnDeniedAddrs, for other
// protocols). An address seen once stays denied while the policy lives:
// a denied host that rotates its addresses does not get its old ones back.
//
// What this cannot cover: a wildcard rule's names (they cannot be listed;
// the sandbox's own queries for them are refused, so nothing resolves
// them), and an address shared by many names (a CDN's): denying the
// name denies every name served there on the rule's ports.

// Bounds on the re-resolution of deny names.
const (
	deniedInitialWait = time.Second // how long New and SetPolicy wait for the first answers
	deniedMinRefresh  = 30 * time.Second
	deniedMaxRefresh  = 5 * time.Minute
)

// deniedAddrs is what one policy's deny name rules resolved to: for each
// address, the rules (indexes into the policy's Deny) whose names it
// belongs to. A snapshot is never changed: updates publish a new one.
type deniedAddrs struct {
	policy *Policy
	addrs  map[netip.Addr][]int
}

// match returns the name and rule that deny ip on port, if any.
func (d *deniedAddrs) match(ip netip.Addr, port uint16) (Rule, bool) {
	if d == nil {
		return Rule{}, false
	}
	for _, i := range d.addrs[ip.Unmap()] {
		if r := d.policy.Deny[i]; r.coversPort(port) {
			return r, true
		}
	}
	return Rule{}, false
}

// deniedNames lists the exact names of p's deny rules, each with the
// indexes of the rules that name it.
func deniedNames(p *Policy) map[string][]int {
	names := map[string][]int{}
	for i, r := range p.Deny {
		if r.Domain != "" && !r.Wildcard {
			names[r.Domain] = append(names[r.Domain], i)
		}
	}
	return names
}

// DeniedAddrs returns the addresses resolved for the exact names of the
// policy in force's deny rules, sorted: what those rules refuse by
// address too.
func (e *Enforcer) DeniedAddrs() []netip.Addr {
	return e.denied.Load().sorted()
}

func (d *deniedAddrs) sorted() []netip.Addr {
	if d == nil {
		return nil
	}
	return slices.SortedFunc(maps.Keys(d.addrs), netip.Addr.Compare)
}

// deniedFor returns the snapshot of p's deny names (nil when p is not
// the policy the snapshot was made for).
func (e *Enforcer) deniedFor(p *Policy) *deniedAddrs {
	if d := e.denied.Load(); d != nil && d.policy == p {
		return d
	}
	return nil
}

// snapshot builds p's snapshot from seen.
func snapshot(p *Policy, names map[string][]int, seen map[string]map[netip.Addr]bool) *deniedAddrs {
	d := &deniedAddrs{policy: p, addrs: map[netip.Addr][]int{}}
	for name, addrs := range seen {
		for a := range addrs {
			d.addrs[a] = append(d.addrs[a], names[name]...)
		}
	}
	return d
}

// resolveFirst resolves p's deny names for the first time, waiting at
// most deniedInitialWait; what the policy in force had learned of the
// same names is kept. It returns the snapshot, what was seen (which
// refreshDenied goes on from) and the answers' least TTL.
func (e *Enforcer) resolveFirst(p *Policy, names map[string][]int) (*deniedAddrs, map[string]map[netip.Addr]bool, time.Duration) {
	seen := map[string]map[netip.Addr]bool{}
	if old := e.denied.Load(); old != nil {
		for a, rules := range old.addrs {
			for _, i := range rules {
				name := old.policy.Deny[i].Domain
				if _, ok := names[name]; !ok {
					continue
				}
				if seen[name] == nil {
					seen[name] = map[netip.Addr]bool{}
				}
				seen[name][a] = true
			}
		}
	}
	var ttl time.Duration
	if len(names) > 0 {
		ctx, cancel := context.WithTimeout(e.ctx, deniedInitialWait)
		ttl = e.resolveDenied(ctx, names, seen)
		cancel()
	}
	return snapshot(p, names, seen), seen, ttl
}

// refreshDenied resolves p's deny names again and again until ctx ends,
// publishing what they resolve to while p is in force, and cutting the
// open connections that the addresses it learns deny.
func (e *Enforcer) refreshDenied(ctx context.Context, p *Policy, names map[string][]int, seen map[string]map[netip.Addr]bool, ttl time.Duration) {
	for {
		// Jittered, so that many enforcers do not ask together; soon
		// again after a round that got nothing (a slow upstream).
		wait := min(max(ttl, deniedMinRefresh), deniedMaxRefresh)
		if ttl == 0 {
			wait = deniedInitialWait
		}
		wait += time.Duration(rand.Int64N(int64(wait/10) + 1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		before := len(snapshot(p, names, seen).addrs)
		ttl = e.resolveDenied(ctx, names, seen)
		if ctx.Err() != nil {
			return
		}
		d := snapshot(p, names, seen)
		if len(d.addrs) == before {
			continue
		}
		e.mu.Lock()
		if e.closed || e.policy.Load() != p {
			e.mu.Unlock()
			return
		}
		e.denied.Store(d)
		cut, reasons := e.recheck(p)
		e.mu.Unlock()
		e.cut(cut, reasons)
		e.notifyDenied(p, e.DeniedAddrs())
	}
}

// resolveDenied asks the upstream for the A and AAAA records of names,
// adding what it learns to seen (bounded per name), and returns the least
// TTL of the answers (an answer without records counts as
// deniedMinRefresh; 0: no answer came).
func (e *Enforcer) resolveDenied(ctx context.Context, names map[string][]int, seen map[string]map[netip.Addr]bool) time.Duration {
	type answer struct {
		name     string
		addrs    []netip.Addr
		ttl      time.Duration
		answered bool
	}
	ch := make(chan answer)
	n := 0
	for name := range names {
		for _, t := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			n++
			go func() {
				addrs, ttl, err := e.lookup(ctx, name, t)
				if err != nil && ctx.Err() == nil {
					e.log.Warn("egress: resolving a denied name", "name", name, "type", t, "err", err)
				}
				ch <- answer{name, addrs, ttl, err == nil}
			}()
		}
	}
	var least time.Duration
	for range n {
		a := <-ch
		if !a.answered {
			continue
		}
		if len(a.addrs) == 0 {
			a.ttl = deniedMinRefresh
		}
		if least == 0 || a.ttl < least {
			least = a.ttl
		}
		m := seen[a.name]
		if m == nil {
			m = map[netip.Addr]bool{}
			seen[a.name] = m
		}
		for _, addr := range a.addrs {
			if len(m) < maxAddrsPerName {
				m[addr.Unmap()] = true
			}
		}
	}
	return least
}

// lookup asks the upstream for name's records of type t.
func (e *Enforcer) lookup(ctx context.Context, name string, t dnsmessage.Type) ([]netip.Addr, time.Duration, error) {
	qname, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, 0, err
	}
	q := dnsQuery{question: dnsmessage.Question{Name: qname, Type: t, Class: dnsmessage.ClassINET}, hasQuestion: true}
	id := uint16(rand.Uint32())
	query := q.build(dnsmessage.Header{ID: id, RecursionDesired: true})
	if query == nil {
		return nil, 0, errors.New("packing the query")
	}
	ctx, cancel := context.WithTimeout(ctx, e.upstreamTimeout)
	defer cancel()
	resp, err := e.exchange(ctx, "udp", query, id, q.question)
	if err == nil && resp[2]&0x02 != 0 { // TC
		resp, err = e.exchange(ctx, "tcp", query, id, q.question)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("asking %s: %w", e.upstream, err)
	}
	addrs, ttl := answerAddrs(resp, name)
	return addrs, ttl, nil
}

// notifyDenied tells the backend's hook the addresses p's deny names
// stand for now.
func (e *Enforcer) notifyDenied(p *Policy, addrs []netip.Addr) {
	if e.onDeniedAddrs == nil {
		return
	}
	e.hookMu.Lock()
	defer e.hookMu.Unlock()
	if e.policy.Load() != p {
		return // the newer policy's own call comes (or came)
	}
	if err := e.onDeniedAddrs(p, addrs); err != nil {
		e.log.Warn("egress: applying the denied names' addresses", "err", err)
	}
}
