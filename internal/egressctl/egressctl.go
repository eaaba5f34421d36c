// Package egressctl runs a sandbox's egress enforcer as a process of its
// own (`sbxd egress`, which backends start outside the sandbox) and is
// how backends talk to it: the policy over a unix socket that only the
// host reaches, and the denied attempts in a file beside it.
package egressctl

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
	"github.com/sandboxkit/sandboxkit/internal/errdefs"
)

// Run is `sbxd egress`. It listens on --listen for DNS (--dns-port, UDP
// and TCP) and for redirected TCP connections (--proxy-port), serves the
// policy on the unix socket --control, appends denials to --denials, and
// writes "ready PORT\n" (PORT: the proxy's) to the descriptor --ready-fd
// once it serves. It runs until SIGTERM or SIGINT.
//
// With --in-netns it runs in the sandbox's network namespace instead (see
// installRules): it listens on loopback, loads the namespace's rules
// before it tells it is ready, marks its own sockets, keeps its files in
// --state (PathsIn) and starts from the policy saved there (changes are
// saved), else from --policy-json.
func Run(args []string, stderr io.Writer) error {
	fl := flag.NewFlagSet("sbxd egress", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", "", "address to serve on (the sandbox's gateway; --in-netns: 127.0.0.1)")
	upstream := fl.String("upstream", "", "DNS server (IP:PORT) asked for allowed names (default: /etc/resolv.conf's first)")
	policyFile := fl.String("policy", "", "the policy file (JSON of Policy)")
	denials := fl.String("denials", "", "file the denied attempts are appended to (JSON lines)")
	control := fl.String("control", "", "unix socket to serve the policy on")
	readyFD := fl.Int("ready-fd", 0, "descriptor to write \"ready PORT\\n\" to once serving")
	proxyPort := fl.Int("proxy-port", 0, "the proxy's port (0: any free one)")
	dnsPort := fl.Int("dns-port", 53, "the resolver's port")
	inNetns := fl.Bool("in-netns", false, "run in the sandbox's network namespace and load its rules")
	state := fl.String("state", "", "--in-netns: the folder of the policy, denials and control socket")
	policyJSON := fl.String("policy-json", "", "--in-netns: the policy to start from when --state holds none")
	readyFile := fl.String("ready-file", "", "a file to create once serving (after the rules, with --in-netns)")
	logGroup := fl.Int("log-group", 0, "the NFLOG group whose packets are recorded as denials (--in-netns: NetnsLogGroup)")
	hostAddrsFlag := fl.String("host-addrs", "", "comma-separated addresses or CIDRs of the machine the sandbox runs on, besides this namespace's own (see HostAddrsFlag)")
	device := fl.String("bind-device", "", "the interface the listeners take connections from (none from elsewhere)")
	credentials := fl.String("credentials", "", "the credentials to broker (JSON of Credentials, mode 0600); read again on SIGHUP")
	if err := fl.Parse(args); err != nil {
		return err
	}
	hostAddrs, err := ParseHostAddrs(*hostAddrsFlag)
	if err != nil {
		return fmt.Errorf("sbxd egress: --host-addrs: %w", err)
	}
	persist := ""
	if *inNetns {
		if *state == "" {
			return errors.New("sbxd egress: --in-netns needs --state")
		}
		if err := os.MkdirAll(*state, 0o700); err != nil {
			return fmt.Errorf("sbxd egress: %w", err)
		}
		p := PathsIn(*state)
		*policyFile, *denials, *control, persist = p.Policy, p.Denials, p.Control, p.Policy
		*listen = cmp.Or(*listen, "127.0.0.1")
		if _, err := os.Stat(p.Policy); errors.Is(err, fs.ErrNotExist) {
			var spec Policy
			if err := json.Unmarshal([]byte(*policyJSON), &spec); err != nil {
				return fmt.Errorf("sbxd egress: --policy-json: %w", err)
			}
			if err := WritePolicy(p.Policy, spec); err != nil {
				return fmt.Errorf("sbxd egress: %w", err)
			}
		}
	}
	for _, f := range []struct{ name, v string }{{"listen", *listen}, {"policy", *policyFile}, {"denials", *denials}, {"control", *control}} {
		if f.v == "" {
			return fmt.Errorf("sbxd egress: --%s is required", f.name)
		}
	}
	host, err := netip.ParseAddr(*listen)
	if err != nil {
		return fmt.Errorf("sbxd egress: --listen %q: %w", *listen, err)
	}
	if *upstream == "" {
		if *upstream, err = Nameserver("/etc/resolv.conf"); err != nil {
			return fmt.Errorf("sbxd egress: %w (give --upstream)", err)
		}
	}
	spec, err := readPolicy(*policyFile)
	if err != nil {
		return err
	}
	pol, err := egress.NewPolicy(spec.Default, spec.Allow, spec.Deny)
	if err != nil {
		return fmt.Errorf("sbxd egress: %s: %w", *policyFile, err)
	}
	// Warnings only: every denial is in the denials file (which is
	// bounded); logged too, a sandbox could fill its log without end.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dw, err := openDenials(*denials, log)
	if err != nil {
		return fmt.Errorf("sbxd egress: %w", err)
	}
	dialer := &net.Dialer{}
	var upstreamDial egress.DialFunc
	if *inNetns {
		dialer = markedDialer()
		upstreamDial = dialer.DialContext
	}
	if *inNetns {
		// The namespace's gateways are the host's (a bridge's address on
		// Docker, the node's on k8s), whatever the backend knew to name.
		hostAddrs = append(hostAddrs, gateways()...)
	}
	guard := newHostGuard(hostAddrs)
	s := &server{spec: spec, persist: persist, guard: guard}
	var onDenied func(*egress.Policy, []netip.Addr) error
	if *inNetns {
		s.onPolicy = s.setAddrRules
		onDenied = s.setDeniedAddrs
		*logGroup = NetnsLogGroup
	}
	var e *egress.Enforcer
	dial := guardedDial(func() *egress.Policy { return e.Policy() }, guard, dialer)
	e, err = egress.New(egress.Options{Policy: pol, Upstream: *upstream, OnDeny: dw.write, OnBrokered: dw.brokered, Logger: log, Dial: dial, UpstreamDial: upstreamDial,
		OnDeniedAddrs: onDenied})
	if err != nil {
		return err
	}
	s.e = e
	s.credentials = *credentials
	if *credentials != "" {
		// Read while privileged (the file is root's alone).
		if err := applyCredentials(e, *credentials); err != nil {
			e.Close()
			return fmt.Errorf("sbxd egress: --credentials %w", err)
		}
	}
	if *logGroup > 0 {
		// Bound while privileged; without it, only DNS and TCP denials
		// are recorded.
		if l, err := openNflog(uint16(*logGroup)); err != nil {
			log.Warn("egress: other protocols' denials will not be recorded", "err", err)
		} else {
			s.closers = append(s.closers, l)
			go l.run(dw.write)
		}
	}
	port, err := s.listen(host, *dnsPort, *proxyPort, *control, *device)
	if err != nil {
		return fmt.Errorf("sbxd egress: %w", err)
	}
	if *inNetns {
		// Marks need CAP_NET_ADMIN for as long as it runs: it keeps root
		// (in a container of its own, with no other capability).
		s.addrMu.Lock()
		err := installRules(uint16(port), uint16(*dnsPort), s.addrRules(pol))
		s.installed = err == nil
		s.addrMu.Unlock()
		if err != nil {
			s.close()
			return fmt.Errorf("sbxd egress: %w", err)
		}
	} else if err := dropPrivileges(); err != nil {
		s.close()
		return fmt.Errorf("sbxd egress: %w", err)
	}
	if *readyFile != "" {
		if err := os.WriteFile(*readyFile, fmt.Appendf(nil, "ready %d\n", port), 0o644); err != nil {
			s.close()
			return fmt.Errorf("sbxd egress: %w", err)
		}
	}
	switch {
	case *readyFD == 1:
		fmt.Fprintf(os.Stdout, "ready %d\n", port)
	case *readyFD > 0:
		f := os.NewFile(uintptr(*readyFD), "ready")
		fmt.Fprintf(f, "ready %d\n", port)
		f.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if *credentials != "" {
		// SIGHUP: the backend rewrote the file (a rotation). The previous
		// credentials stay in force if the new ones are bad or cannot be
		// read (an enforcer that dropped root cannot read a root file).
		signal.Notify(sig, syscall.SIGHUP)
	}
	for sg := range sig {
		if sg != syscall.SIGHUP {
			break
		}
		if err := applyCredentials(e, *credentials); err != nil {
			log.Warn("egress: reading the rotated credentials; the previous ones stay in force", "err", err)
		}
	}
	s.close()
	return nil
}

// DNSServer is v ("IP" or "IP:PORT") as "IP:PORT".
func DNSServer(v string) (string, bool) {
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return ap.String(), true
	}
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.AddrPortFrom(a, 53).String(), true
	}
	return "", false
}

// DNSServerWant says what DNSServer takes, for errors.
const DNSServerWant = `want an IP address, optionally with a port ("10.0.0.53", "10.0.0.53:5353")`

// Nameserver returns the first nameserver of resolv.conf file as IP:53.
func Nameserver(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("egress: no DNS server for the enforcer: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				return netip.AddrPortFrom(a, 53).String(), nil
			}
		}
	}
	return "", fmt.Errorf("egress: %s names no nameserver", file)
}

