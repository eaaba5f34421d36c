package k8s

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"empty", Config{}, ""},
		{"full", Config{Namespace: "agents", RuntimeClass: "gvisor", ImagePullPolicy: "IfNotPresent",
			VolumeSize: "2Gi", NodeSelector: map[string]string{"pool": "sbx"},
			Tolerations: []Toleration{{Key: "sbx", Operator: "Exists", Effect: "NoSchedule"}}}, ""},
		{"bad namespace", Config{Namespace: "Agents_1"}, "[sandbox.k8s] namespace"},
		{"bad pull policy", Config{ImagePullPolicy: "sometimes"}, "image_pull_policy"},
		{"bad size", Config{VolumeSize: "lots"}, "volume_size"},
		{"bad access mode", Config{VolumeAccessMode: "ReadOnlyMany"}, "volume_access_mode"},
		{"bad toleration", Config{Tolerations: []Toleration{{Key: "k", Operator: "Maybe"}}}, "tolerations[0]"},
		{"exists with value", Config{Tolerations: []Toleration{{Key: "k", Operator: "Exists", Value: "v"}}}, "takes no value"},
		{"bad selector", Config{NodeSelector: map[string]string{"pool": "a b"}}, "node_selector"},
		{"bad secret", Config{ImagePullSecrets: []string{"Reg Cred"}}, "image_pull_secrets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.validate()
			if c.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, backend.ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestNewMissingKubeconfig(t *testing.T) {
	_, err := New(Config{Kubeconfig: "/nonexistent/kubeconfig"}, nil)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "[sandbox.k8s] kubeconfig")
}

func TestPodFor(t *testing.T) {
	b := newBackend(Config{ImagePullPolicy: "IfNotPresent", RuntimeClass: "gvisor", ServiceAccount: ""}, nil, nil, fake.NewClientset(), "ns")
	spec := backend.Spec{
		Name: "main", Session: "s1", Image: "img:1", Owner: "host:1:2",
		Env:        map[string]string{"B": "2", "A": "1"},
		WorkingDir: "/work",
		Ports:      []backend.Port{{Port: 8080}, {Port: 53, Protocol: "udp"}},
		Resources:  backend.Resources{CPUs: 1.5, MemoryBytes: 256 << 20, GPUs: "2", ShmBytes: 64 << 20},
		Volumes: []backend.Volume{
			{Type: backend.VolumeBind, Source: "/data", Target: "/data", ReadOnly: true},
			{Type: backend.VolumeNamed, Source: "shared", Target: "/shared"},
		},
		CapAdd: []string{"CAP_NET_ADMIN"},
		Labels: map[string]string{"team": "a b", "x": "y"},
		TTL:    time.Hour,
	}
	pod, err := b.podFor("sbx-main-1", spec)
	require.NoError(t, err)
	c := pod.Spec.Containers[0]
	assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
	assert.Equal(t, []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}, c.Env)
	assert.Equal(t, "1500m", c.Resources.Limits.Cpu().String())
	assert.Equal(t, "256Mi", c.Resources.Limits.Memory().String())
	gpus := c.Resources.Limits[GPUResource]
	assert.Equal(t, "2", gpus.String())
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"NET_ADMIN"}, c.SecurityContext.Capabilities.Add)
	assert.Equal(t, "gvisor", *pod.Spec.RuntimeClassName)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	assert.Equal(t, "/data", pod.Spec.Volumes[1].HostPath.Path)
	assert.Equal(t, "shared", pod.Spec.Volumes[2].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, "/dev/shm", c.VolumeMounts[len(c.VolumeMounts)-1].MountPath)
	// Labels: valid pairs as labels, all of them in the annotation.
	assert.Equal(t, "y", pod.Labels["x"])
	assert.NotContains(t, pod.Labels, "team")
	assert.NotContains(t, pod.Labels, backend.LabelOwner)
	all := labelsOf(pod.ObjectMeta)
	assert.Equal(t, "a b", all["team"])
	assert.Equal(t, "host:1:2", all[backend.LabelOwner])
	assert.Equal(t, "sbx-main-1", all[backend.LabelID])
	info := infoOf(pod)
	assert.Equal(t, "main", info.Name)
	assert.Equal(t, "s1", info.Session)
	assert.Equal(t, "/work", info.WorkDir)
	assert.False(t, info.ExpiresAt.IsZero())

	_, err = b.podFor("x", backend.Spec{Image: "i", Resources: backend.Resources{GPUs: "all"}})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "gpus")
	_, err = b.podFor("x", backend.Spec{Image: "i", Volumes: []backend.Volume{{Type: backend.VolumeNamed, Source: "Not_A_Name", Target: "/x"}}})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
}

