package egressctl

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
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

// installRules loads the table into the current network namespace,
// replacing one there is.
func installRules(proxyPort, dnsPort uint16, policy *egress.Policy) error {
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
	addAddrRules(c, t, addr, policy)
	rule(filter, v(&expr.Verdict{Kind: expr.VerdictJump, Chain: addrChain}))
	// What the policy drops now is logged for the enforcer to record.
	rule(filter, []expr.Any{
		&expr.Limit{Type: expr.LimitTypePkts, Rate: LogRate, Unit: expr.LimitTimeSecond, Burst: LogRate},
		&expr.Log{Key: 1 << unix.NFTA_LOG_GROUP, Group: NetnsLogGroup},
	})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("loading the nftables rules: %w", err)
	}
	return nil
}

// setAddrRules replaces the address rules' chain with policy's.
func setAddrRules(policy *egress.Policy) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: tableName}
	ch := &nftables.Chain{Name: addrChain, Table: t}
	c.FlushChain(ch)
	addAddrRules(c, t, ch, policy)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("loading the address rules: %w", err)
	}
	return nil
}

// addAddrRules adds policy's address rules to chain ch: deny rules drop
// first (deny wins), then allow rules accept; the caller's chain drops
// what returns.
func addAddrRules(c *nftables.Conn, t *nftables.Table, ch *nftables.Chain, policy *egress.Policy) {
	for _, list := range []struct {
		rules   []egress.Rule
		verdict expr.VerdictKind
	}{{policy.Deny, expr.VerdictDrop}, {policy.Allow, expr.VerdictAccept}} {
		for _, r := range list.rules {
			if !r.Prefix.IsValid() {
				continue
			}
			match := prefixMatch(r.Prefix)
			if len(r.Ports) == 0 {
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(match, &expr.Verdict{Kind: list.verdict})})
				continue
			}
			for _, pr := range r.Ports {
				exprs := append(slices.Clone(match),
					&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
					&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
					&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
					&expr.Range{Op: expr.CmpOpEq, Register: 1, FromData: binaryutil.BigEndian.PutUint16(pr.Lo), ToData: binaryutil.BigEndian.PutUint16(pr.Hi)},
					&expr.Verdict{Kind: list.verdict})
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
			}
		}
	}
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

// markedDial dials with markedDialer.
func markedDial(ctx context.Context, network, addr string) (net.Conn, error) {
	return markedDialer().DialContext(ctx, network, addr)
}