// server is a running enforcer's listeners.
type server struct {
	e       *egress.Enforcer
	mu      sync.Mutex // serialises policy changes
	spec    Policy     // the policy in force, as given
	persist string     // where changes are saved ("": not saved)
	guard   *hostGuard
	// onPolicy, when set, applies a new policy's address rules before the
	// enforcer follows it.
	onPolicy func(*egress.Policy) error
	closers  []io.Closer
	// credentials is the --credentials file ("": none brokered).
	credentials string

	addrMu    sync.Mutex   // guards denied and installed, and orders address-rule writes
	denied    []netip.Addr // what the policy's deny names resolved to
	installed bool         // whether installRules loaded the table
}

// addrRules is what the namespace's address chain holds for p.
func (s *server) addrRules(p *egress.Policy) AddrRules {
	return AddrRules{Policy: p, Host: s.guard.prefixes, Denied: s.denied}
}

// setAddrRules (onPolicy) rewrites the address chain for p.
func (s *server) setAddrRules(p *egress.Policy) error {
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	s.denied = nil // p's own come through setDeniedAddrs
	return setAddrRules(s.addrRules(p))
}

// setDeniedAddrs (the enforcer's OnDeniedAddrs) rewrites the address
// chain with what p's deny names resolve to; before the table is loaded
// (the first policy's answers come while the enforcer starts) it only
// keeps them for installRules.
func (s *server) setDeniedAddrs(p *egress.Policy, addrs []netip.Addr) error {
	s.addrMu.Lock()
	defer s.addrMu.Unlock()
	s.denied = addrs
	if !s.installed {
		return nil
	}
	return setAddrRules(s.addrRules(p))
}

