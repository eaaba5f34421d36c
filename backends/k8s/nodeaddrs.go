package k8s

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The nodes' addresses, which a sandbox's egress enforcer keeps it from
// (unless a default-deny policy's address rule names them): a pod's
// services on the node (the kubelet, host-network pods, anything on the
// node's addresses) are the host's. The pod is not scheduled when its
// spec is made, so every node's addresses are named; the enforcer adds
// its namespace's gateway (the node's bridge) itself. Listing nodes needs
// the cluster-scoped "list nodes" permission: without it only the gateway
// is known, and that is logged once.

// nodeAddrsTTL is how long the nodes' addresses are remembered.
const nodeAddrsTTL = 5 * time.Minute

type nodeAddrCache struct {
	mu     sync.Mutex
	addrs  []netip.Prefix
	at     time.Time
	warned bool
}

// nodeAddrs returns the InternalIP and ExternalIP addresses of the
// cluster's nodes, sorted.
func (b *Backend) nodeAddrs() []netip.Prefix {
	c := &b.nodes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.After(time.Now().Add(-nodeAddrsTTL)) {
		return c.addrs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes, err := b.kube.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		if !c.warned {
			b.log.Warn("k8s: listing the nodes for their addresses (an egress enforcer then knows only its gateway as the node's)", "err", err)
			c.warned = true
		}
		return c.addrs
	}
	var out []netip.Prefix
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				ip = ip.Unmap()
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	slices.SortFunc(out, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	c.addrs, c.at = slices.Compact(out), time.Now()
	return c.addrs
}
