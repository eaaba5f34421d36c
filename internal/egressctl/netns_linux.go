package egressctl

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/egress"
)

// An enforcer in the sandbox's own network namespace (--in-netns: the
// Docker backends run it as a container whose namespace the sandbox's
// container joins) holds the sandbox to its policy with one nftables
// table there, loaded before the sandbox starts:
//
//   - DNS (UDP and TCP port 53, to any address) goes to its resolver and
//     every other TCP connection to its proxy, both on loopback;
//   - other protocols (UDP but DNS, ICMP, ...) leave only towards what an
//     address rule of the policy allows and no address rule denies
//     (chain addrChain, rewritten on every policy change; a rule with
//     ports covers UDP on them, one without every protocol);
//   - nothing else leaves the namespace but what the enforcer's own
//     sockets send: they carry Mark, which only a process with
//     CAP_NET_ADMIN or CAP_NET_RAW can set (the sandbox has neither);
//   - loopback traffic (including what was redirected) and the replies of
//     connections made from outside (published ports) pass.
//
// The sandbox cannot change the table (no CAP_NET_ADMIN), see or signal
// the enforcer (another PID namespace) or reach its controls (a unix
// socket in the enforcer's file system).

// Mark is the firewall mark of an in-namespace enforcer's own sockets.
const Mark = 0x53425845 // "SBXE"

// DNSPort is the in-namespace resolver's port on loopback (an unprivileged
// one: the enforcer keeps no capability but CAP_NET_ADMIN).
const DNSPort = 15053

// tableName is the in-namespace enforcer's nftables table (family inet);
// addrChain its chain of address rules.
const (
	tableName = "sandboxkit_egress"
	addrChain = "addr_out"
)

// AddrRules is what the address chain (other protocols than DNS and TCP)
// decides by: the policy's address rules, the host's addresses (refused
// unless a default-deny policy's allow rule names them, as the proxy's
// guard does for TCP), and the addresses the policy's deny names resolve
// to (refused on the rule's ports, see egress.Enforcer.DeniedAddrs).
type AddrRules struct {
	Policy *egress.Policy
	Host   []netip.Prefix
	Denied []netip.Addr
}

// installRules loads the table into the current network namespace,
// replacing one there is.
func installRules(proxyPort, dnsPort uint16, rules AddrRules) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("loopback interface: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	// Adding then deleting makes the delete succeed whether or not an
	// earlier enforcer left the table; one batch, so there is no moment
	// without rules once they exist.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	drop := nftables.ChainPolicyDrop
	// Before the engine's own NAT (its embedded DNS server's rules are at
	// the usual -100): the sandbox's DNS comes here whatever address it
	// asks.
	nat := c.AddChain(&nftables.Chain{Name: "nat_out", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityRef(-150)})
	filter := c.AddChain(&nftables.Chain{Name: "filter_out", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	marked := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(Mark)},
	}
	ipv4 := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
	proto := func(p byte) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
		}
	}
	dport := func(port uint16) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		}
	}
	redirect := func(port uint16) []expr.Any {
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
			&expr.Redir{RegisterProtoMin: 1},
		}
	}
	loopbackDst := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
	}
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	rule := func(ch *nftables.Chain, parts ...[]expr.Any) {
		var exprs []expr.Any
		for _, p := range parts {
			exprs = append(exprs, p...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
	v := func(e expr.Any) []expr.Any { return []expr.Any{e} }

	rule(nat, marked, v(accept))
	rule(nat, ipv4, proto(unix.IPPROTO_UDP), dport(53), redirect(dnsPort))
	rule(nat, ipv4, proto(unix.IPPROTO_TCP), dport(53), redirect(dnsPort))
	rule(nat, ipv4, loopbackDst, v(accept))
	rule(nat, ipv4, proto(unix.IPPROTO_TCP), redirect(proxyPort))

	rule(filter, marked, v(accept))
	// What the NAT chain redirected: the hook's output interface is still
	// the one routed to before (eth0), the destination is loopback's.
	rule(filter, ipv4, loopbackDst, v(accept))
	rule(filter, []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIF, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uint32(lo.Index))},
	}, v(accept))
	zero := []byte{0, 0, 0, 0}
	rule(filter, []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: zero},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: zero},
	}, v(accept))
	addr := c.AddChain(&nftables.Chain{Name: addrChain, Table: t})
	addAddrRules(c, t, addr, rules)
	rule(filter, v(&expr.Verdict{Kind: expr.VerdictJump, Chain: addrChain}))
	// What the policy refuses now is logged for the enforcer to record,
	// and refused at once (a reset for TCP, an ICMP unreachable for the
	// rest), so that the client fails fast instead of waiting it out.
	rule(filter, []expr.Any{
		&expr.Limit{Type: expr.LimitTypePkts, Rate: LogRate, Unit: expr.LimitTimeSecond, Burst: LogRate},
		&expr.Log{Key: 1 << unix.NFTA_LOG_GROUP, Group: NetnsLogGroup},
	})
	rule(filter, proto(unix.IPPROTO_TCP), v(&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}))
	rule(filter, v(rejectUnreach))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("loading the nftables rules: %w", err)
	}
	return nil
}

