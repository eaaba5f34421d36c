package lite

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/egresshost"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Egress policies (Spec.Egress) on lite.
//
// A sandbox with a policy gets a network namespace of its own with one
// veth pair: eth0 inside (the .2 of a /30 of the egress block), the host
// end outside (the .1). On the host end listens the sandbox's enforcer,
// `sbxd egress`, a process in the host's namespaces that the sandbox
// cannot see, signal or reconfigure: its DNS resolver (port 53) and its
// transparent TCP proxy (see package egress). An nftables table of the
// host's, named after the sandbox's index, sends every DNS query the
// sandbox makes to the resolver and every TCP connection to the proxy,
// lets nothing else from the veth reach the host, and forwards nothing:
// UDP and other protocols go nowhere. The sandbox has no CAP_NET_ADMIN,
// and even with it could only change its own namespace, which holds no
// rule that matters.
//
// The enforcer's controls are a unix socket in the sandbox's folder
// (package egressctl): SetEgress sends the new policy there. Denied
// attempts go to a file beside it.
//
// Indexes are claimed machine-wide (egressRunDir/N, made with O_EXCL and
// naming the state folder and sandbox), since netns, interface and table
// names, and addresses, derive from them. The claim is made after the
// meta file and dropped last, so that teardown (which finds claims by
// sandbox) and PruneCaches (claims whose sandbox folder is gone) leave
// nothing behind whatever process dies when.

// egressRunDir holds the machine's claims of egress indexes.
var egressRunDir = "/run/sandboxkit/egress"

// DefaultEgressBlock is where the /30s of sandboxes with an egress policy
// come from (see Config.EgressBlock).
const DefaultEgressBlock = "10.252.0.0/16"

// egressNet is the network of a sandbox with a policy (meta.EgressNet).
type egressNet struct {
	Index int `json:"index"`
	// PID and Start identify the enforcer; Port is its proxy's.
	PID   int    `json:"pid,omitempty"`
	Start uint64 `json:"start,omitempty"`
	Port  int    `json:"port,omitempty"`
}

// egressClaim is the content of a claim file.
type egressClaim struct {
	StateDir string `json:"state_dir"`
	ID       string `json:"id"`
}

// egressName names index n's network namespace and host interface;
// egressTable its nftables table (family inet).
func egressName(n int) string  { return "sbxe-" + strconv.Itoa(n) }
func egressTable(n int) string { return "sbxe_" + strconv.Itoa(n) }

