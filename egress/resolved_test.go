package egress

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestResolvedAddrsExpire(t *testing.T) {
	c := newResolvedAddrs()
	now := time.Now()
	c.now = func() time.Time { return now }
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	c.add("short.test", []netip.Addr{a}, time.Second)
	c.add("long.test", []netip.Addr{b}, time.Hour)
	c.add("mapped.test", []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.1")}, time.Second)

	require.True(t, c.has("short.test", a))
	require.True(t, c.has("mapped.test", a), "IPv4-mapped answers count as IPv4")
	require.True(t, c.has("short.test", netip.MustParseAddr("::ffff:192.0.2.1")))
	require.False(t, c.has("short.test", b))
	require.False(t, c.has("other.test", a))

	now = now.Add(4 * time.Minute)
	require.True(t, c.has("short.test", a), "a short TTL counts as five minutes")
	now = now.Add(2 * time.Minute)
	require.False(t, c.has("short.test", a))
	require.True(t, c.has("long.test", b))
	now = now.Add(time.Hour)
	require.False(t, c.has("long.test", b))

	c.add("long.test", []netip.Addr{b}, time.Second) // swept the expired ones
	require.Len(t, c.names, 1)
}

func TestResolvedAddrsBounded(t *testing.T) {
	c := newResolvedAddrs()
	for i := range maxResolvedNames + 10 {
		c.add(fmt.Sprintf("n%d.test", i), []netip.Addr{netip.MustParseAddr("192.0.2.1")}, time.Hour)
	}
	require.LessOrEqual(t, len(c.names), maxResolvedNames)
	many := make([]netip.Addr, 2*maxAddrsPerName)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
	}
	c.add("many.test", many, time.Hour)
	require.Len(t, c.names["many.test"], maxAddrsPerName)
}
