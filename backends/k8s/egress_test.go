package k8s_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// A pod with a policy is held to it by its enforcer sidecar, which needs
// no NetworkPolicy support (the harness's bridge plugin has none). The
// fake internet is attached to the node's namespace, routed to and from
// the pods.
func TestEgress(t *testing.T) {
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	require.NotEmpty(t, c.NetNS, "the harness's env names no node namespace (SBX_K8S_NETNS): rerun scripts/k8s-harness.sh up")
	pods, err := netip.ParsePrefix(c.PodCIDR)
	require.NoError(t, err, "SBX_K8S_POD_CIDR")
	fn := fakenet.Start(t)
	fn.Attach(t, c.NetNS, pods)
	b, err := k8s.New(k8s.Config{Kubeconfig: c.Kubeconfig, Namespace: ns, ImagePullPolicy: "IfNotPresent",
		StartTimeoutSec: 120, EgressDNS: fn.DNS.String()})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	require.True(t, b.Capabilities().Egress)

	s := spec("egress", k8stest.BusyboxImage)
	p := egresstest.Policy(fn)
	s.Egress = &p
	sb := create(t, b, s)
	e := egresstest.NewEnv(t, fn, b, sb)
	cs := c.Client(t)
	sidecar := func(t *testing.T) corev1.ContainerStatus {
		pod, err := cs.CoreV1().Pods(ns).Get(t.Context(), sb.ID(), metav1.GetOptions{})
		require.NoError(t, err)
		for _, st := range pod.Status.InitContainerStatuses {
			if st.Name == "egress" {
				return st
			}
		}
		t.Fatalf("the pod has no enforcer: %+v", pod.Status.InitContainerStatuses)
		return corev1.ContainerStatus{}
	}
	egresstest.Run(t, e, func(t *testing.T) {
		st := sidecar(t)
		require.NotNil(t, st.State.Running, "the enforcer is not running: %+v", st.State)
		require.Zero(t, st.RestartCount, "the enforcer restarted")
	})
	// The node's services: on its address (from the API, which the
	// backend names to the enforcer) and on the pods' gateway (the
	// node's bridge, which the enforcer finds in its namespace).
	nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var hosts []string
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				hosts = append(hosts, egresstest.HostServiceIn(t, c.NetNS, ip))
			}
		}
	}
	require.NotEmpty(t, hosts, "the node has no InternalIP")
	hosts = append(hosts, egresstest.HostServiceIn(t, c.NetNS, pods.Masked().Addr().Next()))
	egresstest.RunBoundary(t, e, hosts...)

	// The entry's own command waits for the enforcer: its first
	// connection is already held to the policy. (An HTTP request by nc:
	// this image's static busybox wget crashes on its service lookup.)
	dest := fn.Addr("allowed.test").String()
	get := "printf 'GET / HTTP/1.0\\r\\nHost: allowed.test\\r\\n\\r\\n' | nc -w 3 " + dest + " 80"
	s = spec("egress-cmd", k8stest.BusyboxImage)
	s.Egress = &backend.Egress{Default: "deny"}
	s.Command = []string{"sh", "-c", get + " > /tmp/got 2>&1; touch /tmp/done; sleep 3600"}
	sb2 := create(t, b, s)
	res, err := sb2.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"sh", "-c", "while [ ! -e /tmp/done ]; do sleep 0.1; done; cat /tmp/got"}})
	require.NoError(t, err)
	require.NotContains(t, string(res.Stdout), "hello from", "the entry's command reached a denied address")
	// It was the enforcer that refused it: the attempt is among its
	// denials ...
	st, err := b.EgressStatus(t.Context(), sb2.ID())
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(st.Denials, func(d backend.EgressDenial) bool { return d.Proto == "tcp" && d.Dest == dest }),
		"the enforcer recorded no denial of %s (denials %+v; the command got %q)", dest, st.Denials, res.Stdout)
	// ... and once the policy allows the address, the same request works.
	require.NoError(t, b.SetEgress(t.Context(), sb2.ID(), backend.Egress{Default: "deny", Allow: []string{dest}}))
	res, err = sb2.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"sh", "-c", get}})
	require.NoError(t, err)
	require.Contains(t, string(res.Stdout), "hello from allowed.test", "the request after the policy allowed %s: %q %q", dest, res.Stdout, res.Stderr)
}

