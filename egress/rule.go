package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode"
)

// Rule is one entry of a policy's allow or deny list: a name, a wildcard
// name or an address prefix, with the ports it covers.
type Rule struct {
	Text     string       // as written
	Domain   string       // lower case, no trailing dot; "" for address rules
	Wildcard bool         // "*.domain": any name under Domain, not Domain itself
	Prefix   netip.Prefix // address rules (a single IP is a /32 or /128)
	Ports    []PortRange  // empty: every port
}

// PortRange is an inclusive range of ports; a single port has Lo == Hi.
type PortRange struct{ Lo, Hi uint16 }

// String returns the rule as written.
func (r Rule) String() string { return r.Text }

// matchesName reports whether the rule covers name (normalized) on port.
func (r Rule) matchesName(name string, port uint16) bool {
	return r.coversName(name) && r.coversPort(port)
}

// coversName reports whether the rule covers name on some port.
func (r Rule) coversName(name string) bool {
	switch {
	case r.Domain == "":
		return false
	case r.Wildcard:
		return len(name) > len(r.Domain) && strings.HasSuffix(name, r.Domain) && name[len(name)-len(r.Domain)-1] == '.'
	default:
		return name == r.Domain
	}
}

// matchesAddr reports whether the address rule covers ip (unmapped) on port.
func (r Rule) matchesAddr(ip netip.Addr, port uint16) bool {
	return r.Prefix.IsValid() && r.Prefix.Contains(ip) && r.coversPort(port)
}

func (r Rule) coversPort(port uint16) bool {
	if len(r.Ports) == 0 {
		return true
	}
	for _, pr := range r.Ports {
		if pr.Lo <= port && port <= pr.Hi {
			return true
		}
	}
	return false
}

// portRanges returns the ports the rule covers, every port as 1-65535.
func (r Rule) portRanges() []PortRange {
	if len(r.Ports) == 0 {
		return []PortRange{{1, 65535}}
	}
	return r.Ports
}

// ruleHelp ends every rule error, so that a refused rule shows what would
// have been accepted.
const ruleHelp = `allowed: "example.com", "*.example.com", "10.1.2.3", "10.0.0.0/8" or "2001:db8::/32", ` +
	`each optionally with ports: ":443", ":8000-8100", ":80,443", "[2001:db8::1]:443"`

// RuleError is a rule that does not parse. List and Index are set when the
// rule came from a policy's list ("allow", 2 for the third allow rule).
type RuleError struct {
	List   string
	Index  int
	Rule   string
	Reason string
}

func (e *RuleError) Error() string {
	where := "egress rule"
	if e.List != "" {
		where = fmt.Sprintf("egress %s[%d]", e.List, e.Index)
	}
	return fmt.Sprintf("%s %q: %s (%s)", where, e.Rule, e.Reason, ruleHelp)
}

// ParseRule parses a rule: "example.com" (exactly that name),
// "*.example.com" (any name under it, not example.com itself), "10.1.2.3",
// "10.0.0.0/8", "2001:db8::/32", each optionally followed by a port, a
// range or a comma-separated list of them: "example.com:443",
// "*.example.com:8000-8100", "10.0.0.0/8:53", "[2001:db8::1]:80,443".
// Names are case-insensitive and a trailing dot is dropped. Errors are
// *RuleError.
func ParseRule(s string) (Rule, error) {
	r, reason := parseRule(s)
	if reason != "" {
		return Rule{}, &RuleError{Rule: s, Reason: reason}
	}
	return r, nil
}

func parseRule(s string) (Rule, string) {
	switch {
	case s == "":
		return Rule{}, "empty"
	case strings.ContainsFunc(s, unicode.IsSpace):
		return Rule{}, "contains white space"
	case strings.Contains(s, "://"):
		return Rule{}, "a URL, not a host: write the host name alone"
	}
	host, ports, bracketed, reason := splitRule(s)
	if reason != "" {
		return Rule{}, reason
	}
	r := Rule{Text: s}
	if ports != nil {
		if r.Ports, reason = parsePorts(*ports); reason != "" {
			return Rule{}, reason
		}
	}
	if strings.Contains(host, "/") || looksLikeIP(host) {
		r.Prefix, reason = parsePrefix(host)
		if reason == "" && bracketed && !r.Prefix.Addr().Is6() {
			reason = "brackets are only for IPv6 addresses"
		}
		return r, reason
	}
	if bracketed {
		return Rule{}, "brackets are only for IPv6 addresses"
	}
	r.Domain, r.Wildcard, reason = parseDomain(host)
	return r, reason
}

