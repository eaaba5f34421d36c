package native

import (
	"bufio"
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// The host's addresses, which an egress enforcer keeps the sandbox from
// (unless a default-deny policy's address rule names them): every address
// of every interface of the machine that runs the engine, and the
// gateways of the engine's networks. The enforcer adds the gateways of
// the sandbox's own namespace itself; the backend names the rest:
//
//   - a local engine (unix socket, no custom dialer): this machine's
//     interface addresses, read at each create (cheap, and bridges come
//     and go);
//   - an engine on another host: what WithHostAddrs reports (remotedocker
//     asks the host over SSH), remembered for hostAddrsTTL;
//   - always: the gateways of the engine's networks (one API call).

// hostAddrsTTL is how long a remote host's addresses are remembered.
const hostAddrsTTL = 5 * time.Minute

// WithHostAddrs tells the backend how to list the addresses of the host
// the engine runs on, for an engine that is not on this machine (see
// hostaddrs.go). Without it such an engine's host is known only by its
// networks' gateways.
func WithHostAddrs(list func(ctx context.Context) ([]netip.Prefix, error)) Option {
	return func(b *Backend) { b.hostAddrs.list = list }
}

// hostAddrCache remembers a remote host's addresses.
type hostAddrCache struct {
	list func(ctx context.Context) ([]netip.Prefix, error)

	mu    sync.Mutex
	addrs []netip.Prefix
	at    time.Time
}

// engineHostAddrs returns the addresses an enforcer on this engine must
// treat as the host's.
func (b *Backend) engineHostAddrs(ctx context.Context) []netip.Prefix {
	var out []netip.Prefix
	switch {
	case b.hostAddrs.list != nil:
		out = b.hostAddrs.get(ctx, b.log.Warn)
	case strings.HasPrefix(b.cli.DaemonHost(), "unix://") && b.dial == nil:
		out = egressctl.InterfaceAddrs()
	}
	nets, err := b.cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		b.log.Warn("native: listing the engine's networks for their gateways (the enforcer still knows its own)", "err", err)
	}
	for _, n := range nets {
		for _, c := range n.IPAM.Config {
			if a, ok := gatewayOf(c); ok {
				out = append(out, netip.PrefixFrom(a, a.BitLen()))
			}
		}
	}
	// In one order, so that enforcers started ahead (their arguments are
	// part of their key) stand for the next create.
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out)
}

// gatewayOf is a network's gateway: as configured, else (the default
// bridge's config may name none) the engine's choice, its subnet's first
// address.
func gatewayOf(c network.IPAMConfig) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(c.Gateway); err == nil {
		return a.Unmap(), true
	}
	if p, err := netip.ParsePrefix(c.Subnet); err == nil {
		return p.Masked().Addr().Next(), true
	}
	return netip.Addr{}, false
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

func (c *hostAddrCache) get(ctx context.Context, warn func(string, ...any)) []netip.Prefix {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.addrs != nil && time.Since(c.at) < hostAddrsTTL {
		return c.addrs
	}
	addrs, err := c.list(ctx)
	if err != nil {
		warn("native: listing the engine host's addresses (the enforcer knows only the gateways)", "err", err)
		return c.addrs // the last ones known, if any
	}
	c.addrs, c.at = addrs, time.Now()
	return addrs
}

// ParseHostAddrs reads the addresses in the output of `ip -o addr show`
// (the word after each "inet" or "inet6") or, when it has none, of
// `hostname -I` (every word), leaving out loopback's.
func ParseHostAddrs(out string) []netip.Prefix {
	var ipAddr, words []netip.Prefix
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		for i, w := range f {
			if (w == "inet" || w == "inet6") && i+1 < len(f) {
				if p, err := netip.ParsePrefix(f[i+1]); err == nil {
					ipAddr = appendAddr(ipAddr, p.Addr())
				}
			}
			if a, err := netip.ParseAddr(w); err == nil {
				words = appendAddr(words, a)
			}
		}
	}
	if len(ipAddr) > 0 {
		return ipAddr
	}
	return words
}

func appendAddr(out []netip.Prefix, a netip.Addr) []netip.Prefix {
	a = a.Unmap()
	if a.IsLoopback() {
		return out
	}
	return append(out, netip.PrefixFrom(a, a.BitLen()))
}
