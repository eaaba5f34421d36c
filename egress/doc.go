// Package egress decides and enforces what a sandbox may reach on the
// network. It is backend-neutral: a backend puts the sandbox where all its
// traffic passes the host (its own network namespace, say), redirects its
// DNS to [Enforcer.ServeDNS] and [Enforcer.ServeDNSTCP] and its TCP
// connections to [Enforcer.ServeProxy] (nftables REDIRECT; the proxy finds
// each connection's destination with [OriginalDst]), and drops the rest.
//
// # Policies
//
// A [Policy] is a default ("allow" or "deny") and two lists of [Rule]s:
// names ("example.com"), wildcard names ("*.example.com": names under it,
// not itself), addresses and CIDRs, each with optional ports. Deny rules
// win over allow rules; the default applies when no rule matches. Name
// rules and address rules are separate questions: [Policy.AllowName]
// weighs a name, [Policy.AllowAddr] an address, and [Policy.AllowResolve]
// whether a name may be resolved at all (some port of it could be
// allowed).
//
// # What is checked where
//
// DNS. A query for a name that may not be resolved is answered REFUSED by
// the enforcer itself and recorded. It never reaches the upstream server:
// a sandbox that could have any name looked up could send data out in the
// names (DNS tunnelling) even with every connection refused. Allowed
// names are asked of the upstream (a query built anew, carrying nothing
// of the sandbox's but the question), and the A and AAAA records of the
// answer, through CNAME chains, are remembered as resolved for the name
// asked, for the records' TTL but at least five minutes.
//
// TCP. A connection whose address and port an address rule allows (or a
// default allow that no deny name rule could overturn on that port) is
// spliced to its destination untouched. Otherwise its first bytes are read
// for the name it is for: the SNI of a TLS ClientHello, or the Host of an
// HTTP/1.x request. With default deny it goes through only if the name is
// allowed on that port and the destination is an address the enforcer's
// DNS resolved for that name. Names are claims made by the sandbox: the
// address check is what stops a connection to any address with an
// allowed name written in its SNI. With default allow, names matched by
// deny rules are refused, and so are TLS and HTTP connections that show no
// usable name (other protocols pass). Deny address rules refuse whatever
// the name, and so do the addresses the exact names of deny rules resolve
// to ([Enforcer.DeniedAddrs]: the enforcer resolves them itself, while the
// policy lives), so that a denied host is not reached at its address
// under another name. With default deny, a connection whose address was
// resolved for no name allowed on its port is refused after a short read
// for its name (for the record), not after peekTimeout. Refused
// connections are reset and recorded as a [Denial];
// [Enforcer.SetPolicy] re-checks the open ones and cuts those the new
// policy refuses.
//
// # Limits
//
// Only the first request of an HTTP connection and the ClientHello of a
// TLS one are read: later requests on a kept-alive connection, and
// whatever is inside TLS (domain fronting), go to the same address
// unchecked. That address was resolved for an allowed name, so this
// reaches at most other sites that share it (a CDN's). A default allow
// policy with deny name rules delays protocols where the server speaks
// first until the read of the first bytes times out (10 s). UDP other than
// DNS, and other protocols, are the backend's to drop or pass by address
// rules.
package egress