// egressAddrs are the host end's and the sandbox's addresses of index n.
func (b *Backend) egressAddrs(n int) (host, sbx netip.Addr, err error) {
	block, err := b.cfg.egressBlock()
	if err != nil {
		return netip.Addr{}, netip.Addr{}, err
	}
	if n >= egressSlots(block) {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("egress index %d is outside [sandbox.lite] egress_block %s", n, block)
	}
	base := block.Addr().As4()
	v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	v += uint32(n) * 4
	a := [4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	host = netip.AddrFrom4(a).Next()
	return host, host.Next(), nil
}

// egressSlots is the number of /30s of block.
func egressSlots(block netip.Prefix) int { return 1 << (30 - block.Bits()) }

// checkEgress refuses specs whose policy lite cannot enforce, and parses
// the policy.
func (b *Backend) checkEgress(spec backend.Spec) error {
	if spec.Egress == nil {
		return nil
	}
	if _, err := egress.NewPolicy(spec.Egress.Default, spec.Egress.Allow, spec.Egress.Deny); err != nil {
		return fmt.Errorf("%w: egress: %v", backend.ErrInvalidConfig, err)
	}
	if _, err := b.cfg.egressBlock(); err != nil {
		return err
	}
	switch {
	case b.userns != nil:
		return fmt.Errorf("%w: egress needs lite running as root: the enforcer's nftables rules and the sandbox's veth live in the host's network namespace", errors.ErrUnsupported)
	case cmp.Or(spec.Network, b.cfg.network()) == NetworkHost:
		return fmt.Errorf("%w: egress and network = \"host\" exclude each other: a sandbox on the host's network cannot be held to a policy (remove one)", backend.ErrInvalidConfig)
	case spec.Privileged:
		return fmt.Errorf("%w: egress and privileged exclude each other: a privileged sandbox has CAP_NET_ADMIN", backend.ErrInvalidConfig)
	}
	caps, err := capabilities(spec)
	if err != nil {
		return err
	}
	if slices.Contains(caps, "CAP_NET_ADMIN") {
		return fmt.Errorf("%w: egress: cap_add NET_ADMIN (or ALL) would let the sandbox manage its network; remove it", backend.ErrInvalidConfig)
	}
	return nil
}

// claimEgress claims the first free index for sandbox id of this backend.
func (b *Backend) claimEgress(id string) (int, error) {
	block, err := b.cfg.egressBlock()
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(egressRunDir, 0o700); err != nil {
		return 0, err
	}
	data, _ := json.Marshal(egressClaim{StateDir: b.dir, ID: id})
	for n := range egressSlots(block) {
		f, err := os.OpenFile(filepath.Join(egressRunDir, strconv.Itoa(n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		_, werr := f.Write(data)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(f.Name())
			return 0, werr
		}
		return n, nil
	}
	return 0, fmt.Errorf("all %d egress networks of [sandbox.lite] egress_block %s are in use (a larger block, or sbx gc)", egressSlots(block), block)
}

// egressClaims lists the machine's claims by index.
func egressClaims() (map[int]egressClaim, error) {
	ents, err := os.ReadDir(egressRunDir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		// None made, or not by this user: rootless lite makes none.
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	claims := map[int]egressClaim{}
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var c egressClaim
		data, err := os.ReadFile(filepath.Join(egressRunDir, e.Name()))
		if err != nil {
			continue
		}
		// A claim cut short by a crash names nobody: its resources are
		// anyone's to remove.
		_ = json.Unmarshal(data, &c)
		claims[n] = c
	}
	return claims, nil
}

// setupEgress makes sandbox m's network: namespace, veth, enforcer and
// nftables rules, recording them in m as it goes.
func (b *Backend) setupEgress(ctx context.Context, m *meta, dir string) error {
	n, err := b.claimEgress(m.ID)
	if err != nil {
		return err
	}
	if err := b.update(m, func(cur *meta) { cur.EgressNet = &egressNet{Index: n} }); err != nil {
		return err
	}
	host, sbx, err := b.egressAddrs(n)
	if err != nil {
		return err
	}
	if err := makeEgressLink(egressName(n), host, sbx); err != nil {
		return fmt.Errorf("egress network: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, egressResolv), fmt.Appendf(nil, "nameserver %s\n", host), 0o644); err != nil {
		return err
	}
	if err := egressctl.WritePolicy(egressctl.PathsIn(dir).Policy, egressctl.Policy(*m.Egress)); err != nil {
		return err
	}
	// The rules name the proxy's fixed port, so they load while the
	// enforcer starts; until it listens, the sandbox (not started yet
	// anyway) would reach nothing.
	pol, err := egress.NewPolicy(m.Egress.Default, m.Egress.Allow, m.Egress.Deny)
	if err != nil {
		return err
	}
	rules := make(chan error, 1)
	go func() {
		err := nftApply(ctx, egressRules(n, host, egressctl.ProxyPort, pol, b.deniedAddrs(pol)))
		if err == nil && forwardsAddrs(pol) {
			err = openDockerForward(ctx)
		}
		rules <- err
	}()
	pid, start, port, err := b.startEnforcer(ctx, dir, host, egressName(n), egressctl.LogGroup(n))
	rerr := <-rules
	if err != nil {
		return fmt.Errorf("egress enforcer: %w", err)
	}
	if err := b.update(m, func(cur *meta) { cur.EgressNet = &egressNet{Index: n, PID: pid, Start: start, Port: port} }); err != nil {
		return err
	}
	if rerr != nil {
		return fmt.Errorf("egress rules: %w", rerr)
	}
	return nil
}

// Files of a sandbox with a policy, in its folder, besides the
// enforcer's (egressctl.PathsIn), and where network namespaces are bound.
const (
	egressResolv   = "resolv.conf"
	egressNetnsDir = "/run/netns"
)

// makeEgressLink makes network namespace name (in /run/netns) with eth0
// at sbx/30, its default route via host, and the host end name at
// host/30.
func makeEgressLink(name string, host, sbx netip.Addr) error {
	ns, err := newNamedNetns(name)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer ns.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s: %w", name, err)
	}
	hostLink, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(hostLink, &netlink.Addr{IPNet: ipNet(host, 30)}); err != nil {
		return fmt.Errorf("address of %s: %w", name, err)
	}
	if err := netlink.LinkSetUp(hostLink); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, ifname := range []string{"lo", "eth0"} {
		l, err := h.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("%s in %s: %w", ifname, name, err)
		}
		if ifname == "eth0" {
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipNet(sbx, 30)}); err != nil {
				return fmt.Errorf("address of eth0 in %s: %w", name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return err
		}
		if ifname == "eth0" {
			if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IP(host.AsSlice())}); err != nil {
				return fmt.Errorf("default route in %s: %w", name, err)
			}
		}
	}
	return nil
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, 32)}
}

