// Package fakenet is a fake internet for the egress tests: a network
// namespace of the tests' own, reachable from the host through a veth pair,
// where each test domain has an address with an HTTP server (:80), an HTTPS
// server (:443, certificates from a CA made in memory per process) and a
// UDP echo server (:7), next to a DNS server (UDP and TCP :53) that
// answers the test domains.
//
// # Addresses
//
// A process gets a block 10.251.N.0/24 (N from 1 to 250), the namespace
// sbx-fakenet-N and the veth pair sbxfn-N (host) / eth0 (namespace):
//
//	10.251.N.1    the host end of the veth (Net.HostAddr)
//	10.251.N.2    the namespace end
//	10.251.N.10+  one address per test domain (Net.Addr, Net.Names)
//	10.251.N.53   the DNS server (Net.DNS)
//
// The host routes the /24 to the veth because its end carries 10.251.N.1/24;
// the namespace's default route points back at 10.251.N.1, so sandboxes of
// other subnets reach it when the host forwards (and masquerades) for them.
//
// Every HTTP and HTTPS server answers GET / with "hello from DOMAIN\n",
// DOMAIN being the domain of the address the connection arrived at (not the
// Host header or SNI), so a test can tell where a spoofed request landed.
// HTTPS presents the certificate of the SNI name when it is a test domain,
// otherwise the one of the address's domain. GET /bytes?n=N sends N bytes
// (up to 4 GiB) for throughput tests; GET /stream sends a line every 100 ms
// until the client goes away.
//
// The DNS server answers A for the test domains (TTL 60), TXT with the
// first label for names under tunnel.denied.test (to model DNS tunnelling),
// NXDOMAIN for other names under .test and REFUSED for anything else. It
// counts the queries per name (Net.Queries), so a test can prove a denied
// name never reached it.
//
// # Traffic stays on this machine
//
// Nothing here routes to the outside: the servers listen in the namespace,
// the only link out of it is the veth to the host, and the host knows the
// block only as the veth's connected route. Tests use 10.251.0.0/16 and no
// other addresses.
//
// # Blocks and processes
//
// `go test ./...` runs several test binaries at once. Each claims the first
// free block by holding an exclusive flock on /run/sandboxkit-fakenet/N.lock
// for its whole life (the file stays open and is closed on exec, so children
// do not inherit it); the kernel releases it when the process dies. A
// claimer finding the namespace or veth of its block still there deletes and
// remakes them: the free lock proves their maker is gone. Nothing is removed
// at exit; Prune removes what dead processes left behind.
package fakenet
