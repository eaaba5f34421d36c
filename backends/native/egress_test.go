package native_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/ownertest"
)

// egressBackend is a native backend whose enforcers ask fn's DNS server.
func egressBackend(t *testing.T, fn *fakenet.Net) *native.Backend {
	t.Helper()
	dockertest.RequireImage(t, dockertest.Client(t), dockertest.BusyboxImage)
	b, err := native.New(native.Config{PullPolicy: native.PullNever, EgressDNS: fn.DNS.String(), Runtime: os.Getenv("SBX_NATIVE_RUNTIME")})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// enforcerOf inspects the enforcer container of sandbox sb.
func enforcerOf(t *testing.T, sb backend.Sandbox) container.InspectResponse {
	t.Helper()
	cli := dockertest.Client(t)
	c, err := cli.ContainerInspect(t.Context(), sb.(interface{ ContainerID() string }).ContainerID())
	require.NoError(t, err)
	name := c.Config.Labels["sandboxkit.native.egress"]
	require.NotEmpty(t, name, "the sandbox names no enforcer")
	for _, cp := range []string{"NET_RAW", "NET_ADMIN"} {
		require.True(t, slices.ContainsFunc(c.HostConfig.CapDrop, func(d string) bool { return strings.TrimPrefix(d, "CAP_") == cp }),
			"the sandbox keeps %s (drops %v)", cp, c.HostConfig.CapDrop)
	}
	e, err := cli.ContainerInspect(t.Context(), name)
	require.NoError(t, err)
	// The engine keeps the name, or the ID when the enforcer existed at
	// the sandbox's create.
	require.Contains(t, []container.NetworkMode{container.NetworkMode("container:" + name), container.NetworkMode("container:" + e.ID)},
		c.HostConfig.NetworkMode, "the sandbox is not in its enforcer's network")
	return e
}

func trimCaps(caps []string) []string {
	var out []string
	for _, c := range caps {
		out = append(out, strings.TrimPrefix(c, "CAP_"))
	}
	return out
}

func TestEgress(t *testing.T) {
	t.Parallel()
	fn := fakenet.Start(t)
	b := egressBackend(t, fn)
	s := spec("egress", dockertest.BusyboxImage)
	p := egresstest.Policy(fn)
	s.Egress = &p
	sb := create(t, b, s)
	e := egresstest.NewEnv(t, fn, b, sb)
	before := enforcerOf(t, sb)
	require.Equal(t, []string{"NET_ADMIN"}, trimCaps(before.HostConfig.CapAdd))
	require.Equal(t, []string{"ALL"}, trimCaps(before.HostConfig.CapDrop))
	egresstest.Run(t, e, func(t *testing.T) {
		after := enforcerOf(t, sb)
		require.True(t, after.State.Running, "the enforcer stopped")
		require.Equal(t, before.State.StartedAt, after.State.StartedAt, "the enforcer restarted")
	})
}

// Published ports of a sandbox with a policy are its enforcer's (which
// owns the network); connections from outside reach the sandbox.
// The edges of the boundary (egresstest.RunBoundary), with services on
// addresses of the Docker host: the fake internet's host end and the
// default bridge's gateway. The enforcer runs in the sandbox's namespace,
// where neither is an address of its own.
func TestEgressBoundary(t *testing.T) {
	t.Parallel()
	fn := fakenet.Start(t)
	b := egressBackend(t, fn)
	s := spec("egress-boundary", dockertest.BusyboxImage)
	p := egresstest.Policy(fn)
	s.Egress = &p
	sb := create(t, b, s)
	e := egresstest.NewEnv(t, fn, b, sb)
	bridge, err := dockertest.Client(t).NetworkInspect(t.Context(), "bridge", network.InspectOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, bridge.IPAM.Config, "the default bridge has no address")
	// Its config may name no gateway: the engine takes the subnet's first.
	gw := netip.MustParsePrefix(bridge.IPAM.Config[0].Subnet).Masked().Addr().Next()
	egresstest.RunBoundary(t, e, egresstest.HostService(t, fn.HostAddr), egresstest.HostService(t, gw))
}

func TestEgressPorts(t *testing.T) {
	t.Parallel()
	fn := fakenet.Start(t)
	b := egressBackend(t, fn)
	s := spec("egress-ports", dockertest.BusyboxImage)
	s.Egress = &backend.Egress{Default: "deny"}
	s.Ports = []backend.Port{{Port: 8080}}
	s.Command = []string{"httpd", "-f", "-p", "8080", "-h", "/etc"}
	sb := create(t, b, s)
	addr, err := sb.(backend.Endpointer).Endpoint(t.Context(), 8080)
	require.NoError(t, err)
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "GET /hostname HTTP/1.0\r\n\r\n")
			data, _ := io.ReadAll(c)
			c.Close()
			if body = string(data); strings.Contains(body, "200 OK") {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the published port %s does not answer: %v %q", addr, err, body)
		time.Sleep(100 * time.Millisecond)
	}
}