func (s *server) listen(host netip.Addr, dnsPort, port int, control, device string) (proxyPort int, err error) {
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	lc := listenConfig(device)
	ctx := context.Background()
	dnsAddr := netip.AddrPortFrom(host, uint16(dnsPort)).String()
	udp, err := lc.ListenPacket(ctx, "udp", dnsAddr)
	if err != nil {
		return 0, err
	}
	s.closers = append(s.closers, udp)
	tcp, err := lc.Listen(ctx, "tcp", dnsAddr)
	if err != nil {
		return 0, err
	}
	s.closers = append(s.closers, tcp)
	proxy, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(host, uint16(port)).String())
	if err != nil {
		return 0, err
	}
	s.closers = append(s.closers, proxy)
	os.Remove(control)
	ctl, err := net.Listen("unix", control)
	if err != nil {
		return 0, err
	}
	s.closers = append(s.closers, ctl)
	if err := os.Chmod(control, 0o600); err != nil {
		return 0, err
	}
	go s.e.ServeDNS(udp)
	go s.e.ServeDNSTCP(tcp)
	go s.e.ServeProxy(proxy, egress.OriginalDst)
	go (&http.Server{Handler: s.handler(), ReadHeaderTimeout: 10 * time.Second}).Serve(ctl)
	return proxy.Addr().(*net.TCPAddr).Port, nil
}