// newNamedNetns makes a network namespace bound at /run/netns/name
// without entering it: the thread that makes it goes back to this
// process's namespace, or dies with it if it cannot.
func newNamedNetns(name string) (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- result{err: err}
			runtime.UnlockOSThread()
			return
		}
		defer orig.Close()
		ns, err := netns.NewNamed(name)
		if serr := netns.Set(orig); serr != nil {
			// The thread is in the new namespace: it must not run other
			// goroutines. Returning while locked ends it.
			if err == nil {
				ns.Close()
			}
			ch <- result{err: fmt.Errorf("returning to the host's namespace: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ns: ns, err: err}
	}()
	r := <-ch
	return r.ns, r.err
}

// startEnforcer starts `sbxd egress` for the sandbox in dir, listening on
// host, and waits until it serves.
func (b *Backend) startEnforcer(ctx context.Context, dir string, host netip.Addr, device string, logGroup uint16) (pid int, start uint64, port int, err error) {
	upstream, err := b.cfg.egressDNS()
	if err != nil {
		return 0, 0, 0, err
	}
	logf, err := os.OpenFile(egressctl.PathsIn(dir).Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, 0, 0, err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, 0, 0, err
	}
	defer r.Close()
	args := egressctl.Args(dir, host, device, upstream, logGroup)
	if _, err := os.Stat(credentialsFile(dir)); err == nil {
		args = append(args, "--credentials", credentialsFile(dir))
	}
	cmd := exec.Command(b.sbxd, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.Dir = "/"
	// Its own session: it outlives this process, as the sandbox does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return 0, 0, 0, err
	}
	pid = cmd.Process.Pid
	start, _ = procfs.StartTime(pid)
	// Reap it if it ends while this process lives.
	go cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	r.SetReadDeadline(deadline)
	line, rerr := bufio.NewReader(r).ReadString('\n')
	if p, ok := strings.CutPrefix(strings.TrimSpace(line), "ready "); ok && rerr == nil {
		if port, err = strconv.Atoi(p); err == nil {
			return pid, start, port, nil
		}
	}
	cmd.Process.Kill()
	msg := strings.TrimSpace(tail(egressctl.PathsIn(dir).Log, 0))
	if msg == "" {
		msg = fmt.Sprint(rerr)
	}
	return 0, 0, 0, fmt.Errorf("it did not start: %s", msg)
}

// egressRules is the nftables table of index n: DNS to the resolver, TCP
// to the proxy (whose ports take nothing that comes from elsewhere than
// the sandbox: this host's processes, containers, other namespaces),
// nothing else to the host, and forwarded (masqueraded) only
// what policy's address rules allow (chain addr_, see addrRules). What it
// refuses is refused at once (a reset, an ICMP unreachable), so that
// clients fail fast instead of waiting for an answer that never comes.
func egressRules(n int, host netip.Addr, port int, policy *egress.Policy, denied []netip.Addr) string {
	t, v := egressTable(n), egressName(n)
	return fmt.Sprintf(`table inet %[1]s {
	chain prerouting_ {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "%[2]s" meta l4proto { tcp, udp } th dport 53 dnat ip to %[3]s:53
		iifname "%[2]s" meta l4proto tcp redirect to :%[4]d
	}
	chain input_ {
		type filter hook input priority filter; policy accept;
		iifname != "%[2]s" ip daddr %[3]s meta l4proto { tcp, udp } th dport { 53, %[4]d } reject
		iifname "%[2]s" ip daddr %[3]s meta l4proto { tcp, udp } th dport 53 accept
		iifname "%[2]s" ip daddr %[3]s tcp dport %[4]d accept
		iifname "%[2]s" limit rate %[6]d/second log group %[7]d
		iifname "%[2]s" meta l4proto tcp reject with tcp reset
		iifname "%[2]s" reject with icmpx type admin-prohibited
	}
	chain addr_ {
%[5]s	}
	chain forward_ {
		type filter hook forward priority filter; policy accept;
		oifname "%[2]s" ct state established,related accept
		oifname "%[2]s" drop
		iifname "%[2]s" jump addr_
		iifname "%[2]s" limit rate %[6]d/second log group %[7]d
		iifname "%[2]s" meta l4proto tcp reject with tcp reset
		iifname "%[2]s" reject with icmpx type admin-prohibited
	}
	chain postrouting_ {
		type nat hook postrouting priority srcnat; policy accept;
		iifname "%[2]s" oifname != "%[2]s" masquerade
	}
}
`, t, v, host, port, addrRules(policy, denied), egressctl.LogRate, egressctl.LogGroup(n))
}

// addrRules is the body of chain addr_: what refuses by address first
// (deny wins: the addresses denied's names resolved to, the deny address
// rules; egressctl.DenyRules), then policy's allow rules accepting (UDP
// on a rule's ports, every protocol without ports); IPv4 only. TCP never
// gets here: it goes to the proxy. The host's addresses never do either
// (traffic to them is the input chain's).
func addrRules(policy *egress.Policy, denied []netip.Addr) string {
	var b strings.Builder
	write := func(r egress.Rule, verdict string) {
		if !r.Prefix.IsValid() || !r.Prefix.Addr().Is4() {
			return
		}
		ports := ""
		if len(r.Ports) > 0 {
			var rs []string
			for _, pr := range r.Ports {
				if pr.Lo == pr.Hi {
					rs = append(rs, strconv.Itoa(int(pr.Lo)))
				} else {
					rs = append(rs, fmt.Sprintf("%d-%d", pr.Lo, pr.Hi))
				}
			}
			ports = " udp dport { " + strings.Join(rs, ", ") + " }"
		}
		fmt.Fprintf(&b, "\t\tip daddr %s%s %s\n", r.Prefix.Masked(), ports, verdict)
	}
	for _, r := range egressctl.DenyRules(egressctl.AddrRules{Policy: policy, Denied: denied}) {
		write(r, "reject with icmpx type admin-prohibited")
	}
	for _, r := range policy.Allow {
		write(r, "accept")
	}
	return b.String()
}

// deniedAddrs resolves the exact names of policy's deny rules, as the
// enforcer does (see egress.Enforcer.DeniedAddrs), when the sandbox's
// other protocols could reach their addresses (an allow address rule
// forwards them). The enforcer refuses them for TCP and keeps resolving
// them; lite's forwarding rules, which the enforcer (unprivileged) cannot
// change, get the addresses known at create and at each policy change.
func (b *Backend) deniedAddrs(policy *egress.Policy) []netip.Addr {
	if !forwardsAddrs(policy) || !slices.ContainsFunc(policy.Deny, func(r egress.Rule) bool { return r.Domain != "" && !r.Wildcard }) {
		return nil
	}
	upstream, err := b.cfg.egressDNS()
	if err != nil {
		return nil
	}
	e, err := egress.New(egress.Options{Policy: policy, Upstream: upstream})
	if err != nil {
		return nil
	}
	defer e.Close()
	return e.DeniedAddrs()
}

// forwardsAddrs reports whether policy has address rules whose traffic
// lite forwards (IPv4 ones).
func forwardsAddrs(policy *egress.Policy) bool {
	return slices.ContainsFunc(policy.Allow, func(r egress.Rule) bool { return r.Prefix.IsValid() && r.Prefix.Addr().Is4() })
}

// dockerUserRules are the rules of the chain DOCKER-USER (Docker's place
// for the host's own rules in its FORWARD chain, whose policy is drop)
// that let the egress interfaces' forwarded traffic on to the sandboxes'
// own nftables tables, which decide.
var dockerUserRules = [][]string{{"-i", "sbxe-+", "-j", "ACCEPT"}, {"-o", "sbxe-+", "-j", "ACCEPT"}}

// openDockerForward adds dockerUserRules where a Docker engine's FORWARD
// chain would drop forwarded traffic; without one, or without iptables,
// there is nothing to do.
func openDockerForward(ctx context.Context) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil
	}
	if exec.CommandContext(ctx, "iptables", "-w", "-n", "-L", "DOCKER-USER").Run() != nil {
		return nil // no such chain: no Docker FORWARD policy in the way
	}
	for _, r := range dockerUserRules {
		if exec.CommandContext(ctx, "iptables", append([]string{"-w", "-C", "DOCKER-USER"}, r...)...).Run() == nil {
			continue
		}
		if out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-I", "DOCKER-USER"}, r...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables -I DOCKER-USER %s: %v: %s", strings.Join(r, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// closeDockerForward removes dockerUserRules (once no sandbox has an
// egress network).
func closeDockerForward() {
	if _, err := exec.LookPath("iptables"); err != nil {
		return
	}
	for _, r := range dockerUserRules {
		for exec.Command("iptables", append([]string{"-w", "-D", "DOCKER-USER"}, r...)...).Run() == nil {
		}
	}
}

// nftApply loads an nftables script.
func nftApply(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeEgressNet removes index n's enforcer (when pid/start still name
// it), rules, interface and namespace; each step is a no-op when done.
func removeEgressNet(n, pid int, start uint64) error {
	if pid > 0 {
		if st, err := procfs.StartTime(pid); err == nil && st == start {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	var errs []error
	cmd := exec.Command("nft", "delete", "table", "inet", egressTable(n))
	if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("nft delete table %s: %v: %s", egressTable(n), err, strings.TrimSpace(string(out))))
	}
	name := egressName(n)
	if l, err := netlink.LinkByName(name); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("deleting interface %s: %w", name, err))
		}
	}
	if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EINVAL) {
		errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", name, err))
	} else {
		os.Remove(filepath.Join(egressNetnsDir, name))
	}
	return errors.Join(errs...)
}

