package egress

import (
	"fmt"
	"net/netip"
)

// The two defaults of a policy.
const (
	Allow = "allow"
	Deny  = "deny"
)

// Policy decides what a sandbox may reach. Deny rules win over allow
// rules; Default applies when no rule matches. A Policy is not changed
// after it is made: an Enforcer swaps whole policies (SetPolicy).
type Policy struct {
	Default     string // Allow or Deny; anything else counts as Deny
	Allow, Deny []Rule
}

// NewPolicy parses a policy. def "" means Deny. Errors name the list and
// the rule (`egress allow[2] "*foo.com": ...`, a *RuleError).
func NewPolicy(def string, allow, deny []string) (*Policy, error) {
	switch def {
	case "":
		def = Deny
	case Allow, Deny:
	default:
		return nil, fmt.Errorf("egress default %q: must be %q or %q", def, Allow, Deny)
	}
	p := &Policy{Default: def}
	var err error
	if p.Allow, err = parseRules("allow", allow); err != nil {
		return nil, err
	}
	if p.Deny, err = parseRules("deny", deny); err != nil {
		return nil, err
	}
	return p, nil
}

func parseRules(list string, texts []string) ([]Rule, error) {
	rules := make([]Rule, 0, len(texts))
	for i, t := range texts {
		r, reason := parseRule(t)
		if reason != "" {
			return nil, &RuleError{List: list, Index: i, Rule: t, Reason: reason}
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// Spec returns the policy in the form NewPolicy takes, for showing it.
func (p *Policy) Spec() (def string, allow, deny []string) {
	def = Deny
	if p.Default == Allow {
		def = Allow
	}
	return def, texts(p.Allow), texts(p.Deny)
}

func texts(rules []Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.Text
	}
	return out
}

func (p *Policy) defaultAllows() bool { return p.Default == Allow }

// AllowName reports whether a connection to name:port may be made, name
// being what the connection says it is for (TLS SNI, HTTP Host). Only
// name rules count; address rules are AllowAddr's.
func (p *Policy) AllowName(name string, port uint16) bool {
	ok, _ := p.nameVerdict(normalizeName(name), port)
	return ok
}

// nameVerdict is AllowName with the reason for a refusal.
func (p *Policy) nameVerdict(name string, port uint16) (bool, string) {
	for _, r := range p.Deny {
		if r.matchesName(name, port) {
			return false, fmt.Sprintf("name %q is denied by rule %q", name, r.Text)
		}
	}
	for _, r := range p.Allow {
		if r.matchesName(name, port) {
			return true, ""
		}
	}
	if p.defaultAllows() {
		return true, ""
	}
	return false, fmt.Sprintf("name %q is not allowed", name)
}

// AllowResolve reports whether DNS may answer for name: whether some port
// of it could be allowed by AllowName. Names it refuses are never asked
// of the upstream resolver.
func (p *Policy) AllowResolve(name string) bool {
	name = normalizeName(name)
	var allowed, denied []PortRange
	if p.defaultAllows() {
		allowed = append(allowed, PortRange{1, 65535})
	}
	for _, r := range p.Allow {
		if r.coversName(name) {
			allowed = append(allowed, r.portRanges()...)
		}
	}
	for _, r := range p.Deny {
		if r.coversName(name) {
			denied = append(denied, r.portRanges()...)
		}
	}
	return someUncovered(allowed, denied)
}

// someUncovered reports whether a port of the ranges in allowed is in
// none of denied. The lowest such port of a range is its Lo or just
// after the end of a denied range, so those are the only ones to try.
func someUncovered(allowed, denied []PortRange) bool {
	covered := func(port int) bool {
		for _, d := range denied {
			if int(d.Lo) <= port && port <= int(d.Hi) {
				return true
			}
		}
		return false
	}
	for _, a := range allowed {
		if !covered(int(a.Lo)) {
			return true
		}
		for _, d := range denied {
			if next := int(d.Hi) + 1; int(a.Lo) <= next && next <= int(a.Hi) && !covered(next) {
				return true
			}
		}
	}
	return false
}

// AllowAddr reports whether ip:port may be reached by address rules
// alone: an allow address rule matches and no deny address rule does, or
// the default is allow and no deny address rule matches. It decides
// traffic that carries no name.
func (p *Policy) AllowAddr(ip netip.Addr, port uint16) bool {
	ip = ip.Unmap()
	if p.deniedAddr(ip, port) != nil {
		return false
	}
	return p.allowedAddr(ip, port) != nil || p.defaultAllows()
}

func (p *Policy) deniedAddr(ip netip.Addr, port uint16) *Rule {
	return matchAddr(p.Deny, ip, port)
}

func (p *Policy) allowedAddr(ip netip.Addr, port uint16) *Rule {
	return matchAddr(p.Allow, ip, port)
}

func matchAddr(rules []Rule, ip netip.Addr, port uint16) *Rule {
	for i := range rules {
		if rules[i].matchesAddr(ip, port) {
			return &rules[i]
		}
	}
	return nil
}

// namedDenyOn reports whether a deny name rule covers port: a default
// allow policy then has to read the name of connections to that port.
func (p *Policy) namedDenyOn(port uint16) bool {
	for _, r := range p.Deny {
		if r.Domain != "" && r.coversPort(port) {
			return true
		}
	}
	return false
}

// needsName reports whether a connection to ip:port is decided by its
// name (byAddr's addrNeedsName).
func (p *Policy) needsName(ip netip.Addr, port uint16) bool {
	v, _ := p.byAddr(ip, port)
	return v == addrNeedsName
}

// addrVerdict is what the address and port of a connection decide.
type addrVerdict int

const (
	addrNeedsName addrVerdict = iota // the name (SNI, Host) decides
	addrAllowed
	addrDenied
)

// byAddr decides a connection to ip:port (unmapped) before its first
// bytes are read. Address rules decide alone; so does a default allow
// that no deny name rule could overturn on this port.
func (p *Policy) byAddr(ip netip.Addr, port uint16) (addrVerdict, string) {
	if r := p.deniedAddr(ip, port); r != nil {
		return addrDenied, fmt.Sprintf("address %s port %d is denied by rule %q", ip, port, r.Text)
	}
	if p.allowedAddr(ip, port) != nil || (p.defaultAllows() && !p.namedDenyOn(port)) {
		return addrAllowed, ""
	}
	return addrNeedsName, ""
}