func (s *server) close() {
	for _, c := range s.closers {
		c.Close()
	}
	s.e.Close()
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /policy", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		spec := s.spec
		s.mu.Unlock()
		json.NewEncoder(w).Encode(spec)
	})
	mux.HandleFunc("PUT /policy", func(w http.ResponseWriter, r *http.Request) {
		var spec Policy
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&spec); err != nil {
			http.Error(w, "policy: "+err.Error(), http.StatusBadRequest)
			return
		}
		pol, err := egress.NewPolicy(spec.Default, spec.Allow, spec.Deny)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.onPolicy != nil {
			if err := s.onPolicy(pol); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		if s.persist != "" {
			if err := WritePolicy(s.persist, spec); err != nil {
				http.Error(w, "saving the policy: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		s.e.SetPolicy(pol)
		s.spec = spec
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /credentials", func(w http.ResponseWriter, r *http.Request) {
		// A rotation, for an enforcer that gave up root and so cannot read
		// its credentials file again; the socket is root's alone (0600).
		if s.credentials == "" {
			http.Error(w, "this enforcer brokers no credentials (it was started without --credentials)", http.StatusConflict)
			return
		}
		var c Credentials
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil {
			http.Error(w, "credentials: "+err.Error(), http.StatusBadRequest)
			return
		}
		ca, creds, err := c.parse()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.e.SetCredentials(ca, creds, nil); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// EnforcerUID is the user and group the enforcer runs as once it has
// bound its sockets: a flaw in its parsers, which read what the sandbox
// sends, then yields no root on the host. It is no image's user (not
// 65534, which sandboxes run as and whose process count they share).
const EnforcerUID = 2147483646

// dropPrivileges gives up root for EnforcerUID, in every thread. What it
// needed root for (port 53, its files in the sandbox's 0700 folder) is
// open by then.
func dropPrivileges() error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping groups: %w", err)
	}
	if err := syscall.Setgid(EnforcerUID); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(EnforcerUID); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	return nil
}

func readPolicy(file string) (Policy, error) {
	var spec Policy
	data, err := os.ReadFile(file)
	if err != nil {
		return spec, err
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return spec, fmt.Errorf("%s: %w", file, err)
	}
	return spec, nil
}

// WritePolicy writes the policy file an enforcer starts from.
func WritePolicy(file string, spec Policy) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return atomicfile.Write(file, data)
}

// guardedDial is the proxy's outbound dial: the host's own addresses,
// loopback and link-local ones (cloud metadata services) are refused
// unless the policy's default is deny and an address rule allows them,
// so that a policy of default allow, or an allowed name that resolves to
// the host, does not open the host's services to the sandbox.
func guardedDial(policy func() *egress.Policy, guard *hostGuard, d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		ip := ap.Addr().Unmap()
		if guard.special(ip) {
			p := policy()
			if p.Default != egress.Deny || !p.AllowAddr(ip, ap.Port()) {
				return nil, fmt.Errorf("%s is the host's or a special address; only an address rule of a default-deny policy reaches it", ip)
			}
		}
		return d.DialContext(ctx, network, addr)
	}
}

// hostGuard knows the addresses that are the host's: this namespace's
// own, and those the backend named (the machine's that runs the sandbox:
// the Docker host's or the node's, its bridges' gateways).
type hostGuard struct {
	prefixes []netip.Prefix
}

func newHostGuard(prefixes []netip.Prefix) *hostGuard {
	return &hostGuard{prefixes: prefixes}
}

// special: loopback, link-local, unspecified, multicast, one of this
// namespace's addresses, or one the backend named as the host's.
func (g *hostGuard) special(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalMulticast() {
		return true
	}
	for _, p := range g.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if h, ok := netip.AddrFromSlice(n.IP); ok && h.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// HostAddrsFlag is the --host-addrs value naming addrs, "" for none.
func HostAddrsFlag(addrs []netip.Prefix) string {
	parts := make([]string, len(addrs))
	for i, p := range addrs {
		if p.IsSingleIP() {
			parts[i] = p.Addr().String()
		} else {
			parts[i] = p.String()
		}
	}
	return strings.Join(parts, ",")
}

// ParseHostAddrs parses a --host-addrs value: addresses and CIDRs,
// comma-separated.
func ParseHostAddrs(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if a, err := netip.ParseAddr(part); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// InterfaceAddrs returns the addresses of this network namespace's
// interfaces but loopback and link-local ones, as single-address prefixes: what a backend
// whose sandboxes run on this machine names as the host's.
func InterfaceAddrs() []netip.Prefix {
	addrs, _ := net.InterfaceAddrs()
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		// Loopback and link-local addresses are refused anyway; leaving
		// them out keeps the list the same while containers come and go
		// (each veth has a link-local address of its own).
		if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLoopback() && !ip.IsLinkLocalUnicast() {
			out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		}
	}
	return out
}

// SetPolicy sends spec to the enforcer whose control socket is sock; the
// enforcer follows it when this returns.
func SetPolicy(ctx context.Context, sock string, spec Policy) error {
	return put(ctx, sock, "/policy", "egress", spec)
}

// SetCredentials sends c to the enforcer whose control socket is sock (a
// rotation); it brokers them when this returns.
func SetCredentials(ctx context.Context, sock string, c Credentials) error {
	return put(ctx, sock, "/credentials", "credentials", c)
}

// put sends v as JSON to path of the control socket sock; what names v in
// the errors of a refusal.
func put(ctx context.Context, sock, path, what string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c := unixClient(sock)
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://enforcer"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("the sandbox's egress enforcer does not answer (%w); it fails closed: nothing is reachable", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode == http.StatusBadRequest {
			return fmt.Errorf("%w: %s: %s", errdefs.ErrInvalidConfig, what, bytes.TrimSpace(msg))
		}
		return fmt.Errorf("egress enforcer: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// unixClient is an HTTP client of the server on unix socket sock.
func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

// maxDenialsFile is the size at which the denials file starts afresh.
const maxDenialsFile = 1 << 20

// denialWriter appends denials to a file of JSON lines, opened before the
// enforcer gives up root (see dropPrivileges). At maxDenialsFile it starts
// the file afresh.
type denialWriter struct {
	f   *os.File
	log *slog.Logger
	mu  sync.Mutex
}

func openDenials(path string, log *slog.Logger) (*denialWriter, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return &denialWriter{f: f, log: log}, nil
}

func (w *denialWriter) write(d egress.Denial) {
	w.append(Denial{Time: d.Time.UTC(), Proto: d.Proto, Dest: d.Dest, Port: d.Port, Name: d.Name, Reason: d.Reason})
}

// brokered records a request that carried credentials: method, host, path
// and status, with the credentials' names (never their values).
func (w *denialWriter) brokered(b egress.Brokered) {
	w.append(Denial{Time: b.Time.UTC(), Proto: "https", Dest: b.Dest, Port: b.Port, Name: b.Name, Kind: KindCredential,
		Method: b.Method, Path: b.Path, Status: b.Status, Reason: "credential " + strings.Join(b.Credentials, ", ") + " applied"})
}

func (w *denialWriter) append(d Denial) {
	line, _ := json.Marshal(d)
	w.mu.Lock()
	defer w.mu.Unlock()
	if fi, err := w.f.Stat(); err == nil && fi.Size() > maxDenialsFile {
		w.f.Truncate(0)
	}
	if _, err := w.f.Write(append(line, '\n')); err != nil {
		w.log.Warn("recording a denial", "err", err)
	}
}

// ReadDenials returns the latest max denials recorded in file, and the
// latest max records of requests that carried credentials (so that busy
// use of an API does not push refusals out), oldest first. A missing
// file has none.
func ReadDenials(file string, max int) ([]Denial, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []Denial
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var d Denial
		if json.Unmarshal(sc.Bytes(), &d) == nil {
			all = append(all, d)
		}
	}
	if max > 0 {
		all = latestOfEachKind(all, max)
	}
	return all, sc.Err()
}

// latestOfEachKind keeps, in order, the last max records of each kind.
func latestOfEachKind(all []Denial, max int) []Denial {
	left := map[string]int{}
	keep := make([]bool, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		if left[all[i].Kind] < max {
			left[all[i].Kind]++
			keep[i] = true
		}
	}
	out := all[:0]
	for i, d := range all {
		if keep[i] {
			out = append(out, d)
		}
	}
	return out
}

// Paths of an enforcer's files in a sandbox folder dir.
type Paths struct{ Policy, Denials, Control, Log string }

// PathsIn returns the enforcer files' paths in folder dir.
func PathsIn(dir string) Paths {
	return Paths{
		Policy:  filepath.Join(dir, "egress-policy.json"),
		Denials: filepath.Join(dir, "egress-denials.jsonl"),
		Control: filepath.Join(dir, "egress.sock"),
		Log:     filepath.Join(dir, "egress.log"),
	}
}

// ProxyPort is the proxy's port where every enforcer has an address of its
// own (so rules naming it can be loaded while the enforcer starts).
const ProxyPort = 15001

// Args are the arguments of `sbxd egress` for an enforcer of folder dir
// listening on host (DNS on 53, the proxy on ProxyPort) of interface
// device alone (the sandbox's end of it is the only way in), asking
// upstream, recording the packets logged to NFLOG group logGroup, telling
// readiness on descriptor 3.
func Args(dir string, host netip.Addr, device, upstream string, logGroup uint16) []string {
	p := PathsIn(dir)
	return []string{"egress", "--listen", host.String(), "--bind-device", device, "--upstream", upstream, "--proxy-port", strconv.Itoa(ProxyPort),
		"--policy", p.Policy, "--denials", p.Denials, "--control", p.Control, "--ready-fd", strconv.Itoa(3),
		"--log-group", strconv.Itoa(int(logGroup))}
}

// Ctl is `sbxd egress-ctl --state DIR status|set`, how a backend that
// reaches an in-namespace enforcer only by running commands next to it
// (the Docker backends: an exec in its container) talks to it:
//
//   - status writes the policy in force and the latest --max denials as
//     JSON of Status;
//   - set reads a policy (JSON of Policy) from stdin and sends it
//     to the enforcer; it exits 2 when the enforcer refuses it (the reason
//     on stderr), 1 on other errors.
func Ctl(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("sbxd egress-ctl", flag.ContinueOnError)
	fl.SetOutput(stderr)
	state := fl.String("state", "", "the enforcer's --state folder")
	max := fl.Int("max", 200, "status: the most denials to show")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *state == "" || fl.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: sbxd egress-ctl --state DIR status|set")
		return 2
	}
	p := PathsIn(*state)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch fl.Arg(0) {
	case "status":
		st, err := status(ctx, p, *max)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		json.NewEncoder(stdout).Encode(st)
		return 0
	case "set":
		var spec Policy
		if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&spec); err != nil {
			fmt.Fprintln(stderr, "policy:", err)
			return 2
		}
		if err := SetPolicy(ctx, p.Control, spec); err != nil {
			fmt.Fprintln(stderr, err)
			if errors.Is(err, errdefs.ErrInvalidConfig) {
				return 2
			}
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "sbxd egress-ctl: unknown command %q (want status or set)\n", fl.Arg(0))
	return 2
}

// status asks the enforcer whose files are p for its policy, and reads its
// latest max denials.
func status(ctx context.Context, p Paths, max int) (Status, error) {
	var st Status
	c := unixClient(p.Control)
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://enforcer/policy", nil)
	if err != nil {
		return st, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return st, fmt.Errorf("the sandbox's egress enforcer does not answer (%w); it fails closed: nothing is reachable", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st.Policy); err != nil {
		return st, fmt.Errorf("egress enforcer's policy: %w", err)
	}
	st.Denials, err = ReadDenials(p.Denials, max)
	return st, err
}

// RunFunc runs argv next to an in-namespace enforcer (an exec in its
// container) with stdin, and returns its output and exit code.
type RunFunc func(ctx context.Context, argv []string, stdin []byte) (stdout, stderr []byte, code int, err error)

// SetPolicyVia sends spec to the in-namespace enforcer whose sbxd is sbxd
// and whose --state is state, through run (`sbxd egress-ctl set`). A bad
// policy is errdefs.ErrInvalidConfig, checked before anything runs.
func SetPolicyVia(ctx context.Context, run RunFunc, sbxd, state string, spec Policy) error {
	if _, err := egress.NewPolicy(spec.Default, spec.Allow, spec.Deny); err != nil {
		return fmt.Errorf("%w: egress: %v", errdefs.ErrInvalidConfig, err)
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	stdout, stderr, code, err := run(ctx, []string{sbxd, "egress-ctl", "--state", state, "set"}, body)
	msg := bytes.TrimSpace(append(stdout, stderr...))
	switch {
	case err != nil:
		return fmt.Errorf("reaching the egress enforcer: %w", err)
	case code == 2:
		return fmt.Errorf("%w: %s", errdefs.ErrInvalidConfig, msg)
	case code != 0:
		return fmt.Errorf("egress enforcer: %s", msg)
	}
	return nil
}

// StatusVia asks the in-namespace enforcer (as SetPolicyVia) for its
// policy and latest denials (`sbxd egress-ctl status`).
func StatusVia(ctx context.Context, run RunFunc, sbxd, state string) (Status, error) {
	var st Status
	stdout, stderr, code, err := run(ctx, []string{sbxd, "egress-ctl", "--state", state, "status"}, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("egress enforcer: %s", bytes.TrimSpace(stderr))
	}
	if err == nil {
		err = json.Unmarshal(stdout, &st)
	}
	return st, err
}

// Policy is the enforcer's copy of backend.Egress, the JSON that the policy
// file and the control socket carry. The agent links this package, not
// backend, so that a change to backend alone does not change the agent's
// binary; the two types have the same fields (TestWireTypesMatchBackend),
// so either converts to the other: egressctl.Policy(spec).
type Policy struct {
	// Default is "deny" ("" too) or "allow".
	Default string   `json:"default,omitempty"`
	Allow   []string `json:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty"`
}

// Denial is the enforcer's copy of backend.EgressDenial: one refused
// attempt, as the denials file holds it.
type Denial struct {
	Time   time.Time `json:"time"`
	Proto  string    `json:"proto"`
	Dest   string    `json:"dest"`
	Port   uint16    `json:"port,omitempty"`
	Name   string    `json:"name,omitempty"`
	Reason string    `json:"reason"`
	// Kind, Method, Path, Status: see backend.EgressDenial.
	Kind   string `json:"kind,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Status int    `json:"status,omitempty"`
}

// KindCredential is the Kind of a record of a request that carried
// brokered credentials (it was let through, not refused).
const KindCredential = "credential"

// Status is the enforcer's copy of backend.EgressStatus.
type Status struct {
	Policy  Policy   `json:"policy"`
	Denials []Denial `json:"denials"`
}
