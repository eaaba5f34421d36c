package lite

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
)

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
)

// netprobe builds internal/netprobe once per test binary: the program the
// tests run in sandboxes to try the network.
func netprobe(t testing.TB) []byte {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-netprobe-")
		if err != nil {
			probeErr = err
			return
		}
		probePath = filepath.Join(dir, "netprobe")
		cmd := exec.Command("go", "build", "-o", probePath, "github.com/sandboxkit/sandboxkit/internal/netprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			probeErr = errors.New(string(out))
		}
	})
	require.NoError(t, probeErr, "building netprobe")
	data, err := os.ReadFile(probePath)
	require.NoError(t, err)
	return data
}

// egressEnv is a sandbox with a policy, on the fake internet.
type egressEnv struct {
	net *fakenet.Net
	b   *Backend
	sb  *Sandbox
}

// newEgressEnv makes a sandbox with the policy policy gives for the fake
// internet.
func newEgressEnv(t *testing.T, policy func(*fakenet.Net) backend.Egress) *egressEnv {
	t.Helper()
	e := newTestEnv(t)
	fn := fakenet.Start(t)
	e.cfg.EgressDNS = fn.DNS.String()
	b := e.open(t)
	spec := e.spec("egress")
	p := policy(fn)
	spec.Egress = &p
	sb := create(t, b, spec)
	require.NoError(t, sb.WriteFile(t.Context(), "/netprobe", bytes.NewReader(netprobe(t)), 0o755))
	return &egressEnv{net: fn, b: b, sb: sb}
}

// probe runs netprobe in the sandbox; ok reports exit status 0.
func (e *egressEnv) probe(t *testing.T, args ...string) (out string, ok bool) {
	t.Helper()
	res, err := e.sb.Exec(t.Context(), backend.ExecRequest{Cmd: append([]string{"/netprobe"}, args...), Timeout: 30 * time.Second})
	require.NoError(t, err)
	return strings.TrimSpace(string(res.Stdout) + string(res.Stderr)), res.ExitCode == 0
}

func (e *egressEnv) mustReach(t *testing.T, want string, args ...string) {
	t.Helper()
	out, ok := e.probe(t, args...)
	require.True(t, ok, "netprobe %v was refused: %s", args, out)
	require.Equal(t, want, out, "netprobe %v", args)
}

func (e *egressEnv) mustFail(t *testing.T, args ...string) string {
	t.Helper()
	out, ok := e.probe(t, args...)
	require.False(t, ok, "netprobe %v got through: %s", args, out)
	return out
}

