// Package k8stest gives the k8s backend's tests a real one-node cluster:
// the one scripts/k8s-harness.sh builds and starts on this machine (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, containerd and
// kubelet in a network namespace). Get starts it when it is not up and
// skips the test when that cannot work here (not root, no Go toolchain for
// the first build), or fails it when SBX_REQUIRE_K8S=1 (as in CI).
//
// Namespace gives each test a namespace of its own and checks at the end
// that nothing sandboxkit made is left in it.
package k8stest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// EnvRequire makes the k8s tests fail instead of skipping when the cluster
// cannot be made (CI sets it).
const EnvRequire = "SBX_REQUIRE_K8S"

// EnvFile overrides where the harness's environment file is read (and
// stops Get from running the harness script).
const EnvFile = "SBX_K8S_ENV"

const defaultEnvFile = "/run/sandboxkit-k8s/env"

// Images the harness imports into the node's containerd from the local
// Docker (built by scripts/docker-setup.sh); pods use them with
// imagePullPolicy IfNotPresent.
const (
	BusyboxImage = "sandboxkit-test/busybox:1"
	DebianImage  = "sandboxkit-test/debian:1"
)

// Required reports whether SBX_REQUIRE_K8S asks for the cluster.
func Required() bool { return harness.Required(EnvRequire) }

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	harness.Unavailable(t, EnvRequire, format, args...)
}

// Cluster is the harness cluster, as its environment file describes it.
type Cluster struct {
	// Kubeconfig is a cluster admin's (group system:masters).
	Kubeconfig string
	// NoPermKubeconfig is an authenticated user's with no RBAC rights.
	NoPermKubeconfig string
	Server           string
	Node             string
	// NetNS is the network namespace the node runs in (under /run/netns)
	// and PodCIDR its pods' addresses, for tests that route to pods.
	NetNS   string
	PodCIDR string
	// Script is scripts/k8s-harness.sh (empty when SBX_K8S_ENV was set).
	Script string
}

var (
	once       sync.Once
	cluster    *Cluster
	clusterErr error
)

// Get returns the harness cluster, running `scripts/k8s-harness.sh up` once
// per test binary (quick when it is up already; several minutes the first
// time on a machine, to build the Kubernetes binaries). It skips t (fails it
// under SBX_REQUIRE_K8S=1) when the cluster cannot be made.
func Get(t testing.TB) *Cluster {
	t.Helper()
	once.Do(func() { cluster, clusterErr = setUp() })
	if clusterErr != nil {
		unavailable(t, "k8s harness cluster: %v", clusterErr)
	}
	return cluster
}

func setUp() (*Cluster, error) {
	envFile := os.Getenv(EnvFile)
	script := ""
	if envFile == "" {
		envFile = defaultEnvFile
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("needs root to run a kubelet and containerd in a network namespace (run scripts/k8s-harness.sh up as root and set %s)", EnvFile)
		}
		for _, tool := range []string{"ip", "nsenter", "go", "docker"} {
			if _, err := exec.LookPath(tool); err != nil {
				return nil, fmt.Errorf("needs %s on PATH", tool)
			}
		}
		var err error
		if script, err = harness.Up("k8s-harness.sh", 30*time.Minute); err != nil {
			return nil, err
		}
	}
	c, err := readEnv(envFile)
	if err != nil {
		return nil, err
	}
	c.Script = script
	return c, nil
}

func readEnv(path string) (*Cluster, error) {
	env, err := harness.ReadEnv(path, "k8s-harness.sh")
	if err != nil {
		return nil, err
	}
	c := &Cluster{
		Kubeconfig:       env["SBX_K8S_KUBECONFIG"],
		NoPermKubeconfig: env["SBX_K8S_NOPERM_KUBECONFIG"],
		Server:           env["SBX_K8S_SERVER"],
		Node:             env["SBX_K8S_NODE"],
		NetNS:            env["SBX_K8S_NETNS"],
		PodCIDR:          env["SBX_K8S_POD_CIDR"],
	}
	if c.Kubeconfig == "" || c.Server == "" {
		return nil, fmt.Errorf("%s: SBX_K8S_KUBECONFIG or SBX_K8S_SERVER missing", path)
	}
	return c, nil
}

// Client returns an admin clientset for the cluster.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		t.Fatalf("loading %s: %v", c.Kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Namespace makes a namespace for t and returns its name. When t ends it
// checks that no pod, claim, service or network policy labelled
// sandboxkit.backend is left in it (pods being deleted get a minute to go;
// what a pod owns goes with it), then deletes it.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	cs := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := fmt.Sprintf("sbxtest-%d", time.Now().UnixNano()%1_000_000_000)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   name,
		Labels: map[string]string{"sandboxkit.test": "1"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() { c.checkAndDelete(t, cs, name) })
	// Pods are refused until the controller-manager made the namespace's
	// default service account.
	for {
		_, err := cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return name
		}
		if !apierrors.IsNotFound(err) || ctx.Err() != nil {
			t.Fatalf("namespace %s: no default service account: %v", name, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) checkAndDelete(t testing.TB, cs kubernetes.Interface, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: "sandboxkit.backend"}
	deadline := time.Now().Add(time.Minute)
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, sel)
		if err != nil {
			t.Errorf("listing pods left in %s: %v", ns, err)
			break
		}
		var live []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p.Name)
			}
		}
		if len(live) > 0 {
			t.Errorf("pods left behind in %s: %v", ns, live)
			break
		}
		if len(pods.Items) == 0 || time.Now().After(deadline) {
			if len(pods.Items) > 0 {
				t.Errorf("%d pods in %s still terminating a minute after the test", len(pods.Items), ns)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	pvcs, err := cs.CoreV1().PersistentVolumeClaims(ns).List(ctx, sel)
	if err == nil {
		for _, p := range pvcs.Items {
			if p.DeletionTimestamp == nil && len(p.OwnerReferences) == 0 {
				t.Errorf("volume claim left behind in %s: %s", ns, p.Name)
			}
		}
	}
	// Services and network policies belong to their pod (owner
	// references); one without an owner is a leak.
	if svcs, err := cs.CoreV1().Services(ns).List(ctx, sel); err == nil {
		for _, s := range svcs.Items {
			if s.DeletionTimestamp == nil && len(s.OwnerReferences) == 0 {
				t.Errorf("service left behind in %s: %s", ns, s.Name)
			}
		}
	}
	if nps, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, sel); err == nil {
		for _, n := range nps.Items {
			if n.DeletionTimestamp == nil && len(n.OwnerReferences) == 0 {
				t.Errorf("network policy left behind in %s: %s", ns, n.Name)
			}
		}
	}
	grace := int64(0)
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", ns, err)
	}
}

// RestartAPIServer stops the cluster's kube-apiserver and starts it again,
// returning when it answers (for fault tests).
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	if c.Script == "" {
		t.Skipf("%s is set: the harness is not ours to restart", EnvFile)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, c.Script, "restart-apiserver").CombinedOutput(); err != nil {
		t.Fatalf("%s restart-apiserver: %v\n%s", c.Script, err, out)
	}
}