// rejectUnreach refuses a packet with an ICMP (or ICMPv6) "administratively
// prohibited" unreachable.
var rejectUnreach = &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}

// setAddrRules replaces the address rules' chain with rules'.
func setAddrRules(rules AddrRules) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	ch := &nftables.Chain{Name: addrChain, Table: t}
	c.FlushChain(ch)
	addAddrRules(c, t, ch, rules)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("loading the address rules: %w", err)
	}
	return nil
}

// addAddrRules adds rules to chain ch: the denied names' addresses and
// the deny rules refuse first (deny wins), then the host's addresses
// unless the default is deny (where an allow rule may name them), then
// allow rules accept; the caller's chain refuses what returns.
func addAddrRules(c *nftables.Conn, t *nftables.Table, ch *nftables.Chain, rules AddrRules) {
	add := func(match []expr.Any, ports []egress.PortRange, verdict expr.Any) {
		if len(ports) == 0 {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(slices.Clone(match), verdict)})
			return
		}
		for _, pr := range ports {
			exprs := append(slices.Clone(match),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: binaryutil.BigEndian.PutUint16(pr.Lo), ToData: binaryutil.BigEndian.PutUint16(pr.Hi)},
				verdict)
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
		}
	}
	deny := DenyRules(rules)
	for _, d := range deny {
		add(prefixMatch(d.Prefix), d.Ports, rejectUnreach)
	}
	for _, r := range rules.Policy.Allow {
		if r.Prefix.IsValid() {
			add(prefixMatch(r.Prefix), r.Ports, &expr.Verdict{Kind: expr.VerdictAccept})
		}
	}
}

// DenyRules lists what rules refuse by address, in order: the denied
// names' addresses (on their rules' ports), the deny address rules, and
// the host's addresses unless the policy's default is deny.
func DenyRules(rules AddrRules) []egress.Rule {
	var out []egress.Rule
	for _, a := range rules.Denied {
		for _, r := range rules.Policy.Deny {
			if r.Domain != "" && !r.Wildcard {
				// Which rule named it is the enforcer's to know; the
				// ports of every exact deny name rule are the safe side.
				out = append(out, egress.Rule{Prefix: netip.PrefixFrom(a, a.BitLen()), Ports: r.Ports})
			}
		}
	}
	for _, r := range rules.Policy.Deny {
		if r.Prefix.IsValid() {
			out = append(out, r)
		}
	}
	if rules.Policy.Default != egress.Deny {
		for _, p := range rules.Host {
			out = append(out, egress.Rule{Prefix: p})
		}
	}
	return out
}

// prefixMatch matches packets to an address of p.
func prefixMatch(p netip.Prefix) []expr.Any {
	p = p.Masked()
	proto, off, size := byte(unix.NFPROTO_IPV4), uint32(16), 4
	if p.Addr().Is6() {
		proto, off, size = unix.NFPROTO_IPV6, 24, 16
	}
	mask := net.CIDRMask(p.Bits(), size*8)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: uint32(size)},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(size), Mask: mask, Xor: make([]byte, size)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
	}
}

// listenConfig makes listeners bound to device ("": any), so that they
// take nothing that arrives on another interface (bound while root).
func listenConfig(device string) *net.ListenConfig {
	if device == "" {
		return &net.ListenConfig{}
	}
	return &net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.BindToDevice(int(fd), device)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("binding to interface %s: %w", device, serr)
		}
		return nil
	}}
}

// gateways returns the gateways of this namespace's routes (IPv4, from
// /proc/net/route): in a container's namespace, addresses of the host.
func gateways() []netip.Prefix {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] == "Iface" {
			continue
		}
		v, err := strconv.ParseUint(f[2], 16, 32)
		if err != nil || v == 0 {
			continue
		}
		// Little-endian hex of the address, as the kernel prints it.
		a := netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)})
		if p := netip.PrefixFrom(a, 32); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// markedDialer is a dialer whose sockets carry Mark, so the namespace's
// rules let them out.
func markedDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, Mark)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("marking the enforcer's socket: %w", serr)
		}
		return nil
	}}
}
