package k8s_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// startPod makes a pod outside sandboxkit (as a user would with kubectl)
// and waits until it reaches phase; it is deleted at the end of the test.
func startPod(t *testing.T, cs kubernetes.Interface, ns, name string, command []string, phase corev1.PodPhase) *corev1.Pod {
	t.Helper()
	ctx := t.Context()
	grace := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "app", Image: k8stest.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: command, WorkingDir: "/tmp",
			}},
		},
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		if got.Status.Phase == phase {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s is %s after 2 minutes, want %s", name, got.Status.Phase, phase)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pod_name adopts a running pod: commands run in it, Get finds it again,
// and Destroy leaves it running.
func TestAttachExistingPod(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	cs := c.Client(t)
	ctx := t.Context()
	startPod(t, cs, ns, "theirs", []string{"sleep", "3600"}, corev1.PodRunning)

	sb, err := b.Create(ctx, backend.Spec{Name: "adopted", Existing: "theirs"})
	require.NoError(t, err)
	assert.Equal(t, "ext-theirs", sb.ID())
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo $(pwd) $(id -u)"})
	require.NoError(t, err)
	assert.Equal(t, "/tmp 0\n", string(res.Stdout))
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, "adopted", info.Name)
	assert.Equal(t, backend.StateRunning, info.State)
	assert.Equal(t, k8stest.BusyboxImage, info.Image)
	// sbxd went in, so a timeout kills inside the pod, and users switch.
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sleep", "30"}, Timeout: time.Second})
	require.NoError(t, err)
	assert.Equal(t, backend.TimeoutExitCode, res.ExitCode)
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"id", "-u"}, User: "65534"})
	require.NoError(t, err)
	assert.Equal(t, "65534\n", string(res.Stdout))
	// Not labelled: List does not show it.
	infos, err := b.List(ctx, backend.Filter{})
	require.NoError(t, err)
	assert.Empty(t, infos)

	again, err := b.Get(ctx, sb.ID())
	require.NoError(t, err)
	res, err = again.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "again"}})
	require.NoError(t, err)
	assert.Equal(t, "again\n", string(res.Stdout))

	require.NoError(t, sb.Destroy(ctx))
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, "theirs", metav1.GetOptions{})
	require.NoError(t, err, "Destroy of an adopted pod deleted it")
	assert.Nil(t, pod.DeletionTimestamp, "Destroy of an adopted pod deleted it")
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
}

// A pod that does not exist, or does not run, is a clear error.
func TestAttachExistingPodErrors(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	ctx := t.Context()
	_, err := b.Create(ctx, backend.Spec{Name: "x", Existing: "no-such-pod"})
	assert.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "no-such-pod")
	assert.Contains(t, err.Error(), ns)

	startPod(t, c.Client(t), ns, "done", []string{"true"}, corev1.PodSucceeded)
	_, err = b.Create(ctx, backend.Spec{Name: "x", Existing: "done"})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "not running")
	assert.Contains(t, err.Error(), "Succeeded")
}

// pod_name "POD/CONTAINER" picks the container (OpenSage's
// container_name); without one, the pod's default container is used.
func TestAttachExistingPodContainer(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	cs := c.Client(t)
	ctx := t.Context()
	grace := int64(0)
	ctr := func(name string) corev1.Container {
		return corev1.Container{Name: name, Image: k8stest.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sleep", "3600"}, Env: []corev1.EnvVar{{Name: "WHO", Value: name}}}
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: ns},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{ctr("side"), ctr("app")}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		cs.CoreV1().Pods(ns).Delete(context.Background(), "two", metav1.DeleteOptions{GracePeriodSeconds: &grace})
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "two", metav1.GetOptions{})
		require.NoError(t, err)
		if p.Status.Phase == corev1.PodRunning && containerReady(p, "side") && containerReady(p, "app") {
			break
		}
		require.False(t, time.Now().After(deadline), "pod two not running within 2 minutes")
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range []struct{ ref, id, who string }{
		{"two", "ext-two", "side"},
		{"two/app", "ext-two_app", "app"},
	} {
		sb, err := b.Create(ctx, backend.Spec{Name: "x", Existing: c.ref})
		require.NoError(t, err, c.ref)
		assert.Equal(t, c.id, sb.ID())
		again, err := b.Get(ctx, sb.ID())
		require.NoError(t, err, c.ref)
		res, err := again.Exec(ctx, backend.ExecRequest{Shell: "echo $WHO"})
		require.NoError(t, err)
		assert.Equal(t, c.who+"\n", string(res.Stdout), c.ref)
		require.NoError(t, sb.Destroy(ctx))
	}
	_, err = b.Create(ctx, backend.Spec{Name: "x", Existing: "two/nope"})
	assert.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "side, app")
}

func containerReady(p *corev1.Pod, name string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			return s.State.Running != nil
		}
	}
	return false
}
