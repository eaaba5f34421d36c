package k8s

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

func TestDirectTarget(t *testing.T) {
	running := corev1.PodStatus{PodIP: "10.0.0.7"}
	for _, c := range []struct {
		name   string
		pod    corev1.Pod
		ip     string
		reason string
	}{
		{"pod network", corev1.Pod{Status: running}, "10.0.0.7", ""},
		{"host network", corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}, Status: running}, "", "node's network"},
		{"no network", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotationNetwork: "none"}}, Status: running}, "", `network = "none"`},
		{"no IP", corev1.Pod{}, "", "no IP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ip, why := directTarget(&c.pod)
			assert.Equal(t, c.ip, ip)
			if c.reason == "" {
				assert.Empty(t, why)
			} else {
				assert.Contains(t, why, c.reason)
			}
		})
	}
}

func TestDialDirectOff(t *testing.T) {
	off := false
	b := newBackend(Config{DirectAgent: &off}, nil, nil, nil, "ns")
	s := &Sandbox{b: b, id: "p", pod: "p", podIP: "10.0.0.7"}
	_, err := s.DialDirect(t.Context(), 1234)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "direct_agent = false")

	s = &Sandbox{b: newBackend(Config{}, nil, nil, nil, "ns"), id: "p", pod: "p", noDirect: "the pod has no IP address"}
	_, err = s.DialDirect(t.Context(), 1234)
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// A pod whose IP this process cannot reach (here: an address of
// TEST-NET-3, which goes nowhere): one short probe, then the exec stream
// carries every call.
func TestDirectUnreachablePodIP(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	b, err := New(Config{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace(t), ImagePullPolicy: "IfNotPresent"})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	ctx := t.Context()
	sb, err := b.Create(ctx, backend.Spec{Name: "unreachable", Image: k8stest.BusyboxImage, TTL: 30 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, sb.Destroy(ctx))
	})
	sb.(*Sandbox).podIP = "203.0.113.1"
	start := time.Now()
	cl, err := sbxd.Wrap(ctx, sb)
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	t.Logf("agent started in %v (with the failed probe)", time.Since(start))
	info, err := cl.Agent(ctx)
	require.NoError(t, err)
	assert.False(t, info.Direct)
	res, err := cl.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "ok"}})
	require.NoError(t, err)
	assert.Equal(t, "ok\n", string(res.Stdout))
	info, err = cl.Agent(ctx)
	require.NoError(t, err)
	assert.Zero(t, info.DirectStreams)
}
