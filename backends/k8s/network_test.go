package k8s_test

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// network = "host" is hostNetwork.
func TestNetworkHost(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	s := spec("hostnet", k8stest.BusyboxImage)
	s.Network = "host"
	sb := create(t, b, s)
	ctx := t.Context()
	pod, err := c.Client(t).CoreV1().Pods(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, pod.Spec.HostNetwork)
	// The pod sees the node's address.
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"ip", "-o", "addr"}})
	require.NoError(t, err)
	assert.Contains(t, string(res.Stdout), pod.Status.HostIP)
}

// network = "none" is a deny-all NetworkPolicy. The harness's CNI (the
// plain bridge plugin) does not enforce NetworkPolicies, so Create must
// find the pod still reaching its node and refuse, leaving nothing.
func TestNetworkNoneNotEnforced(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	s := spec("nonet", k8stest.BusyboxImage)
	s.Network = "none"
	_, err := b.Create(t.Context(), s)
	require.Error(t, err)
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "does not enforce NetworkPolicies")
	infos, err := b.List(t.Context(), backend.Filter{Name: "nonet"})
	require.NoError(t, err)
	assert.Empty(t, infos, "the refused Create left its pod")
	// The policy goes with the pod (owner reference).
	cs := c.Client(t)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		nps, err := cs.NetworkingV1().NetworkPolicies(ns).List(t.Context(), metav1.ListOptions{LabelSelector: backend.LabelBackend + "=k8s"})
		require.NoError(t, err)
		if len(nps.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("network policy %s still there 2 minutes after the refused Create", nps.Items[0].Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// What no pod can do is refused before anything is made, naming the key
// and why.
func TestRefusedSpecs(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	for _, c := range []struct {
		name string
		set  func(*backend.Spec)
		want []string
		is   error
	}{
		{"pids_limit", func(s *backend.Spec) { s.Resources.PidsLimit = 100 }, []string{"pids_limit", "podPidsLimit"}, errors.ErrUnsupported},
		{"named network", func(s *backend.Spec) { s.Network = "sbx-session-net" }, []string{`network "sbx-session-net"`}, errors.ErrUnsupported},
		{"security_opt file", func(s *backend.Spec) { s.SecurityOpt = []string{"seccomp=/etc/profile.json"} }, []string{"security_opt", "seccomp=/etc/profile.json"}, errors.ErrUnsupported},
		{"udp host port", func(s *backend.Spec) { s.Ports = []backend.Port{{Port: 53, Protocol: "udp", HostPort: 5353}} }, []string{"53/udp", "TCP only"}, errors.ErrUnsupported},
		{"user name", func(s *backend.Spec) { s.User = "nobody" }, []string{`user "nobody"`, "runAsUser"}, backend.ErrInvalidConfig},
		{"build", func(s *backend.Spec) { s.Build = &backend.Build{ContextDir: "/tmp"} }, []string{"dockerfile build"}, errors.ErrUnsupported},
	} {
		s := spec("refused", k8stest.BusyboxImage)
		c.set(&s)
		_, err := b.Create(t.Context(), s)
		if assert.Error(t, err, c.name) {
			assert.ErrorIs(t, err, c.is, c.name)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w, c.name)
			}
		}
	}
	infos, err := b.List(t.Context(), backend.Filter{})
	require.NoError(t, err)
	assert.Empty(t, infos)
}

// security_opt seccomp=unconfined reaches the pod's security context.
func TestSecurityOpt(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	s := spec("secopt", k8stest.BusyboxImage)
	s.SecurityOpt = []string{"seccomp=unconfined", "no-new-privileges:true"}
	sb := create(t, b, s)
	pod, err := c.Client(t).CoreV1().Pods(ns).Get(t.Context(), sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	sc := pod.Spec.Containers[0].SecurityContext
	require.NotNil(t, sc.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeUnconfined, sc.SeccompProfile.Type)
	require.NotNil(t, sc.AllowPrivilegeEscalation)
	assert.False(t, *sc.AllowPrivilegeEscalation)
}

// A port with a host port listens there on this machine from Create on
// (a port forward through the API server), as Docker's published ports do;
// a connection made before the pod's server listens is closed and does not
// end the forward.
func TestHostPort(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hostPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := spec("hostport", k8stest.BusyboxImage)
	s.Ports = []backend.Port{{Port: 8080, HostPort: hostPort}}
	sb := create(t, b, s)
	ctx := t.Context()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort))
	e, _ := backend.As[backend.Endpointer](sb)
	got, err := e.Endpoint(ctx, 8080)
	require.NoError(t, err)
	assert.Equal(t, addr, got)
	early, err := dialRead(addr)
	require.Empty(t, early, "nothing listens in the pod yet (%v)", err)
	startGreeter(t, sb, 8080, "hello-host-port")
	out, err := dialRead(addr)
	require.NoError(t, err, "the host port after an early connection")
	assert.Contains(t, out, "hello-host-port")
}