func TestEgress(t *testing.T) {
	// other.test only by its address, on port 80.
	e := newEgressEnv(t, func(fn *fakenet.Net) backend.Egress {
		return backend.Egress{
			Default: "deny",
			Allow:   []string{"allowed.test", "*.allowed.test:80", fn.Addr("other.test").String() + ":80"},
			Deny:    []string{"api.allowed.test"},
		}
	})
	addr := func(name string) string { return e.net.Addr(name).String() }
	allowed, denied, other := addr("allowed.test"), addr("denied.test"), addr("other.test")

	t.Run("allowed name over HTTP and HTTPS", func(t *testing.T) {
		e.mustReach(t, allowed, "lookup", "allowed.test")
		e.mustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
		e.mustReach(t, "hello from allowed.test", "get", "https://allowed.test/")
		e.mustReach(t, "hello from www.allowed.test", "get", "http://www.allowed.test/")
	})
	t.Run("port and deny rules", func(t *testing.T) {
		// *.allowed.test only on port 80; api.allowed.test denied.
		e.mustFail(t, "get", "https://www.allowed.test/")
		e.mustFail(t, "get", "http://api.allowed.test/")
	})
	t.Run("denied names do not resolve and never reach the DNS server", func(t *testing.T) {
		before := e.net.Queries("denied.test")
		e.mustFail(t, "lookup", "denied.test")
		e.mustFail(t, "txt", "secret-data.tunnel.denied.test")
		require.Equal(t, before, e.net.Queries("denied.test"), "a denied name reached the upstream DNS server")
		require.Zero(t, e.net.Queries("secret-data.tunnel.denied.test"), "a tunnelling query reached the upstream DNS server")
	})
	t.Run("direct connections to denied addresses", func(t *testing.T) {
		e.mustFail(t, "get", "http://"+denied+"/", "denied.test")
		// An allowed Host towards an address not resolved for it.
		e.mustFail(t, "get", "http://"+denied+"/", "allowed.test")
		// No name at all.
		e.mustFail(t, "get", "http://"+denied+"/", denied)
	})
	t.Run("SNI spoofing", func(t *testing.T) {
		e.mustFail(t, "tls", denied+":443", "allowed.test")
		e.mustReach(t, "hello from allowed.test", "tls", allowed+":443", "allowed.test")
	})
	t.Run("address rule", func(t *testing.T) {
		e.mustReach(t, "hello from other.test", "get", "http://"+other+"/", other)
		e.mustFail(t, "tls", other+":443", "other.test")
	})
	t.Run("UDP is dropped", func(t *testing.T) {
		e.mustFail(t, "udp", allowed+":7")
	})
	t.Run("denials are recorded", func(t *testing.T) {
		st, err := e.b.EgressStatus(t.Context(), e.sb.ID())
		require.NoError(t, err)
		require.Equal(t, "deny", st.Policy.Default)
		var dns, tcp bool
		for _, d := range st.Denials {
			dns = dns || d.Proto == "dns" && strings.Contains(d.Dest+d.Name, "denied.test")
			tcp = tcp || d.Proto == "tcp" && d.Dest == denied && d.Port == 443 && d.Name == "allowed.test"
		}
		require.True(t, dns, "no dns denial of denied.test in %+v", st.Denials)
		require.True(t, tcp, "no tcp denial of the spoofed SNI in %+v", st.Denials)
	})
	t.Run("root in the sandbox cannot get around it", func(t *testing.T) {
		out := e.mustFail(t, "route-del")
		require.Contains(t, out, "operation not permitted")
		out = e.mustFail(t, "route-add", "0.0.0.0/1", "10.252.0.1")
		require.Contains(t, out, "operation not permitted")
		e.mustFail(t, "raw-udp", denied+":7")
		// Killing every process it can see leaves the enforcer alone.
		_, err := e.sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"sh", "-c", "kill -9 -1; true"}})
		require.NoError(t, err)
		m, err := e.sb.meta()
		require.NoError(t, err)
		st, err := procfs.StartTime(m.EgressNet.PID)
		require.NoError(t, err, "the enforcer is gone")
		require.Equal(t, m.EgressNet.Start, st)
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(m.EgressNet.PID), "status"))
		require.NoError(t, err)
		uid := strconv.Itoa(egressctl.EnforcerUID)
		require.Contains(t, string(status), "\nUid:\t"+uid+"\t"+uid+"\t"+uid+"\t"+uid+"\n", "the enforcer still runs as root")
		e.mustFail(t, "get", "http://"+denied+"/", "denied.test")
		e.mustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
	})
	t.Run("a policy change applies to running connections", func(t *testing.T) {
		out := make(chan string, 1)
		var buf syncbuf.Buffer
		go func() {
			res, err := e.sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"/netprobe", "stream", "http://allowed.test/stream", "allowed.test"}, Stdout: &buf})
			if err != nil {
				out <- err.Error()
				return
			}
			out <- "exit " + strconv.Itoa(res.ExitCode)
		}()
		// The stream is open once it sent a line.
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(buf.String(), "\n") {
			require.True(t, time.Now().Before(deadline), "the stream did not start: %q", buf.String())
			time.Sleep(20 * time.Millisecond)
		}
		changed := time.Now()
		require.NoError(t, e.b.SetEgress(t.Context(), e.sb.ID(), backend.Egress{Default: "deny", Allow: []string{"www.allowed.test"}}))
		select {
		case got := <-out:
			require.Equal(t, "exit 0", got)
			require.Contains(t, buf.String(), "cut:")
			t.Logf("the open connection was cut %v after the change", time.Since(changed).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("the connection the new policy denies is still open after 5 s")
		}
		e.mustFail(t, "lookup", "allowed.test")
		e.mustFail(t, "get", "http://allowed.test/")
		e.mustReach(t, "hello from www.allowed.test", "get", "http://www.allowed.test/")
		st, err := e.b.EgressStatus(t.Context(), e.sb.ID())
		require.NoError(t, err)
		require.Equal(t, []string{"www.allowed.test"}, st.Policy.Allow)
		// Bad rules are refused and change nothing.
		err = e.b.SetEgress(t.Context(), e.sb.ID(), backend.Egress{Allow: []string{"https://x.test"}})
		require.ErrorIs(t, err, backend.ErrInvalidConfig)
		require.Contains(t, err.Error(), "https://x.test")
		e.mustReach(t, "hello from www.allowed.test", "get", "http://www.allowed.test/")
	})
}