// A sandbox's enforcer goes with it; one left by a sandbox removed behind
// sandboxkit's back is reclaimed by PruneCaches.
func TestEgressLeavesNothing(t *testing.T) {
	// Not parallel: it changes the package's grace for enforcers.
	fn := fakenet.Start(t)
	b := egressBackend(t, fn)
	cli := dockertest.Client(t)
	s := spec("egress-leak", dockertest.BusyboxImage)
	s.Egress = &backend.Egress{Allow: []string{"allowed.test"}}
	sb, err := b.Create(t.Context(), s)
	require.NoError(t, err)
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	name := enforcerOf(t, sb).Name
	require.NoError(t, sb.Destroy(t.Context()))
	_, err = cli.ContainerInspect(t.Context(), name)
	require.Error(t, err, "the enforcer outlived its sandbox")

	sb2, err := b.Create(t.Context(), s)
	require.NoError(t, err)
	t.Cleanup(func() { sb2.Destroy(context.Background()) })
	sb = sb2
	name = strings.TrimPrefix(enforcerOf(t, sb).Name, "/")
	require.NoError(t, cli.ContainerRemove(t.Context(), sb.(interface{ ContainerID() string }).ContainerID(), container.RemoveOptions{Force: true}))
	// Its creator (this process) lives: within the grace it may be a
	// Create in progress.
	names, err := b.PruneCaches(t.Context(), true)
	require.NoError(t, err)
	require.NotContains(t, names, "egress enforcer "+name)
	defer native.SetEnforcerGrace(0)()
	names, err = b.PruneCaches(t.Context(), true)
	require.NoError(t, err)
	require.Contains(t, names, "egress enforcer "+name)
	_, err = cli.ContainerInspect(t.Context(), name)
	require.NoError(t, err, "a dry run removed the enforcer")
	names, err = b.PruneCaches(t.Context(), false)
	require.NoError(t, err)
	require.Contains(t, names, "egress enforcer "+name)
	_, err = cli.ContainerInspect(t.Context(), name)
	require.Error(t, err, "PruneCaches left the enforcer")
	// The enforcer of a live sandbox stays.
	live := create(t, b, s)
	names, err = b.PruneCaches(t.Context(), false)
	require.NoError(t, err)
	require.False(t, slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "egress enforcer") }), "pruned %v", names)
	require.True(t, enforcerOf(t, live).State.Running)
}

