// Package egressctl runs a sandbox's egress enforcer as a process of its
// own (`sbxd egress`, which backends start outside the sandbox) and is
// how backends talk to it: the policy over a unix socket that only the
// host reaches, and the denied attempts in a file beside it.
package egressctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Run is `sbxd egress`. It listens on --listen for DNS (port 53, UDP and
// TCP) and for redirected TCP connections (a free port), serves the
// policy on the unix socket --control, appends denials to --denials, and
// writes "ready PORT\n" (PORT: the proxy's) to the descriptor --ready-fd
// once it serves. It runs until SIGTERM or SIGINT.
func Run(args []string, stderr io.Writer) error {
	fl := flag.NewFlagSet("sbxd egress", flag.ContinueOnError)
	fl.SetOutput(stderr)
	listen := fl.String("listen", "", "address to serve on (the sandbox's gateway)")
	upstream := fl.String("upstream", "", "DNS server (IP:PORT) asked for allowed names")
	policyFile := fl.String("policy", "", "the policy file (JSON of backend.Egress), rewritten on changes")
	denials := fl.String("denials", "", "file the denied attempts are appended to (JSON lines)")
	control := fl.String("control", "", "unix socket to serve the policy on")
	readyFD := fl.Int("ready-fd", 0, "descriptor to write \"ready PORT\\n\" to once serving")
	proxyPort := fl.Int("proxy-port", 0, "the proxy's port (0: any free one)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{{"listen", *listen}, {"upstream", *upstream}, {"policy", *policyFile}, {"denials", *denials}, {"control", *control}} {
		if f.v == "" {
			return fmt.Errorf("sbxd egress: --%s is required", f.name)
		}
	}
	host, err := netip.ParseAddr(*listen)
	if err != nil {
		return fmt.Errorf("sbxd egress: --listen %q: %w", *listen, err)
	}
	spec, err := readPolicy(*policyFile)
	if err != nil {
		return err
	}
	pol, err := egress.NewPolicy(spec.Default, spec.Allow, spec.Deny)
	if err != nil {
		return fmt.Errorf("sbxd egress: %s: %w", *policyFile, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	dw, err := openDenials(*denials, log)
	if err != nil {
		return fmt.Errorf("sbxd egress: %w", err)
	}
	var e *egress.Enforcer
	dial := guardedDial(func() *egress.Policy { return e.Policy() })
	e, err = egress.New(egress.Options{Policy: pol, Upstream: *upstream, OnDeny: dw.write, Logger: log, Dial: dial})
	if err != nil {
		return err
	}
	s := &server{e: e, spec: spec}
	port, err := s.listen(host, *proxyPort, *control)
	if err != nil {
		return fmt.Errorf("sbxd egress: %w", err)
	}
	if err := dropPrivileges(); err != nil {
		s.close()
		return fmt.Errorf("sbxd egress: %w", err)
	}
	if *readyFD > 0 {
		f := os.NewFile(uintptr(*readyFD), "ready")
		fmt.Fprintf(f, "ready %d\n", port)
		f.Close()
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.close()
	return nil
}

// server is a running enforcer's listeners.
type server struct {
	e       *egress.Enforcer
	mu      sync.Mutex     // serialises policy changes
	spec    backend.Egress // the policy in force, as given
	closers []io.Closer
}

func (s *server) listen(host netip.Addr, port int, control string) (proxyPort int, err error) {
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	dnsAddr := netip.AddrPortFrom(host, 53).String()
	udp, err := net.ListenPacket("udp", dnsAddr)
	if err != nil {
		return 0, err
	}
	s.closers = append(s.closers, udp)
	tcp, err := net.Listen("tcp", dnsAddr)
	if err != nil {
		return 0, err
	}
	s.closers = append(s.closers, tcp)
	proxy, err := net.Listen("tcp", netip.AddrPortFrom(host, uint16(port)).String())
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
		var spec backend.Egress
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
		s.e.SetPolicy(pol)
		s.spec = spec
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

func readPolicy(file string) (backend.Egress, error) {
	var spec backend.Egress
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
func WritePolicy(file string, spec backend.Egress) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return statedir.WriteFileAtomic(file, data)
}

// guardedDial is the proxy's outbound dial: the host's own addresses,
// loopback and link-local ones (cloud metadata services) are refused
// unless the policy's default is deny and an address rule allows them,
// so that a policy of default allow does not open the host's services to
// the sandbox.
func guardedDial(policy func() *egress.Policy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		ip := ap.Addr().Unmap()
		if special(ip) {
			p := policy()
			if p.Default != egress.Deny || !p.AllowAddr(ip, ap.Port()) {
				return nil, fmt.Errorf("%s is this host's or a special address; only an address rule of a default-deny policy reaches it", ip)
			}
		}
		return d.DialContext(ctx, network, addr)
	}
}

// special: loopback, link-local, unspecified, multicast, or one of this
// host's addresses.
func special(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLinkLocalMulticast() {
		return true
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

// SetPolicy sends spec to the enforcer whose control socket is sock; the
// enforcer follows it when this returns.
func SetPolicy(ctx context.Context, sock string, spec backend.Egress) error {
	body, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://enforcer/policy", bytes.NewReader(body))
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
			return fmt.Errorf("%w: egress: %s", backend.ErrInvalidConfig, bytes.TrimSpace(msg))
		}
		return fmt.Errorf("egress enforcer: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
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
	line, _ := json.Marshal(backend.EgressDenial{Time: d.Time.UTC(), Proto: d.Proto, Dest: d.Dest, Port: d.Port, Name: d.Name, Reason: d.Reason})
	w.mu.Lock()
	defer w.mu.Unlock()
	if fi, err := w.f.Stat(); err == nil && fi.Size() > maxDenialsFile {
		w.f.Truncate(0)
	}
	if _, err := w.f.Write(append(line, '\n')); err != nil {
		w.log.Warn("recording a denial", "err", err)
	}
}

// ReadDenials returns the latest max denials recorded in file, oldest
// first. A missing file has none.
func ReadDenials(file string, max int) ([]backend.EgressDenial, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []backend.EgressDenial
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var d backend.EgressDenial
		if json.Unmarshal(sc.Bytes(), &d) == nil {
			all = append(all, d)
		}
	}
	if max > 0 && len(all) > max {
		all = all[len(all)-max:]
	}
	return all, sc.Err()
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
// listening on host (DNS on 53, the proxy on ProxyPort), asking upstream,
// telling readiness on descriptor 3.
func Args(dir string, host netip.Addr, upstream string) []string {
	p := PathsIn(dir)
	return []string{"egress", "--listen", host.String(), "--upstream", upstream, "--proxy-port", strconv.Itoa(ProxyPort),
		"--policy", p.Policy, "--denials", p.Denials, "--control", p.Control, "--ready-fd", strconv.Itoa(3)}
}
