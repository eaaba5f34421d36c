package fakenet

import (
	"crypto/x509"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// EnvRequire makes Start fail instead of skipping when the fake internet
// cannot be made (no root, no ip command).
const EnvRequire = "SBX_REQUIRE_FAKENET"

// domains are the test domains, in address order from 10.251.N.10.
var domains = []string{
	"allowed.test",
	"www.allowed.test",
	"api.allowed.test",
	"other.test",
	"denied.test",
	"tunnel.denied.test",
}

// Net is a fake internet reachable from this host: a network namespace with
// a veth pair to the host namespace, test domains each on its own address,
// HTTP (:80) and HTTPS (:443, certificates from a test CA) servers on each,
// a UDP echo server (:7) on each, and a DNS server answering the test
// domains.
type Net struct {
	Namespace string         // its name (under /run/netns)
	HostAddr  netip.Addr     // the host end of the veth
	Prefix    netip.Prefix   // the whole block routed to it from the host (10.251.N.0/24)
	DNS       netip.AddrPort // DNS server (UDP and TCP 53) in the namespace
	CAPEM     []byte         // the test CA certificate, PEM
	CAPool    *x509.CertPool // a pool holding only the test CA

	hosts    map[string]netip.Addr
	byAddr   map[netip.Addr]string
	dns      *dnsServer
	received sync.Map // header name -> the value /header last got
}

// Received returns the value of header the server got in the last request
// to /header?name=HEADER, on any domain ("" and false if none came).
func (n *Net) Received(header string) (string, bool) {
	v, ok := n.received.Load(http.CanonicalHeaderKey(header))
	if !ok {
		return "", false
	}
	return v.(string), true
}

// Addr returns the address of the test domain name; it panics when name is
// not one (a test helper's mistake).
func (n *Net) Addr(name string) netip.Addr {
	a, ok := n.hosts[canonical(name)]
	if !ok {
		panic(fmt.Sprintf("fakenet: unknown test domain %q (known: %s)", name, strings.Join(n.Names(), ", ")))
	}
	return a
}

// Names returns the test domains, sorted.
func (n *Net) Names() []string {
	names := make([]string, 0, len(n.hosts))
	for name := range n.hosts {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Queries returns how many DNS queries for name (any type, case and
// trailing dot ignored) the DNS server has received.
func (n *Net) Queries(name string) int { return n.dns.queries(canonical(name)) }

// canonical is a domain name as the maps key it: lower case, no final dot.
func canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

var (
	startMu  sync.Mutex
	started  *Net
	startErr error
	// blockLock holds the flock on the block for the process's life; it
	// must stay referenced, or the finalizer of *os.File closes it.
	//lint:ignore U1000 written only: holding it is its use
	blockLock *os.File
)

// Start returns the fake internet of this process, making it on first use;
// later calls return the same *Net. It needs root and the ip command: when
// they are missing it skips t, or fails it under SBX_REQUIRE_FAKENET=1.
// Its listeners are bound before it returns, so nothing needs to wait.
func Start(t testing.TB) *Net {
	t.Helper()
	if reason := unavailable(); reason != "" {
		harness.Unavailable(t, EnvRequire, "fakenet: %s", reason)
	}
	startMu.Lock()
	defer startMu.Unlock()
	if started == nil && startErr == nil {
		started, startErr = start()
	}
	if startErr != nil {
		t.Fatalf("fakenet: %v", startErr)
	}
	return started
}

// unavailable says why this machine cannot make the fake internet, or "".
func unavailable() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, veths, ports below 1024)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "needs the ip command (iproute2)"
	}
	return ""
}

func start() (*Net, error) {
	b, lock, err := claimBlock()
	if err != nil {
		return nil, err
	}
	n, err := newNet(b)
	if err != nil {
		lock.Close() // what it left is stale: the next claimer remakes it
		return nil, fmt.Errorf("making %s (%s): %w", b.namespace(), b.prefix(), err)
	}
	blockLock = lock
	return n, nil
}

// newNet makes the namespace of block b and starts its servers.
func newNet(b block) (*Net, error) {
	n := &Net{
		Namespace: b.namespace(),
		HostAddr:  b.hostAddr(),
		Prefix:    b.prefix(),
		DNS:       netip.AddrPortFrom(b.dnsAddr(), 53),
		hosts:     map[string]netip.Addr{},
		byAddr:    map[netip.Addr]string{},
	}
	for i, name := range domains {
		a := b.addr(byte(10 + i))
		n.hosts[name] = a
		n.byAddr[a] = name
	}
	n.dns = newDNSServer(n.hosts)
	c, err := makeCerts(n.hosts)
	if err != nil {
		return nil, err
	}
	n.CAPEM, n.CAPool = c.caPEM, c.pool
	if err := b.build(n.hosts); err != nil {
		return nil, err
	}
	var ls *listeners
	err = inNamespace(b.nsPath(), func() error {
		var err error
		ls, err = listen(n)
		return err
	})
	if err != nil {
		return nil, err
	}
	serve(n, c, ls)
	return n, nil
}

// Attach links the fake internet to the network namespace ns (a name under
// /run/netns, such as a harness's "remote host"), for t's life: a veth pair
// of 10.249.N.0/30 (N: this fake internet's block), a route there to
// Prefix, and routes here back to each of routes (the namespace's own
// networks, such as its containers' bridge) through it. Traffic stays
// between the two namespaces.
func (n *Net) Attach(t testing.TB, ns string, routes ...netip.Prefix) {
	t.Helper()
	b := block(n.Prefix.Addr().As4()[2])
	here, there := "sbxfa-"+strconv.Itoa(int(b)), "sbxfb-"+strconv.Itoa(int(b))
	local := netip.AddrFrom4([4]byte{10, 249, byte(b), 1})
	remote := local.Next()
	nsPath := filepath.Join(netnsDir, ns)
	// A link left by an earlier run of this block goes first.
	inNamespace(b.nsPath(), func() error {
		if linkExists(here) {
			return ip("link del " + here)
		}
		return nil
	})
	err := inNamespace(b.nsPath(), func() error {
		return ip(
			fmt.Sprintf("link add %s type veth peer name %s netns %s", here, there, ns),
			fmt.Sprintf("addr add %s dev %s", netip.PrefixFrom(local, 30), here),
			"link set "+here+" up",
		)
	})
	if err == nil {
		err = inNamespace(nsPath, func() error {
			return ip(fmt.Sprintf("addr add %s dev %s", netip.PrefixFrom(remote, 30), there), "link set "+there+" up")
		})
	}
	if err == nil {
		err = inNamespace(b.nsPath(), func() error { return waitRunning(here, linkUpTimeout) })
	}
	if err == nil {
		err = inNamespace(nsPath, func() error {
			if err := waitRunning(there, linkUpTimeout); err != nil {
				return err
			}
			return ip(fmt.Sprintf("route replace %s via %s", n.Prefix, local))
		})
	}
	if err == nil {
		err = inNamespace(b.nsPath(), func() error {
			var cmds []string
			for _, r := range routes {
				cmds = append(cmds, fmt.Sprintf("route replace %s via %s", r, remote))
			}
			if len(cmds) == 0 {
				return nil
			}
			return ip(cmds...)
		})
	}
	t.Cleanup(func() {
		inNamespace(b.nsPath(), func() error { return ip("link del " + here) })
	})
	if err != nil {
		t.Fatalf("fakenet: attaching %s to %s: %v", n.Namespace, ns, err)
	}
}
