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
	lastSweep time.Time
	now       func() time.Time // time.Now; tests move it
}

func newResolvedAddrs() *resolvedAddrs {
	return &resolvedAddrs{names: make(map[string]map[netip.Addr]time.Time), now: time.Now}
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
				delete(m, a)
			}
		}
		if len(m) == 0 {
			delete(c.names, name)
		}
	}
	if len(c.names) < maxResolvedNames {
		return
	}
	for name := range c.names {
		if len(c.names) < maxResolvedNames*9/10 {
			break
		}
		delete(c.names, name)
	}
}

// has reports whether ip was resolved for name (normalized) and has not
// expired.
func (c *resolvedAddrs) has(name string, ip netip.Addr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.names[name][ip.Unmap()]
	return ok && c.now().Before(until)
}