// Policies native cannot hold a sandbox to are refused before anything is
// made.
func TestEgressRefused(t *testing.T) {
	t.Parallel()
	fn := fakenet.Start(t)
	b := egressBackend(t, fn)
	for _, tc := range []struct {
		name string
		mod  func(*backend.Spec)
		want string
	}{
		{"bad rule", func(s *backend.Spec) { s.Egress = &backend.Egress{Allow: []string{"a.*.test"}} }, "a.*.test"},
		{"host network", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Network = "host" }, `network = "host"`},
		{"no network", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Network = "none" }, `network = "none"`},
		{"privileged", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Privileged = true }, "privileged"},
		{"NET_RAW", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.CapAdd = []string{"NET_RAW"} }, "NET_RAW"},
		{"NET_ADMIN", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.CapAdd = []string{"cap_net_admin"} }, "cap_net_admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec("refused", dockertest.BusyboxImage)
			tc.mod(&s)
			_, err := b.Create(t.Context(), s)
			require.ErrorIs(t, err, backend.ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// A fork carries the policy, on an enforcer of its own that goes
	// with it.
	s := spec("egress-fork", dockertest.BusyboxImage)
	s.Egress = &backend.Egress{Allow: []string{"allowed.test"}}
	sb := create(t, b, s)
	forks, err := sb.(backend.Forker).Fork(t.Context(), backend.ForkRequest{N: 1})
	require.NoError(t, err)
	fst, err := b.EgressStatus(t.Context(), forks[0].ID())
	require.NoError(t, err)
	require.Equal(t, []string{"allowed.test"}, fst.Policy.Allow)
	cli := dockertest.Client(t)
	_, err = cli.ContainerInspect(t.Context(), "sbxe-"+forks[0].ID())
	require.NoError(t, err, "the fork has no enforcer of its own")
	require.NoError(t, forks[0].Destroy(t.Context()))
	_, err = cli.ContainerInspect(t.Context(), "sbxe-"+forks[0].ID())
	require.Error(t, err, "the fork's enforcer outlived it")
	_, err = cli.ContainerInspect(t.Context(), "sbxe-"+sb.ID())
	require.NoError(t, err, "the fork's removal took its parent's enforcer")
	// A sandbox made without a policy has no enforcer to change.
	plain := create(t, b, spec("plain", dockertest.BusyboxImage))
	err = b.SetEgress(t.Context(), plain.ID(), backend.Egress{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = b.EgressStatus(context.Background(), plain.ID())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.True(t, b.Capabilities().Egress)
}

// With egress_spares, a create with a policy claims an enforcer started
// ahead (renamed to the sandbox's), which holds the sandbox to the policy
// as one of its own would; another is started after the create, Close
// removes those not claimed, and PruneCaches removes a dead process's.
func TestEgressSpares(t *testing.T) {
	// Not parallel: it changes the package's grace for enforcers.
	fn := fakenet.Start(t)
	dockertest.RequireImage(t, dockertest.Client(t), dockertest.BusyboxImage)
	b, err := native.New(native.Config{PullPolicy: native.PullNever, EgressDNS: fn.DNS.String(), EgressSpares: 1, Runtime: os.Getenv("SBX_NATIVE_RUNTIME")})
	require.NoError(t, err)
	closed := false
	t.Cleanup(func() {
		if !closed {
			b.Close()
		}
	})
	cli := dockertest.Client(t)
	spares := func() []string {
		list, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", "sandboxkit.native.egress-spare"), filters.Arg("label", backend.LabelCreator+"="+owner.Self()))})
		require.NoError(t, err)
		var names []string
		for _, c := range list {
			if n := strings.TrimPrefix(c.Names[0], "/"); strings.HasPrefix(n, "sbxe-spare-") {
				names = append(names, n)
			}
		}
		return names
	}
	s := spec("egress-spares", dockertest.BusyboxImage)
	p := egresstest.Policy(fn)
	s.Egress = &p
	// The first create starts its own enforcer, then a spare.
	first := create(t, b, s)
	require.Empty(t, enforcerOf(t, first).Config.Labels["sandboxkit.native.egress-spare"], "the first create claimed a spare")
	require.Eventually(t, func() bool { return b.SparesReady() == 1 }, 60*time.Second, 20*time.Millisecond, "no spare was started")
	require.Len(t, spares(), 1)

	// Another policy is another config: no spare of it yet.
	other := s
	other.Egress = &backend.Egress{Default: "deny"}
	require.Empty(t, enforcerOf(t, create(t, b, other)).Config.Labels["sandboxkit.native.egress-spare"], "a create claimed the spare of another policy")

	start := time.Now()
	sb := create(t, b, s)
	e := enforcerOf(t, sb)
	require.NotEmpty(t, e.Config.Labels["sandboxkit.native.egress-spare"], "the create did not claim the spare")
	require.Equal(t, "/sbxe-"+sb.ID(), e.Name)
	created, err := time.Parse(time.RFC3339Nano, e.Created)
	require.NoError(t, err)
	require.True(t, created.Before(start), "the claimed enforcer was made by the create (%s, create at %s)", created, start)
	require.Equal(t, []string{"NET_ADMIN"}, trimCaps(e.HostConfig.CapAdd))
	require.Equal(t, []string{"ALL"}, trimCaps(e.HostConfig.CapDrop))
	egresstest.Run(t, egresstest.NewEnv(t, fn, b, sb), func(t *testing.T) {
		require.True(t, enforcerOf(t, sb).State.Running, "the enforcer stopped")
	})
	require.Eventually(t, func() bool { return b.SparesReady() >= 1 }, 60*time.Second, 20*time.Millisecond, "the spare was not replaced")

	// A live process's spares are not leftovers, however old.
	defer native.SetEnforcerGrace(0)()
	names, err := b.PruneCaches(t.Context(), true)
	require.NoError(t, err)
	for _, n := range spares() {
		require.NotContains(t, names, "egress enforcer "+n)
	}
	// A dead process's are.
	dead := ownertest.Gone(t)
	dc, err := cli.ContainerCreate(t.Context(), &container.Config{Image: dockertest.BusyboxImage, Cmd: []string{"sleep", "600"},
		Labels: map[string]string{backend.LabelBackend: native.Name, "sandboxkit.native.egress-for": "",
			"sandboxkit.native.egress-spare": "0123", backend.LabelCreator: dead}}, nil, nil, nil, "sbxe-spare-dead"+sb.ID())
	require.NoError(t, err)
	t.Cleanup(func() { cli.ContainerRemove(context.Background(), dc.ID, container.RemoveOptions{Force: true}) })
	names, err = b.PruneCaches(t.Context(), false)
	require.NoError(t, err)
	require.Contains(t, names, "egress enforcer sbxe-spare-dead"+sb.ID())
	_, err = cli.ContainerInspect(t.Context(), dc.ID)
	require.Error(t, err, "PruneCaches left a dead process's spare")

	// Close removes the spares not claimed; claimed ones stay with their
	// sandboxes.
	require.NotEmpty(t, spares())
	require.NoError(t, b.Close())
	closed = true
	require.Empty(t, spares(), "Close left spares")
	_, err = cli.ContainerInspect(t.Context(), "sbxe-"+sb.ID())
	require.NoError(t, err, "Close removed a claimed enforcer")
}

// Brokered credentials on native: the enforcer's container reads them (and
// verifies the real servers against this host's trust store, which
// $SSL_CERT_FILE names here); the sandbox's container trusts its CA and
// holds a placeholder; the value reaches the server only over HTTPS, and
// is nowhere the sandbox can look.
func TestEgressCredentialsNative(t *testing.T) {
	fn := fakenet.Start(t)
	egresstest.TrustFakenet(t, fn)
	const value = "native-real-value-81d2"
	t.Setenv("SBX_TEST_BROKERED", value)
	b := egressBackend(t, fn)
	s := spec("credentials", dockertest.BusyboxImage)
	s.Egress = &backend.Egress{Default: "deny", Allow: []string{"allowed.test"}}
	s.Credentials = []backend.Credential{{Name: "api", Hosts: []string{"allowed.test"}, Header: "X-Api-Key", Env: "API_KEY",
		From: backend.CredentialSource{Env: "SBX_TEST_BROKERED"}}}
	sb := create(t, b, s)
	env := egresstest.NewEnv(t, fn, b, sb)
	env.MustBroker(t, value, "X-Api-Key", "$API_KEY")
	env.MustBroker(t, value)
	env.MustReach(t, "header", "get", "http://allowed.test/header?name=X-Api-Key")

	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: `echo "$API_KEY"; env; cat /etc/sandboxkit/*; grep -rl ` + value + ` /etc /root /tmp /home 2>/dev/null; true`})
	require.NoError(t, err)
	out := string(res.Stdout) + string(res.Stderr)
	require.NotContains(t, out, value, "the sandbox can see the value")
	require.True(t, strings.HasPrefix(out, "sbx-placeholder-api-"), "API_KEY is not a placeholder: %.80q", out)
	require.Contains(t, out, "SSL_CERT_FILE=/etc/sandboxkit/ca-bundle.pem")
	inspect, err := dockertest.Client(t).ContainerInspect(t.Context(), sb.(interface{ ContainerID() string }).ContainerID())
	require.NoError(t, err)
	require.NotContains(t, strings.Join(inspect.Config.Env, " "), value, "the value is in the sandbox container's config")
	env.MustRecordBrokered(t, "api", value)
	if rt := os.Getenv("SBX_NATIVE_RUNTIME"); rt == "" || rt == "runc" { // gVisor: the memory is its sentry's
		egresstest.MustKeepOutOfMemory(t, sb, value, strings.TrimSpace(strings.SplitN(out, "\n", 2)[0]))
	}
	egresstest.RotateAndSee(t, b, sb, s.Credentials, env, "rotated-value-77aa", 10*time.Second)
	// Forks: an enforcer, CA and placeholders of their own, the value
	// applied again.
	for _, fe := range env.MustForkWithOwnCredentials(t, 2, "rotated-value-77aa") {
		if rt := os.Getenv("SBX_NATIVE_RUNTIME"); rt == "" || rt == "runc" {
			egresstest.MustKeepOutOfMemory(t, fe.Sandbox, "rotated-value-77aa", "sbx-placeholder-")
		}
	}
	// What a bundle or a move carries holds no secret; the sandbox made
	// from it gets its own placeholder and CA and the value again.
	env.MustRestoreWithoutSecrets(t, b, s, "rotated-value-77aa", value)
}
