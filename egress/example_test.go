package egress_test

import (
	"fmt"
	"log"
	"net"
	"net/netip"

	"github.com/sandboxkit/sandboxkit/egress"
)

func ExampleNewPolicy() {
	p, err := egress.NewPolicy("deny",
		[]string{"*.github.com:443", "pypi.org", "10.0.0.0/8:53"},
		[]string{"gist.github.com"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(p.AllowName("api.github.com", 443))
	fmt.Println(p.AllowName("api.github.com", 22))
	fmt.Println(p.AllowName("gist.github.com", 443)) // deny wins
	fmt.Println(p.AllowResolve("github.com"))        // the wildcard is for names under it
	fmt.Println(p.AllowAddr(netip.MustParseAddr("10.1.2.3"), 53))

	_, err = egress.NewPolicy("deny", []string{"pypi.org", "*pypi.org"}, nil)
	fmt.Println(err)
	// Output:
	// true
	// false
	// false
	// false
	// true
	// egress allow[1] "*pypi.org": "*" is allowed only as the whole first label, as in "*.example.com" (allowed: "example.com", "*.example.com", "10.1.2.3", "10.0.0.0/8" or "2001:db8::/32", each optionally with ports: ":443", ":8000-8100", ":80,443", "[2001:db8::1]:443")
}

// The wiring of a backend: the sandbox's DNS and TCP are redirected (by
// nftables rules the sandbox cannot change) to an enforcer listening on
// the host end of its network.
func ExampleEnforcer() {
	p, err := egress.NewPolicy("deny", []string{"*.pypi.org", "pypi.org"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	e, err := egress.New(egress.Options{
		Policy:   p,
		Upstream: "192.0.2.53:53",
		OnDeny:   func(d egress.Denial) { log.Printf("egress denied: %s %s:%d %s", d.Proto, d.Dest, d.Port, d.Reason) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	dnsUDP, err := net.ListenPacket("udp", "10.252.0.1:53")
	if err != nil {
		log.Fatal(err)
	}
	dnsTCP, err := net.Listen("tcp", "10.252.0.1:53")
	if err != nil {
		log.Fatal(err)
	}
	proxy, err := net.Listen("tcp", "10.252.0.1:15001")
	if err != nil {
		log.Fatal(err)
	}
	go e.ServeDNS(dnsUDP)
	go e.ServeDNSTCP(dnsTCP)
	go e.ServeProxy(proxy, egress.OriginalDst)

	// Later, while the sandbox runs: connections the new policy refuses
	// are cut before SetPolicy returns.
	p2, _ := egress.NewPolicy("deny", []string{"pypi.org"}, nil)
	e.SetPolicy(p2)
}