// teardownEgress removes what sandbox id of this backend holds of egress
// (found by its claims, so a creator that died before recording them in
// the meta file is covered).
func (b *Backend) teardownEgress(id string, en *egressNet) error {
	claims, err := egressClaims()
	if err != nil {
		return err
	}
	for n, c := range claims {
		if c.StateDir != b.dir || c.ID != id {
			continue
		}
		var pid int
		var start uint64
		if en != nil && en.Index == n && en.PID > 0 {
			pid, start = en.PID, en.Start
		} else {
			// Its creator died before it recorded the enforcer.
			killEnforcersOf(filepath.Join(b.dir, id))
		}
		if err := removeEgressNet(n, pid, start); err != nil {
			return err
		}
		if err := os.Remove(filepath.Join(egressRunDir, strconv.Itoa(n))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// pruneEgress removes the egress networks whose sandbox folder is gone
// (its creator died before it recorded them, or the folder was removed by
// hand) and names them.
func pruneEgress(dryRun bool) ([]string, error) {
	claims, err := egressClaims()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range slices.Sorted(maps.Keys(claims)) {
		c := claims[n]
		if c.StateDir != "" && c.ID != "" && statedir.ValidID(c.ID) {
			if _, err := os.Stat(filepath.Join(c.StateDir, c.ID)); err == nil || !errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		names = append(names, "egress network "+egressName(n))
		if dryRun {
			continue
		}
		// The enforcer of a gone sandbox has no record: find it by its
		// control socket's folder in its command line.
		killEnforcersOf(filepath.Join(c.StateDir, c.ID))
		if err := removeEgressNet(n, 0, 0); err != nil {
			return names, err
		}
		if err := os.Remove(filepath.Join(egressRunDir, strconv.Itoa(n))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return names, err
		}
	}
	if !dryRun {
		// The FORWARD rules for egress interfaces go with the last one.
		if left, err := egressClaims(); err == nil && len(left) == 0 {
			closeDockerForward()
			// A sandbox claimed since needs them (its own rules decide
			// what passes).
			if now, err := egressClaims(); err == nil && len(now) > 0 {
				openDockerForward(context.Background())
			}
		}
	}
	return names, nil
}

// killEnforcersOf kills the `sbxd egress` processes whose control socket
// is in dir.
func killEnforcersOf(dir string) {
	if dir == "" || dir == "." {
		return
	}
	want := egressctl.PathsIn(dir).Control
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) > 1 && args[1] == "egress" && slices.Contains(args, want) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// egressInput is what the OCI config of sandbox m (in dir) needs of its
// egress network.
func egressInput(m *meta, dir string) (in struct{ netns, resolvConf string }) {
	if m.EgressNet == nil {
		return in
	}
	in.netns = filepath.Join(egressNetnsDir, egressName(m.EgressNet.Index))
	in.resolvConf = filepath.Join(dir, egressResolv)
	return in
}

func cloneEgress(e backend.Egress) backend.Egress {
	return backend.Egress{Default: e.Default, Allow: slices.Clone(e.Allow), Deny: slices.Clone(e.Deny)}
}

// SetEgress replaces sandbox id's policy (backend.EgressController).
func (b *Backend) SetEgress(ctx context.Context, id string, policy backend.Egress) error {
	sb, m, err := b.egressSandbox(ctx, "set egress", id)
	if err != nil {
		return err
	}
	pol, err := egress.NewPolicy(policy.Default, policy.Allow, policy.Deny)
	if err != nil {
		return sb.opErr("set egress", fmt.Errorf("%w: egress: %v", backend.ErrInvalidConfig, err))
	}
	t := egressTable(m.EgressNet.Index)
	script := fmt.Sprintf("flush chain inet %[1]s addr_\ntable inet %[1]s {\n\tchain addr_ {\n%[2]s\t}\n}\n", t, addrRules(pol, b.deniedAddrs(pol)))
	if err := nftApply(ctx, script); err != nil {
		return sb.opErr("set egress", err)
	}
	if forwardsAddrs(pol) {
		if err := openDockerForward(ctx); err != nil {
			return sb.opErr("set egress", err)
		}
	}
	if err := egressctl.SetPolicy(ctx, egressctl.PathsIn(sb.dir).Control, egressctl.Policy(policy)); err != nil {
		return sb.opErr("set egress", err)
	}
	p := cloneEgress(policy)
	if err := b.update(m, func(cur *meta) { cur.Egress = &p }); err != nil {
		return sb.opErr("set egress", err)
	}
	return nil
}

// EgressStatus returns sandbox id's policy and latest denials
// (backend.EgressController).
func (b *Backend) EgressStatus(ctx context.Context, id string) (backend.EgressStatus, error) {
	sb, m, err := b.egressSandbox(ctx, "egress status", id)
	if err != nil {
		return backend.EgressStatus{}, err
	}
	ds, err := egressctl.ReadDenials(egressctl.PathsIn(sb.dir).Denials, maxDenialsShown)
	if err != nil {
		return backend.EgressStatus{}, sb.opErr("egress status", err)
	}
	return backend.EgressStatus{Policy: cloneEgress(*m.Egress), Denials: egresshost.Denials(ds)}, nil
}

// maxDenialsShown bounds the denials EgressStatus returns.
const maxDenialsShown = 200

// egressSandbox finds sandbox id and its record, which must have a policy.
func (b *Backend) egressSandbox(ctx context.Context, op, id string) (*Sandbox, *meta, error) {
	got, err := b.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	sb := got.(*Sandbox)
	m, err := sb.meta()
	if err != nil {
		return nil, nil, sb.opErr(op, err)
	}
	if m.Egress == nil || m.EgressNet == nil {
		return nil, nil, sb.opErr(op, fmt.Errorf("%w: sandbox %s was made without an egress policy, so its network has no enforcer (create it with one: egress = {...} in its entry)", errors.ErrUnsupported, id))
	}
	return sb, m, nil
}
