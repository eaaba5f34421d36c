package egress

import (
	"net/netip"
	"sync"
	"time"
)

// minResolvedTTL is the least time an answer's addresses are remembered:
// programs keep using an address well past short TTLs (connection pools,
// their own caches), and refusing them then would break them.
const minResolvedTTL = 5 * time.Minute

// Bounds on the memory a sandbox can make the enforcer spend by resolving
// many names (any name under an allowed wildcard is a new entry).
const (
	maxResolvedNames = 1 << 16
	maxAddrsPerName  = 256
)

// resolvedAddrs remembers which addresses the enforcer's DNS answered for
// which name, until when.
type resolvedAddrs struct {
	mu        sync.Mutex
	names     map[string]map[netip.Addr]time.Time
	addrs     map[netip.Addr]map[string]time.Time // the same, by address
	lastSweep time.Time
	now       func() time.Time // time.Now; tests move it
}

func newResolvedAddrs() *resolvedAddrs {
	return &resolvedAddrs{names: make(map[string]map[netip.Addr]time.Time), addrs: make(map[netip.Addr]map[string]time.Time), now: time.Now}
}

// add remembers addrs for name (normalized) for max(ttl, minResolvedTTL).
func (c *resolvedAddrs) add(name string, addrs []netip.Addr, ttl time.Duration) {
	if len(addrs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	until := now.Add(max(ttl, minResolvedTTL))
	if now.Sub(c.lastSweep) > time.Minute || len(c.names) >= maxResolvedNames {
		c.sweep(now)
	}
	m := c.names[name]
	if m == nil {
		m = make(map[netip.Addr]time.Time)
		c.names[name] = m
	}
	for _, a := range addrs {
		if len(m) >= maxAddrsPerName {
			break
		}
		a = a.Unmap()
		if until.After(m[a]) {
			m[a] = until
			byAddr := c.addrs[a]
			if byAddr == nil {
				byAddr = make(map[string]time.Time)
				c.addrs[a] = byAddr
			}
			byAddr[name] = until
		}
	}
}

// sweep drops what has expired and, if the map is still full, a tenth of
// it, arbitrary names (so that a flood of names does not pay a sweep per
// name): connections to those are refused until they are resolved again.
func (c *resolvedAddrs) sweep(now time.Time) {
	c.lastSweep = now
	for name, m := range c.names {
		for a, until := range m {
			if !now.Before(until) {
				c.forget(name, a)
			}
		}
	}
	if len(c.names) < maxResolvedNames {
		return
	}
	for name, m := range c.names {
		if len(c.names) < maxResolvedNames*9/10 {
			break
		}
		for a := range m {
			c.forget(name, a)
		}
	}
}

// forget drops a's resolution for name from both maps.
func (c *resolvedAddrs) forget(name string, a netip.Addr) {
	delete(c.names[name], a)
	if len(c.names[name]) == 0 {
		delete(c.names, name)
	}
	delete(c.addrs[a], name)
	if len(c.addrs[a]) == 0 {
		delete(c.addrs, a)
	}
}

// anyName reports whether ip was resolved, and has not expired, for a
// name that ok accepts.
func (c *resolvedAddrs) anyName(ip netip.Addr, ok func(name string) bool) bool {
	c.mu.Lock()
	var names []string
	now := c.now()
	for name, until := range c.addrs[ip.Unmap()] {
		if now.Before(until) {
			names = append(names, name)
		}
	}
	c.mu.Unlock()
	for _, name := range names {
		if ok(name) {
			return true
		}
	}
	return false
}

// has reports whether ip was resolved for name (normalized) and has not
// expired.
func (c *resolvedAddrs) has(name string, ip netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.names[name][ip.Unmap()]
	return ok && c.now().Before(until)
}
