package k8s

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
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
		{"agent exec", Config{Agent: "exec"}, ""},
		{"bad agent", Config{Agent: "direct"}, `[sandbox.k8s] agent: "direct": want "auto" or "exec"`},
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
	_, err := New(Config{Kubeconfig: "/nonexistent/kubeconfig"})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "[sandbox.k8s] kubeconfig")
}

func TestPodFor(t *testing.T) {
	b := newBackend(Config{ImagePullPolicy: "IfNotPresent", RuntimeClass: "gvisor", ServiceAccount: ""}, nil, nil, clientsetKube{fake.NewClientset()}, "ns")
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
func fakeStart(t *testing.T, timeoutSec int, stage func(p *corev1.Pod)) (*fake.Clientset, error) {
	t.Helper()
	cs := fake.NewClientset()
	b := newBackend(Config{StartTimeoutSec: timeoutSec}, nil, nil, clientsetKube{cs}, "ns")
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
	return cs, err
}

func TestFakeClusterImagePullBackOff(t *testing.T) {
	cs, err := fakeStart(t, 60, func(p *corev1.Pod) {
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
	_, err := fakeStart(t, 60, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: containerName, State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "OOMKilled")
	assert.Contains(t, err.Error(), "137")
}

func TestFakeClusterUnschedulable(t *testing.T) {
	_, err := fakeStart(t, 1, func(p *corev1.Pod) {
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

// How Spec options that map to pod fields land in the pod (the real
// cluster tests check the behaviour; this checks each mapping).
func TestPodForOptions(t *testing.T) {
	b := newBackend(Config{RunAsUser: 1000}, nil, nil, clientsetKube{fake.NewClientset()}, "ns")
	pod, err := b.podFor("x", backend.Spec{Image: "i", User: "65534:100", Network: "host",
		SecurityOpt: []string{"seccomp:unconfined", "apparmor=unconfined", "no-new-privileges"},
		Ports:       []backend.Port{{Port: 80}, {Port: 8080, HostPort: 18080}, {Port: 9090, HostIP: "0.0.0.0", HostPort: 19090}}})
	require.NoError(t, err)
	sc := pod.Spec.Containers[0].SecurityContext
	assert.Equal(t, int64(65534), *sc.RunAsUser, "the entry's user wins over run_as_user")
	assert.Equal(t, int64(100), *sc.RunAsGroup)
	assert.Equal(t, corev1.SeccompProfileTypeUnconfined, sc.SeccompProfile.Type)
	assert.Equal(t, corev1.AppArmorProfileTypeUnconfined, sc.AppArmorProfile.Type)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.True(t, pod.Spec.HostNetwork)
	assert.Equal(t, corev1.DNSClusterFirstWithHostNet, pod.Spec.DNSPolicy)
	assert.Equal(t, "8080=127.0.0.1:18080,9090=0.0.0.0:19090", pod.Annotations[annotationHostPorts])
	s := b.sandboxFor(pod)
	assert.Equal(t, map[int]string{8080: "127.0.0.1:18080", 9090: "0.0.0.0:19090"}, s.hostAddrs)

	pod, err = b.podFor("x", backend.Spec{Image: "i", User: "root"})
	require.NoError(t, err)
	assert.Equal(t, int64(0), *pod.Spec.Containers[0].SecurityContext.RunAsUser)

	for _, c := range []struct {
		spec backend.Spec
		is   error
		want string
	}{
		{backend.Spec{Image: "i", User: "bob"}, backend.ErrInvalidConfig, `user "bob"`},
		{backend.Spec{Image: "i", User: "1:staff"}, backend.ErrInvalidConfig, `user "1:staff"`},
		{backend.Spec{Image: "i", Network: "mynet"}, errors.ErrUnsupported, `network "mynet"`},
		{backend.Spec{Image: "i", SecurityOpt: []string{"label=disable"}}, errors.ErrUnsupported, `security_opt "label=disable"`},
		{backend.Spec{Image: "i", Privileged: true, SecurityOpt: []string{"no-new-privileges"}}, backend.ErrInvalidConfig, "privileged"},
		{backend.Spec{Image: "i", Ports: []backend.Port{{Port: 53, Protocol: "udp", HostPort: 53}}}, errors.ErrUnsupported, "TCP only"},
		{backend.Spec{Image: "i", Ports: []backend.Port{{Port: 80, HostIP: "localhost", HostPort: 80}}}, backend.ErrInvalidConfig, "localhost:80"},
	} {
		_, err := b.podFor("x", c.spec)
		if assert.Error(t, err, c.want) {
			assert.ErrorIs(t, err, c.is, c.want)
			assert.Contains(t, err.Error(), c.want)
		}
	}
	assert.ErrorIs(t, refuseUnsupported(backend.Spec{Resources: backend.Resources{PidsLimit: 10}}), errors.ErrUnsupported)
}

func TestParseStat(t *testing.T) {
	fi, err := sbfiles.ParseStatLine("a1ff 5 1700000000 /tmp/dir/link")
	require.NoError(t, err)
	assert.Equal(t, "link", fi.Name())
	assert.Equal(t, int64(5), fi.Size())
	assert.Equal(t, fs.ModeSymlink|0o777, fi.Mode())
	fi, err = sbfiles.ParseStatLine("81a4 12 1700000000")
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	_, err = sbfiles.ParseStatLine("garbage")
	assert.Error(t, err)
}

// volumeSource streams a folder as a tar with relative names, modes and
// symlinks, and refuses what it cannot use.
func TestVolumeSource(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "d"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d", "f"), []byte("abc"), 0o640))
	require.NoError(t, os.Symlink("d/f", filepath.Join(dir, "l")))
	src, err := volumeSource(dir)
	require.NoError(t, err)
	rc, err := src()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	got := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, _ := io.ReadAll(tr)
		got[hdr.Name] = fmt.Sprintf("%o %s %s", hdr.Mode&0o777, hdr.Linkname, data)
	}
	assert.Equal(t, map[string]string{"d/": "700  ", "d/f": "640  abc", "l": "777 d/f "}, got)

	for _, bad := range []string{filepath.Join(dir, "missing"), filepath.Join(dir, "d", "f")} {
		_, err := volumeSource(bad)
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, bad)
	}
}

// TestPodForHosts maps hostname and extra_hosts to the pod's hostname and
// host aliases, and refuses what a pod cannot take, naming the key.
func TestPodForHosts(t *testing.T) {
	b := newBackend(Config{}, nil, nil, clientsetKube{fake.NewClientset()}, "ns")
	pod, err := b.podFor("x", backend.Spec{Image: "i", Hostname: "worker-1",
		ExtraHosts: []string{"db:10.0.0.5", "cache=10.0.0.5", "v6:::1", "api:10.0.0.6"}})
	require.NoError(t, err)
	assert.Equal(t, "worker-1", pod.Spec.Hostname)
	assert.Equal(t, []corev1.HostAlias{
		{IP: "10.0.0.5", Hostnames: []string{"db", "cache"}},
		{IP: "::1", Hostnames: []string{"v6"}},
		{IP: "10.0.0.6", Hostnames: []string{"api"}},
	}, pod.Spec.HostAliases)
	for _, c := range []struct {
		spec backend.Spec
		want string
		is   error
	}{
		{backend.Spec{Hostname: "Not_A_Label"}, "hostname", backend.ErrInvalidConfig},
		{backend.Spec{ExtraHosts: []string{"nohost"}}, "extra_hosts", backend.ErrInvalidConfig},
		{backend.Spec{ExtraHosts: []string{"db:not-an-ip"}}, "not an IP", backend.ErrInvalidConfig},
		{backend.Spec{ExtraHosts: []string{"gw:host-gateway"}}, "host-gateway", errors.ErrUnsupported},
	} {
		c.spec.Image = "i"
		_, err := b.podFor("x", c.spec)
		assert.ErrorIs(t, err, c.is, c.want)
		if err != nil {
			assert.Contains(t, err.Error(), c.want)
		}
	}
}

// TestImageCacheWarnings: OpenSage's k8s image cache variables are named
// when set, never silently taken.
func TestImageCacheWarnings(t *testing.T) {
	for _, env := range envOpenSageImageCache {
		t.Setenv(env, "")
	}
	assert.Empty(t, imageCacheWarnings())
	t.Setenv("OPENSAGE_K8S_NERDCTL", "/usr/local/bin/nerdctl")
	w := imageCacheWarnings()
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "$OPENSAGE_K8S_NERDCTL")
	assert.Contains(t, w[0], "cannot be checkpointed")
}

// A runtime level picks the configured RuntimeClass that gives it, by the
// class's usual name; Capabilities offer the levels the classes give; a
// level no class gives is refused naming the key to set.
func TestRuntimeLevels(t *testing.T) {
	b := newBackend(Config{RuntimeClasses: []string{"runsc", "kata-fc", "kata-qemu"}}, nil, nil, clientsetKube{fake.NewClientset()}, "ns")
	caps := b.Capabilities()
	assert.Equal(t, backend.IsolationContainer, caps.Isolation)
	for _, want := range []string{"runsc", "kata-fc", "kata-qemu", backend.RuntimeGVisor, backend.RuntimeKata, backend.RuntimeFirecracker} {
		assert.Contains(t, caps.Runtimes, want)
	}
	for level, class := range map[string]string{
		backend.RuntimeGVisor: "runsc", backend.RuntimeFirecracker: "kata-fc", backend.RuntimeKata: "kata-qemu", "kata-fc": "kata-fc",
	} {
		pod, err := b.podFor("sbx-main-1", backend.Spec{Name: "main", Image: "img:1", Runtime: level})
		require.NoError(t, err, level)
		assert.Equal(t, class, *pod.Spec.RuntimeClassName, level)
		assert.Equal(t, backend.RuntimeIsolation(class), infoOf(pod).Isolation, level)
	}

	plain := newBackend(Config{}, nil, nil, clientsetKube{fake.NewClientset()}, "ns")
	err := plain.Capabilities().Check(Name, backend.Spec{Runtime: backend.RuntimeGVisor})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "runtime_classes")
	pod, err := plain.podFor("sbx-main-2", backend.Spec{Name: "main", Image: "img:1"})
	require.NoError(t, err)
	assert.Nil(t, pod.Spec.RuntimeClassName)
	assert.Equal(t, backend.IsolationContainer, infoOf(pod).Isolation)
}