// Policies a pod cannot be held to are refused, saying why, and make
// nothing.
func TestEgressRefused(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	for _, tc := range []struct {
		name string
		mod  func(*backend.Spec)
		want string
		err  error
	}{
		{"bad rule", func(s *backend.Spec) { s.Egress = &backend.Egress{Allow: []string{"a.*.test"}} }, "a.*.test", backend.ErrInvalidConfig},
		{"host network", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Network = "host" }, `network = "host"`, backend.ErrInvalidConfig},
		{"privileged", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.Privileged = true }, "privileged", backend.ErrInvalidConfig},
		{"NET_RAW", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.CapAdd = []string{"NET_RAW"} }, "NET_RAW", backend.ErrInvalidConfig},
		{"image command", func(s *backend.Spec) { s.Egress = &backend.Egress{}; s.ImageCommand = true }, "image's own command", errors.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec("refused", k8stest.BusyboxImage)
			tc.mod(&s)
			_, err := b.Create(t.Context(), s)
			require.ErrorIs(t, err, tc.err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, pods.Items, "a refused create made a pod")
	// A sandbox made without a policy has no enforcer to change.
	plain := create(t, b, spec("plain", k8stest.BusyboxImage))
	err = b.SetEgress(t.Context(), plain.ID(), backend.Egress{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = b.EgressStatus(context.Background(), plain.ID())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// Brokered credentials on k8s: the sidecar gets its file (and this host's
// trust store) once the pod runs, before the enforcer starts; the sandbox
// trusts its CA through the bundle in the sbx volume and holds a
// placeholder; the value reaches the server only over HTTPS.
func TestEgressCredentials(t *testing.T) {
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	require.NotEmpty(t, c.NetNS, "the harness's env names no node namespace (SBX_K8S_NETNS): rerun scripts/k8s-harness.sh up")
	pods, err := netip.ParsePrefix(c.PodCIDR)
	require.NoError(t, err, "SBX_K8S_POD_CIDR")
	fn := fakenet.Start(t)
	fn.Attach(t, c.NetNS, pods)
	egresstest.TrustFakenet(t, fn)
	const value = "k8s-real-value-c41b"
	t.Setenv("SBX_TEST_BROKERED", value)
	b, err := k8s.New(k8s.Config{Kubeconfig: c.Kubeconfig, Namespace: ns, ImagePullPolicy: "IfNotPresent",
		StartTimeoutSec: 120, EgressDNS: fn.DNS.String()})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })

	s := spec("credentials", k8stest.BusyboxImage)
	s.Egress = &backend.Egress{Default: "deny", Allow: []string{"allowed.test"}}
	s.Credentials = []backend.Credential{{Name: "api", Hosts: []string{"allowed.test"}, Header: "X-Api-Key", Env: "API_KEY",
		From: backend.CredentialSource{Env: "SBX_TEST_BROKERED"}}}
	sb := create(t, b, s)
	e := egresstest.NewEnv(t, fn, b, sb)
	e.MustBroker(t, value, "X-Api-Key", "$API_KEY")
	e.MustRecordBrokered(t, "api", value)
	e.MustReach(t, "header", "get", "http://allowed.test/header?name=X-Api-Key")
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: `echo "$API_KEY"; env; cat /.sbx/*.pem`})
	require.NoError(t, err)
	out := string(res.Stdout)
	require.NotContains(t, out, value, "the sandbox can see the value")
	require.True(t, strings.HasPrefix(out, "sbx-placeholder-api-"), "API_KEY is not a placeholder: %.80q", out)
	pod, err := c.Client(t).CoreV1().Pods(ns).Get(t.Context(), sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	podSpec, _ := json.Marshal(pod.Spec)
	require.NotContains(t, string(podSpec), value, "the value is in the pod's spec")
	// The sandbox container's processes (the node is this machine).
	egresstest.MustKeepOutOfMemory(t, sb, value, "sbx-placeholder-")

	egresstest.RotateAndSee(t, b, sb, s.Credentials, e, "rotated-value-k8s", 20*time.Second)
}