// A Reset keeps the sandbox in its enforced network; a fork of it is
// refused (each fork would need a network of its own).
func TestEgressResetAndFork(t *testing.T) {
	e := newEgressEnv(t, func(*fakenet.Net) backend.Egress { return backend.Egress{Allow: []string{"allowed.test:80"}} })
	require.False(t, e.b.CleanReset(backend.Spec{Egress: &backend.Egress{}}), "a pool would reuse a sandbox whose network outlives its Reset")
	for range 2 { // the first Reset, then one from its standby
		require.NoError(t, e.sb.Reset(t.Context()))
		require.NoError(t, e.sb.WriteFile(t.Context(), "/netprobe", bytes.NewReader(netprobe(t)), 0o755))
		e.mustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
		e.mustFail(t, "get", "http://"+e.net.Addr("denied.test").String()+"/", "denied.test")
	}
	_, err := e.sb.Fork(t.Context(), backend.ForkRequest{N: 1})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.Contains(t, err.Error(), "egress")
}

// A sandbox's egress network, enforcer and claim are gone with it, and a
// crashed creator's are reclaimed by PruneCaches.
func TestEgressLeavesNothing(t *testing.T) {
	e := newTestEnv(t)
	fn := fakenet.Start(t)
	e.cfg.EgressDNS = fn.DNS.String()
	b := e.open(t)
	spec := e.spec("egress")
	spec.Egress = &backend.Egress{Allow: []string{"allowed.test"}}
	sb, err := b.Create(t.Context(), spec)
	require.NoError(t, err)
	m, err := sb.(*Sandbox).meta()
	require.NoError(t, err)
	n := m.EgressNet.Index
	requireEgressNet(t, n, true)
	require.NoError(t, sb.Destroy(t.Context()))
	requireEgressNet(t, n, false)
	_, err = procfs.StartTime(m.EgressNet.PID)
	require.Error(t, err, "the enforcer outlived its sandbox")

	// A creator that died after claiming: the claim names a folder that
	// is gone.
	id := "0123456789ab"
	n2, err := b.claimEgress(id)
	require.NoError(t, err)
	host, sbx, err := b.egressAddrs(n2)
	require.NoError(t, err)
	require.NoError(t, makeEgressLink(egressName(n2), host, sbx))
	require.NoError(t, nftApply(t.Context(), egressRules(n2, host, 1)))
	requireEgressNet(t, n2, true)
	names, err := b.PruneCaches(t.Context(), true)
	require.NoError(t, err)
	require.Contains(t, names, "egress network "+egressName(n2))
	requireEgressNet(t, n2, true) // a dry run changes nothing
	names, err = b.PruneCaches(t.Context(), false)
	require.NoError(t, err)
	require.Contains(t, names, "egress network "+egressName(n2))
	requireEgressNet(t, n2, false)
}

// requireEgressNet checks that index n's claim, namespace, interface and
// nftables table all exist, or none does.
func requireEgressNet(t *testing.T, n int, exist bool) {
	t.Helper()
	_, err := os.Stat(filepath.Join(egressRunDir, strconv.Itoa(n)))
	require.Equal(t, exist, err == nil, "claim %d: %v", n, err)
	_, err = os.Stat(filepath.Join(egressNetnsDir, egressName(n)))
	require.Equal(t, exist, err == nil, "network namespace %s: %v", egressName(n), err)
	_, err = netlink.LinkByName(egressName(n))
	require.Equal(t, exist, err == nil, "interface %s: %v", egressName(n), err)
	err = exec.Command("nft", "list", "table", "inet", egressTable(n)).Run()
	require.Equal(t, exist, err == nil, "nftables table %s: %v", egressTable(n), err)
}

// Policies lite cannot enforce are refused before anything is made.
func TestEgressRefused(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	for _, tc := range []struct {
		name string
		mod  func(*backend.Spec)
		want string
	}{
		{"bad rule", func(s *backend.Spec) { s.Egress = &backend.Egress{Allow: []string{"a.*.test"}} }, "a.*.test"},
		{"host network", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Network = "host" }, `network = "host"`},
		{"privileged", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Privileged = true }, "privileged"},
		{"NET_ADMIN", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.CapAdd = []string{"NET_ADMIN"} }, "NET_ADMIN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := e.spec("refused")
			tc.mod(&spec)
			_, err := b.Create(t.Context(), spec)
			require.ErrorIs(t, err, backend.ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.want)
			ids, _ := os.ReadDir(e.cfg.StateDir)
			for _, id := range ids {
				require.False(t, len(id.Name()) == 12, "a refused create left %s", id.Name())
			}
		})
	}
	// A sandbox made without a policy has no enforcer to change.
	sb := create(t, b, e.spec("plain"))
	err := b.SetEgress(t.Context(), sb.ID(), backend.Egress{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = b.EgressStatus(context.Background(), sb.ID())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}
