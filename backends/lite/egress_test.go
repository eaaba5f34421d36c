package lite

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// egressEnv is a sandbox with a policy, on the fake internet.
type egressEnv struct {
	egresstest.Env
	b  *Backend
	sb *Sandbox
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
	return &egressEnv{Env: *egresstest.NewEnv(t, fn, b, sb), b: b, sb: sb}
}

func TestEgress(t *testing.T) {
	e := newEgressEnv(t, egresstest.Policy)
	egresstest.Run(t, &e.Env, func(t *testing.T) {
		m, err := e.sb.meta()
		require.NoError(t, err)
		st, err := procfs.StartTime(m.EgressNet.PID)
		require.NoError(t, err, "the enforcer is gone")
		require.Equal(t, m.EgressNet.Start, st)
		status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(m.EgressNet.PID), "status"))
		require.NoError(t, err)
		uid := strconv.Itoa(egressctl.EnforcerUID)
		require.Contains(t, string(status), "\nUid:\t"+uid+"\t"+uid+"\t"+uid+"\t"+uid+"\n", "the enforcer still runs as root")
	})
}

// A Reset keeps the sandbox in its enforced network; a fork of it gets a
// network and enforcer of its own with the same policy, gone with it.
func TestEgressResetAndFork(t *testing.T) {
	e := newEgressEnv(t, func(*fakenet.Net) backend.Egress { return backend.Egress{Allow: []string{"allowed.test:80"}} })
	require.False(t, e.b.CleanReset(backend.Spec{Egress: &backend.Egress{}}), "a pool would reuse a sandbox whose network outlives its Reset")
	for range 2 { // the first Reset, then one from its standby
		require.NoError(t, e.sb.Reset(t.Context()))
		e.Install(t)
		e.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
		e.MustFail(t, "get", "http://"+e.Net.Addr("denied.test").String()+"/", "denied.test")
	}
	forks, err := e.sb.Fork(t.Context(), backend.ForkRequest{N: 1})
	require.NoError(t, err)
	f := forks[0].(*Sandbox)
	fe := egresstest.NewEnv(t, e.Net, e.b, f)
	fe.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
	fe.MustFail(t, "get", "http://"+e.Net.Addr("denied.test").String()+"/", "denied.test")
	fm, err := f.meta()
	require.NoError(t, err)
	pm, err := e.sb.meta()
	require.NoError(t, err)
	require.NotEqual(t, pm.EgressNet.Index, fm.EgressNet.Index, "the fork shares its parent's network")
	require.NoError(t, f.Destroy(t.Context()))
	requireEgressNet(t, fm.EgressNet.Index, false)
	requireEgressNet(t, pm.EgressNet.Index, true)
	e.MustReach(t, "hello from allowed.test", "get", "http://allowed.test/")
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
	deny, err := egress.NewPolicy("deny", nil, nil)
	require.NoError(t, err)
	require.NoError(t, nftApply(t.Context(), egressRules(n2, host, 1, deny, nil)))
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

// The edges of the boundary (egresstest.RunBoundary), with a service on
// an address of this host (the fake internet's host end is one), and the
// enforcer's own ports, which only its sandbox may reach.
func TestEgressBoundary(t *testing.T) {
	e := newEgressEnv(t, egresstest.Policy)
	m, err := e.sb.meta()
	require.NoError(t, err)
	host, _, err := e.b.egressAddrs(m.EgressNet.Index)
	require.NoError(t, err)
	t.Run("the enforcer's ports take nothing from outside its sandbox", func(t *testing.T) {
		for _, port := range []int{53, egressctl.ProxyPort} {
			c, err := net.DialTimeout("tcp", netip.AddrPortFrom(host, uint16(port)).String(), 5*time.Second)
			if err == nil {
				c.Close()
			}
			require.Error(t, err, "this host reached the enforcer's port %d", port)
		}
		// UDP: a query from here gets no answer (refused or unanswered).
		c, err := net.Dial("udp", netip.AddrPortFrom(host, 53).String())
		require.NoError(t, err)
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		c.Write([]byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, 'a', 'l', 'l', 'o', 'w', 'e', 'd', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1})
		_, err = c.Read(make([]byte, 512))
		require.Error(t, err, "the enforcer's resolver answered this host")
		// Its sandbox still resolves through it.
		e.MustReach(t, e.Net.Addr("allowed.test").String(), "lookup", "allowed.test")
	})
	egresstest.RunBoundary(t, &e.Env, egresstest.HostService(t, e.Net.HostAddr))
}

// A one-shot sandbox (RunOnce) is held by its policy as one made by
// Create, and its network and enforcer go with it.
func TestRunOnceEgress(t *testing.T) {
	e := newTestEnv(t)
	fn := fakenet.Start(t)
	e.cfg.EgressDNS = fn.DNS.String()
	b := e.open(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "netprobe"), egresstest.Netprobe(t), 0o755))
	spec := e.spec("egress-once")
	spec.Egress = &backend.Egress{Allow: []string{"allowed.test:80"}}
	spec.Volumes = []backend.Volume{{Type: backend.VolumeBind, Source: dir, Target: "/probe", ReadOnly: true}}
	res, err := b.RunOnce(t.Context(), spec, backend.ExecRequest{
		Shell: "/probe/netprobe get http://allowed.test/ && ! /probe/netprobe get http://" + fn.Addr("denied.test").String() + "/ && echo denied",
	})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "stdout %q, stderr %q", res.Stdout, res.Stderr)
	require.Contains(t, string(res.Stdout), "hello from allowed.test")
	require.Contains(t, string(res.Stdout), "denied")
}
