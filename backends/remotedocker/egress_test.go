package remotedocker_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// A sandbox on the remote engine is held to its policy as on native: the
// enforcer is made, controlled and read through the Engine API over SSH.
// The fake internet is attached to the remote host's namespace, routed to
// and from its containers' bridge.
func TestEgress(t *testing.T) {
	h := remotetest.Get(t)
	fn := fakenet.Start(t)
	rcli := h.DockerClient(t)
	br, err := rcli.NetworkInspect(t.Context(), "bridge", network.InspectOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, br.IPAM.Config, "the remote engine's bridge has no subnet")
	bridge, err := netip.ParsePrefix(br.IPAM.Config[0].Subnet)
	require.NoError(t, err)
	fn.Attach(t, h.NetNS, bridge)

	cfg := config(h)
	cfg.EgressDNS = fn.DNS.String()
	b := open(t, cfg)
	s := spec("egress", dockertest.BusyboxImage)
	p := egresstest.Policy(fn)
	s.Egress = &p
	sb := create(t, b, s)
	e := egresstest.NewEnv(t, fn, b, sb)
	var enforcer string
	list, err := rcli.ContainerList(t.Context(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "sandboxkit.native.egress-for="+sb.ID()))})
	require.NoError(t, err)
	require.Len(t, list, 1, "the remote engine has no enforcer for the sandbox")
	enforcer = list[0].ID
	started := func(t *testing.T) string {
		c, err := rcli.ContainerInspect(t.Context(), enforcer)
		require.NoError(t, err)
		require.True(t, c.State.Running, "the enforcer stopped")
		return c.State.StartedAt
	}
	first := started(t)
	egresstest.Run(t, e, func(t *testing.T) {
		require.Equal(t, first, started(t), "the enforcer restarted")
	})
	// The remote host's services (on its own address and its bridge's
	// gateway), which the enforcer learns over SSH and from the engine.
	egresstest.RunBoundary(t, e, egresstest.HostServiceIn(t, h.NetNS, netip.MustParseAddr(h.Addr)),
		egresstest.HostServiceIn(t, h.NetNS, bridge.Masked().Addr().Next()))
	// Nothing of it is left on the remote engine once the sandbox is gone.
	require.NoError(t, sb.Destroy(t.Context()))
	_, err = rcli.ContainerInspect(t.Context(), enforcer)
	require.Error(t, err, "the enforcer outlived its sandbox")
	var _ backend.EgressController = b
}

// Brokered credentials on the remote engine, as on native: the enforcer
// on the remote host gets its file and this machine's trust store over
// SSH, and adds the value to the sandbox's HTTPS requests.
func TestEgressCredentials(t *testing.T) {
	h := remotetest.Get(t)
	fn := fakenet.Start(t)
	rcli := h.DockerClient(t)
	br, err := rcli.NetworkInspect(t.Context(), "bridge", network.InspectOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, br.IPAM.Config, "the remote engine's bridge has no subnet")
	bridge, err := netip.ParsePrefix(br.IPAM.Config[0].Subnet)
	require.NoError(t, err)
	fn.Attach(t, h.NetNS, bridge)
	egresstest.TrustFakenet(t, fn)
	const value = "remote-real-value-5e0a"
	t.Setenv("SBX_TEST_BROKERED", value)

	cfg := config(h)
	cfg.EgressDNS = fn.DNS.String()
	b := open(t, cfg)
	s := spec("credentials", dockertest.BusyboxImage)
	s.Egress = &backend.Egress{Default: "deny", Allow: []string{"allowed.test"}}
	s.Credentials = []backend.Credential{{Name: "api", Hosts: []string{"allowed.test"}, Header: "X-Api-Key", Env: "API_KEY",
		From: backend.CredentialSource{Env: "SBX_TEST_BROKERED"}}}
	sb := create(t, b, s)
	e := egresstest.NewEnv(t, fn, b, sb)
	e.MustBroker(t, value, "X-Api-Key", "$API_KEY")
	e.MustRecordBrokered(t, "api", value)
	e.MustReach(t, "header", "get", "http://allowed.test/header?name=X-Api-Key")
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: `env; cat /etc/sandboxkit/*`})
	require.NoError(t, err)
	require.NotContains(t, string(res.Stdout), value, "the sandbox can see the value")
	// The remote engine's containers run on this machine: their memory.
	egresstest.MustKeepOutOfMemory(t, sb, value, "sbx-placeholder-")
	egresstest.RotateAndSee(t, b, sb, s.Credentials, e, "rotated-value-remote", 10*time.Second)
	// Forks on the remote engine: enforcers, CAs and placeholders of their
	// own.
	e.MustForkWithOwnCredentials(t, 1, "rotated-value-remote")
}
