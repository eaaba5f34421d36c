package backend

import (
	"context"
	"time"
)

// Egress is a sandbox's outbound network policy: what it may reach. Rules
// are strings: a domain name ("example.com"), every name under a domain
// ("*.example.com"), an address or CIDR ("10.1.2.3", "10.0.0.0/8",
// "2001:db8::/32"), each optionally with a port or port range
// (":443", ":8000-8100"; IPv6 in brackets). Package egress parses and
// decides them; deny rules win over allow rules, and Default applies to
// what no rule matches.
//
// Domain rules work through the enforcer's own DNS resolver, which answers
// only allowed names, and its TCP proxy, which lets a connection through
// by its TLS SNI or HTTP Host only when the destination address is one the
// resolver gave for that name. Address rules cover any protocol.
type Egress struct {
	// Default is "deny" ("" too) or "allow".
	Default string   `json:"default,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty"`
}

// EgressDenial is one refused attempt of a sandbox to reach something, or
// (Kind "credential") one request that carried brokered credentials.
type EgressDenial struct {
	Time time.Time `json:"time"`
	// Proto is "dns", "tcp" or "udp".
	Proto string `json:"proto"`
	// Dest is the address tried, or the name looked up for "dns".
	Dest string `json:"dest"`
	Port uint16 `json:"port,omitempty"`
	// Name is the TLS SNI, HTTP Host or DNS name involved, if any.
	Name   string `json:"name,omitempty"`
	Reason string `json:"reason"`
	// Kind is "" for a refused attempt and "credential" for a request to
	// a declared host that carried brokered credentials (Spec.Credentials;
	// let through, recorded for audit): then Method, Path (without its
	// query) and Status are the request's and the server's answer, and
	// Reason names the credentials, never their values.
	Kind   string `json:"kind,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Status int    `json:"status,omitempty"`
}

// EgressKindCredential is the Kind of an EgressDenial that records a
// request that carried brokered credentials.
const EgressKindCredential = "credential"

// EgressStatus is a sandbox's policy and its latest refused attempts,
// oldest first.
type EgressStatus struct {
	Policy  Egress         `json:"policy"`
	Denials []EgressDenial `json:"denials"`
}

// EgressController is implemented by backends that enforce Spec.Egress
// (Capabilities.Egress). The enforcer runs outside the sandbox, which has
// no CAP_NET_ADMIN and cannot reach the enforcer's controls.
type EgressController interface {
	// SetEgress replaces sandbox id's policy; new connections and DNS
	// queries follow it at once, and open connections it no longer
	// allows are closed within a second. A sandbox made without a policy
	// cannot get one later (its network was not built for it): that is
	// an error wrapping ErrUnsupported.
	SetEgress(ctx context.Context, id string, policy Egress) error
	// EgressStatus returns sandbox id's policy and its latest denials.
	EgressStatus(ctx context.Context, id string) (EgressStatus, error)
}
