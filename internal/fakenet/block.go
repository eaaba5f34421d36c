package fakenet

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const (
	lockDir       = "/run/sandboxkit-fakenet"
	maxBlock      = 250
	nsPrefix      = "sbx-fakenet-"
	vethPrefix    = "sbxfn-"
	linkUpTimeout = 5 * time.Second
)

// block is the share of 10.251.0.0/16 one process claims: 10.251.N.0/24.
type block int

func (b block) namespace() string { return nsPrefix + strconv.Itoa(int(b)) }
func (b block) nsPath() string    { return filepath.Join(netnsDir, b.namespace()) }
func (b block) veth() string      { return vethPrefix + strconv.Itoa(int(b)) }
func (b block) lockPath() string  { return filepath.Join(lockDir, strconv.Itoa(int(b))+".lock") }
func (b block) addr(i byte) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 251, byte(b), i})
}
func (b block) prefix() netip.Prefix { return netip.PrefixFrom(b.addr(0), 24) }
func (b block) hostAddr() netip.Addr { return b.addr(1) }
func (b block) nsAddr() netip.Addr   { return b.addr(2) }
func (b block) dnsAddr() netip.Addr  { return b.addr(53) }

// lock takes the block's flock without waiting. It returns nil, nil when
// another process holds it. The lock lasts as long as the file stays open.
func (b block) lock() (*os.File, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(b.lockPath(), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			break
		}
	}
	switch {
	case err == nil:
		return f, nil
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, nil
	default:
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", b.lockPath(), err)
	}
}

// claimBlock locks the first free block; the caller keeps the file open for
// as long as it uses the block.
func claimBlock() (block, *os.File, error) {
	for b := block(1); b <= maxBlock; b++ {
		f, err := b.lock()
		if err != nil {
			return 0, nil, err
		}
		if f != nil {
			return b, f, nil
		}
	}
	return 0, nil, fmt.Errorf("all %d blocks are taken (every %s/N.lock is held by a live process)", maxBlock, lockDir)
}

// remove deletes the block's veth pair and namespace where they exist. The
// veth goes first, synchronously: the namespace itself may outlive its name
// for a while, and a veth inside it would keep the host end's name taken.
func (b block) remove() error {
	var errs []error
	if linkExists(b.veth()) {
		errs = append(errs, ip("link del "+b.veth()))
	}
	if _, err := os.Lstat(b.nsPath()); err == nil {
		errs = append(errs, ip("netns del "+b.namespace()))
	}
	return errors.Join(errs...)
}

// build makes the block's namespace from scratch (removing what a dead
// process left): the veth pair, the addresses in hosts plus the DNS
// server's, lo, and the default route back to the host.
func (b block) build(hosts map[string]netip.Addr) error {
	if err := b.remove(); err != nil {
		return fmt.Errorf("removing the stale %s: %w", b.namespace(), err)
	}
	if err := ip("netns add " + b.namespace()); err != nil {
		return err
	}
	err := ip(
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", b.veth(), b.namespace()),
		fmt.Sprintf("addr add %s dev %s", netip.PrefixFrom(b.hostAddr(), 24), b.veth()),
		"link set "+b.veth()+" up",
	)
	if err != nil {
		return err
	}
	cmds := []string{
		"link set lo up",
		fmt.Sprintf("addr add %s dev eth0", netip.PrefixFrom(b.nsAddr(), 24)),
		fmt.Sprintf("addr add %s/32 dev eth0", b.dnsAddr()),
	}
	for _, a := range sortedAddrs(hosts) {
		cmds = append(cmds, fmt.Sprintf("addr add %s/32 dev eth0", a))
	}
	cmds = append(cmds, "link set eth0 up")
	if err := inNamespace(b.nsPath(), func() error { return ip(cmds...) }); err != nil {
		return err
	}
	// The veth's carrier is up now, but each end only transmits once the
	// kernel's linkwatch work has run for it (shortly after; until then its
	// packets are dropped). That work marks the link running and enables
	// transmission under the RTNL lock, which adding the route takes too:
	// once both ends run and the route is in, both pass packets.
	if err := waitRunning(b.veth(), linkUpTimeout); err != nil {
		return err
	}
	return inNamespace(b.nsPath(), func() error {
		if err := waitRunning("eth0", linkUpTimeout); err != nil {
			return err
		}
		return ip("route add default via " + b.hostAddr().String())
	})
}

func sortedAddrs(hosts map[string]netip.Addr) []netip.Addr {
	addrs := make([]netip.Addr, 0, len(hosts))
	for _, a := range hosts {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	return addrs
}

// parseBlock reads N from name = prefix+N, accepting only the names
// block.namespace and block.veth make.
func parseBlock(name, prefix string) (block, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxBlock || strconv.Itoa(n) != s {
		return 0, false
	}
	return block(n), true
}

// Prune removes the namespaces sbx-fakenet-N and veths sbxfn-N whose block
// no live process holds (its lock is free), and leaves the others. It is
// for cleanup scripts; tests need not call it, since a claimer remakes a
// stale block anyway.
func Prune() error {
	found := map[block]bool{}
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listing network namespaces: %w", err)
	}
	for _, e := range entries {
		if b, ok := parseBlock(e.Name(), nsPrefix); ok {
			found[b] = true
		}
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	for _, ifi := range ifaces {
		if b, ok := parseBlock(ifi.Name, vethPrefix); ok {
			found[b] = true
		}
	}
	var errs []error
	for _, b := range slices.Sorted(maps.Keys(found)) {
		f, err := b.lock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if f == nil {
			continue // a live process's
		}
		if err := b.remove(); err != nil {
			errs = append(errs, fmt.Errorf("pruning %s: %w", b.namespace(), err))
		}
		f.Close()
	}
	return errors.Join(errs...)
}