// splitRule splits s into its host and, when there is a port part, the
// ports. IPv6 addresses take ports in brackets (or after a prefix
// length), so a bare one has several colons and no port.
func splitRule(s string) (host string, ports *string, bracketed bool, reason string) {
	if rest, ok := strings.CutPrefix(s, "["); ok {
		h, after, ok := strings.Cut(rest, "]")
		switch {
		case !ok:
			return "", nil, false, `"[" without "]"`
		case after == "":
			return h, nil, true, ""
		case after[0] != ':':
			return "", nil, false, fmt.Sprintf("unexpected %q after \"]\"", after)
		}
		p := after[1:]
		return h, &p, true, ""
	}
	if strings.Count(s, ":") > 1 {
		// An IPv6 prefix may take ports after its length: "2001:db8::/32:443".
		if slash := strings.IndexByte(s, '/'); slash >= 0 {
			if h, p, ok := strings.Cut(s[slash:], ":"); ok {
				return s[:slash] + h, &p, false, ""
			}
		}
		return s, nil, false, ""
	}
	h, p, ok := strings.Cut(s, ":")
	if h == "" {
		return "", nil, false, "no host before the port"
	}
	if !ok {
		return h, nil, false, ""
	}
	return h, &p, false, ""
}

func parsePorts(spec string) ([]PortRange, string) {
	if spec == "" {
		return nil, `no port after ":"`
	}
	var out []PortRange
	for part := range strings.SplitSeq(spec, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		l, reason := parsePort(lo)
		if reason != "" {
			return nil, reason
		}
		h := l
		if isRange {
			if h, reason = parsePort(hi); reason != "" {
				return nil, reason
			}
			if h < l {
				return nil, fmt.Sprintf("port range %q is reversed", part)
			}
		}
		out = append(out, PortRange{l, h})
	}
	return out, ""
}

func parsePort(s string) (uint16, string) {
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil && len(s) > 0 && strings.Trim(s, "0123456789") == "":
		return 0, fmt.Sprintf("port %q is out of range 1-65535", s)
	case err != nil:
		return 0, fmt.Sprintf("port %q is not a number", s)
	case n == 0 || n > 65535:
		return 0, fmt.Sprintf("port %q is out of range 1-65535", s)
	}
	return uint16(n), ""
}

// looksLikeIP reports whether host is meant as an address: it has a colon
// (IPv6) or its last label is all digits, which no top-level domain is.
// Such hosts that do not parse are refused as bad addresses rather than
// taken as names.
func looksLikeIP(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	return strings.Contains(host, ":") || (last != "" && strings.Trim(last, "0123456789") == "")
}

func parsePrefix(host string) (netip.Prefix, string) {
	var p netip.Prefix
	if strings.Contains(host, "/") {
		addr, _, _ := strings.Cut(host, "/")
		if _, err := netip.ParseAddr(addr); err != nil && !looksLikeIP(addr) {
			return p, "a host with a path is not a rule: write the host name alone, or a CIDR such as 10.0.0.0/8"
		}
		var err error
		if p, err = netip.ParsePrefix(host); err != nil {
			return p, "bad CIDR: " + errDetail(err)
		}
		if p != p.Masked() {
			return p, fmt.Sprintf("bad CIDR: address bits set after the prefix length (did you mean %s?)", p.Masked())
		}
	} else {
		a, err := netip.ParseAddr(host)
		switch {
		case err != nil:
			return p, "bad IP address: " + errDetail(err)
		case a.Zone() != "":
			return p, "an IPv6 zone is not allowed"
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	// Connections are matched on unmapped addresses, so an IPv4-mapped
	// rule becomes the IPv4 rule it means.
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, ""
}

// errDetail drops the call netip puts before its reason
// (`ParseAddr("x"): reason`): the rule is quoted already.
func errDetail(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "): "); i >= 0 {
		return s[i+3:]
	}
	return s
}

func parseDomain(host string) (domain string, wildcard bool, reason string) {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, wildcard = rest, true
	}
	switch {
	case name == "*":
		return "", false, `"*" alone would allow every name: use default "allow" instead`
	case strings.Contains(name, "*"):
		return "", false, `"*" is allowed only as the whole first label, as in "*.example.com"`
	}
	if reason := checkName(name); reason != "" {
		return "", false, reason
	}
	return name, wildcard, ""
}

// checkName returns why name (lower case, no trailing dot) is not a host
// name, or "".
func checkName(name string) string {
	if name == "" {
		return "empty name"
	}
	if len(name) > 253 {
		return "name longer than 253 characters"
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return "empty label in name"
		}
		if len(label) > 63 {
			return fmt.Sprintf("label %q longer than 63 characters", label)
		}
		for _, c := range label {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			case c >= 0x80:
				return "non-ASCII name: write internationalized names in punycode (xn--...)"
			default:
				return fmt.Sprintf("character %q not allowed in a name", c)
			}
		}
	}
	return ""
}

// normalizeName lower-cases name and drops one trailing dot, the form
// rules hold.
func normalizeName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}