func TestSelector(t *testing.T) {
	sel := selector(backend.Filter{Session: "s", Labels: map[string]string{"ok": "v", "bad": "a b"}})
	assert.Equal(t, "ok=v,sandboxkit.backend=k8s,sandboxkit.session=s", sel)
}

func TestNewPodName(t *testing.T) {
	for _, name := range []string{"main", "Neo4J_db", "", strings.Repeat("x", 80), "--"} {
		n := newPodName(name)
		assert.Regexp(t, `^sbx-([a-z0-9-]+-)?[0-9a-f]{10}$`, n, name)
		assert.LessOrEqual(t, len(n), 63)
	}
}

// The tests below stage pod states a real cluster cannot produce on
// demand, with client-go's fake clientset: only Create's wait and its
// error reporting run.

// fakeStart runs Create on a fake cluster while stage moves the pod to a
// state once it exists; it returns Create's error.
func fakeStart(t *testing.T, timeoutSec int, stage func(p *corev1.Pod)) (error, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset()
	b := newBackend(Config{StartTimeoutSec: timeoutSec}, nil, nil, cs, "ns")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			pods, err := cs.CoreV1().Pods("ns").List(ctx, metav1.ListOptions{})
			if err == nil && len(pods.Items) == 1 {
				p := pods.Items[0].DeepCopy()
				stage(p)
				// The event first: Create reads the events once it sees
				// the status.
				cs.CoreV1().Events("ns").Create(ctx, &corev1.Event{
					ObjectMeta:     metav1.ObjectMeta{Name: p.Name + ".1", Namespace: "ns"},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: p.Name, Namespace: "ns"},
					Type:           "Warning", Reason: "Staged", Message: "staged event for " + p.Name,
				}, metav1.CreateOptions{})
				cs.CoreV1().Pods("ns").UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := b.Create(ctx, backend.Spec{Name: "staged", Image: "example.invalid/img:1"})
	return err, cs
}

func TestFakeClusterImagePullBackOff(t *testing.T) {
	err, cs := fakeStart(t, 60, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "example.invalid/img:1"`}}}}
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, errStartFailed)
	assert.Contains(t, err.Error(), "ImagePullBackOff")
	assert.Contains(t, err.Error(), "image_pull_policy")
	assert.Contains(t, err.Error(), "staged event")
	pods, _ := cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{})
	assert.Empty(t, pods.Items, "the pod of a failed Create is deleted")
}

func TestFakeClusterOOMKilled(t *testing.T) {
	err, _ := fakeStart(t, 60, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OOMKilled")
	assert.Contains(t, err.Error(), "137")
}

func TestFakeClusterUnschedulable(t *testing.T) {
	err, _ := fakeStart(t, 1, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}}
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Unschedulable")
	assert.Contains(t, err.Error(), "Insufficient nvidia.com/gpu")
}

func TestTolerationsFromMaps(t *testing.T) {
	got, err := TolerationsFromMaps([]map[string]any{
		{"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"},
		{"operator": "Exists", "tolerationSeconds": int64(30), "effect": "NoExecute"},
	})
	require.NoError(t, err)
	assert.Equal(t, []Toleration{
		{Key: "dedicated", Operator: "Equal", Value: "agents", Effect: "NoSchedule"},
		{Operator: "Exists", Effect: "NoExecute", TolerationSeconds: 30},
	}, got)
	assert.NoError(t, Config{Tolerations: got}.validate())
	_, err = TolerationsFromMaps([]map[string]any{{"keyy": "x"}})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "tolerations[0].keyy")
}
