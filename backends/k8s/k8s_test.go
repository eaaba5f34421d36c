package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// newBackend opens the backend on a fresh namespace of the harness cluster,
// skipping (or failing with SBX_REQUIRE_K8S=1) without one.
func newBackend(t *testing.T) (*k8s.Backend, *k8stest.Cluster, string) {
	t.Helper()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	return openBackend(t, c, ns), c, ns
}

func openBackend(t *testing.T, c *k8stest.Cluster, ns string, opts ...func(*k8s.Config)) *k8s.Backend {
	t.Helper()
	cfg := k8s.Config{
		Kubeconfig:      c.Kubeconfig,
		Namespace:       ns,
		ImagePullPolicy: "IfNotPresent",
		StartTimeoutSec: 120,
		// The cluster pulls nothing: volumes are filled by the test image.
		HelperImage: k8stest.BusyboxImage,
	}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := k8s.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

func spec(name, image string) backend.Spec {
	return backend.Spec{Name: name, Image: image, TTL: 30 * time.Minute}
}

func create(t *testing.T, b backend.Backend, s backend.Spec) backend.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, s)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, sb.Destroy(ctx))
	})
	return sb
}

func TestConformanceBusybox(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return openBackend(t, c, ns) },
		backendtest.WithImage(k8stest.BusyboxImage), backendtest.WithAgentCheck(sbxd.CheckAgent))
}

// The conformance suite through sbxd's client: exec and files over the
// agent on the pod network (or one long-lived exec stream), users switched
// by the agent. Its file cases run once, on the agent's file calls: their
// rerun with the capabilities hidden would run the generic exec path over
// the same agent's exec, which native's and lite's suites run (through
// sbxd too), at the cost of minutes of this package's time on 2 cores.
func TestConformanceSbxd(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return sbxd.WrapBackend(openBackend(t, c, ns)) },
		backendtest.WithImage(k8stest.BusyboxImage), backendtest.WithAgentCheck(sbxd.CheckAgent),
		backendtest.WithoutCapabilityRerun())
}

// sbxd starts over Attach (one long-lived exec; agent = "exec" keeps the
// client off the pod network) and carries exec and the fileops table.
func TestSbxd(t *testing.T) {
	t.Parallel()
	cl := k8stest.Get(t)
	b := openBackend(t, cl, cl.Namespace(t), func(cfg *k8s.Config) { cfg.Agent = "exec" })
	s := spec("sbxd", k8stest.BusyboxImage)
	s.WorkingDir = "/root"
	sb := create(t, b, s)
	ctx := t.Context()
	// Create put sbxd in the pod (every plain exec runs under it).
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"test", "-x", "/.sbx/sbxd"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "no executable /.sbx/sbxd in the pod")
	c, err := sbxd.Wrap(ctx, sb)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	info, err := c.Agent(ctx)
	require.NoError(t, err, "the agent did not start through Attach")
	require.False(t, info.Dialled, "the agent was dialled, not started through Attach")
	res, err = c.Exec(ctx, backend.ExecRequest{Shell: "echo $X; pwd", Env: map[string]string{"X": "via-sbxd"}})
	require.NoError(t, err)
	assert.Equal(t, "via-sbxd\n/root\n", string(res.Stdout))
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return c })
}

func TestFileopsBusybox(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	s := spec("fileops", k8stest.BusyboxImage)
	// Not "/": fileopstest builds expected paths as workdir+"/"+name.
	s.WorkingDir = "/root"
	sb := create(t, b, s)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
}

func TestFileopsDebian(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	s := spec("fileops", k8stest.DebianImage)
	s.WorkingDir = "/root"
	sb := create(t, b, s)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
}

// Create reports the pod's own reason when the image cannot be had.
func TestCreateMissingImage(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	_, err := b.Create(ctx, spec("missing", "sandboxkit-test/no-such-image:1"))
	require.Error(t, err)
	assert.Regexp(t, `ErrImagePull|ImagePullBackOff`, err.Error())
	assert.Contains(t, err.Error(), "no-such-image")
	infos, lerr := b.List(ctx, backend.Filter{Name: "missing"})
	require.NoError(t, lerr)
	assert.Empty(t, infos, "the failed Create left its pod")
}

// Create reports the pod's start (scheduling, the image, the container) as
// progress, from its own goroutine.
func TestCreateProgress(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	var got []backend.Progress
	s := spec("progress", k8stest.BusyboxImage)
	s.Progress = func(p backend.Progress) { got = append(got, p) } // no lock: Create's goroutine only
	create(t, b, s)
	require.NotEmpty(t, got, "no progress while the pod started")
	var pulled bool
	for _, p := range got {
		assert.Equal(t, "progress", p.Sandbox)
		assert.Contains(t, []string{"start", "pull"}, p.Step, "%+v", p)
		pulled = pulled || (p.Step == "pull" && p.Done && strings.Contains(p.Status, k8stest.BusyboxImage))
	}
	assert.True(t, pulled, "no report that the image is there (kubelet's Pulled event): %+v", got)
}

// A pod deleted outside sandboxkit: every call says ErrNotFound.
func TestFaultPodDeletedBehindOurBack(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	sb := create(t, b, spec("deleted", k8stest.BusyboxImage))
	ctx := t.Context()
	grace := int64(0)
	require.NoError(t, c.Client(t).CoreV1().Pods(ns).Delete(ctx, sb.ID(), metav1.DeleteOptions{GracePeriodSeconds: &grace}))
	_, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}})
	assert.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), sb.ID())
	_, err = sb.Info(ctx)
	assert.ErrorIs(t, err, backend.ErrNotFound)
	_, err = b.Get(ctx, sb.ID())
	assert.ErrorIs(t, err, backend.ErrNotFound)
	assert.NoError(t, sb.Destroy(ctx))
}

// An exec in flight when the API server restarts fails with an error (not
// a hang, not a fake exit code), and the next call works.
func TestFaultAPIServerRestart(t *testing.T) {
	// Not parallel: the whole cluster's API goes away.
	b, c, _ := newBackend(t)
	sb := create(t, b, spec("restart", k8stest.BusyboxImage))
	ctx := t.Context()
	type outcome struct {
		res backend.ExecResult
		err error
	}
	done := make(chan outcome, 1)
	out := newLineWaiter()
	go func() {
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo started; exec sleep 120", Stdout: out, Timeout: 5 * time.Minute})
		done <- outcome{res, err}
	}()
	require.True(t, out.wait(time.Minute), "the exec did not start")
	c.RestartAPIServer(t)
	select {
	case o := <-done:
		// The stream went through the old apiserver process: it must end,
		// and say that it failed rather than report the command's exit.
		assert.Error(t, o.err, "exec across an API server restart: result %+v", o.res)
	case <-time.After(2 * time.Minute):
		t.Fatal("the exec did not return within 2 minutes of the API server restarting")
	}
	// The client reconnects by itself: the next call works.
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "back"}})
		if err == nil {
			assert.Equal(t, "back\n", string(res.Stdout))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec a minute after the API server came back: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A user without RBAC rights in the namespace gets an error that says so.
func TestFaultNoPermissions(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	b, err := k8s.New(k8s.Config{Kubeconfig: c.NoPermKubeconfig, Namespace: ns})
	require.NoError(t, err)
	defer b.Close()
	ctx := t.Context()
	_, err = b.Create(ctx, spec("noperm", k8stest.BusyboxImage))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "forbidden")
	assert.Contains(t, err.Error(), "RBAC")
	assert.Contains(t, err.Error(), ns)
	_, err = b.List(ctx, backend.Filter{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "RBAC")
}

// An unreachable API server is ErrUnavailable, naming the server.
func TestFaultUnreachable(t *testing.T) {
	t.Parallel()
	// A kubeconfig pointing at a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	kc := writeKubeconfig(t, "https://"+addr)
	b, err := k8s.New(k8s.Config{Kubeconfig: kc, Namespace: "default", RequestTimeoutSec: 5})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.List(t.Context(), backend.Filter{})
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.Contains(t, err.Error(), addr)
}

func TestEndpointPortForward(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	s := spec("web", k8stest.BusyboxImage)
	s.Ports = []backend.Port{{Port: 8080}}
	sb := create(t, b, s)
	ctx := t.Context()
	// busybox nc answers one connection per loop.
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `(while :; do echo hello-from-pod | nc -l -p 8080; done) >/dev/null 2>&1 &`})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	e, ok := backend.As[backend.Endpointer](sb)
	require.True(t, ok)
	addr, err := e.Endpoint(ctx, 8080)
	require.NoError(t, err)
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := dialRead(addr)
		if err == nil && strings.Contains(got, "hello-from-pod") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no greeting through the port forward %s within a minute: %q, %v", addr, got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	_, err = e.Endpoint(ctx, 9999)
	assert.ErrorIs(t, err, backend.ErrNotFound)
}

// A connection made before the pod's server listens is closed, and the
// forward stays: once the server listens, the next connection reaches it.
// Readiness probes connect early; client-go's PortForwarder ends the whole
// forward (and its listener) at the first stream the pod refuses.
func TestEndpointPortForwardBeforeListen(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	s := spec("early", k8stest.BusyboxImage)
	s.Ports = []backend.Port{{Port: 8080}}
	sb := create(t, b, s)
	ctx := t.Context()
	e, ok := backend.As[backend.Endpointer](sb)
	require.True(t, ok)
	addr, err := e.Endpoint(ctx, 8080)
	require.NoError(t, err)
	for i := range 3 {
		got, err := dialRead(addr)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "early connection %d was left open: %v", i, err)
		require.Empty(t, got, "early connection %d: nothing listens in the pod yet", i)
	}
	startGreeter(t, sb, 8080, "hello-after-refusal")
	got, err := dialRead(addr)
	require.NoError(t, err)
	assert.Contains(t, got, "hello-after-refusal")
	again, err := e.Endpoint(ctx, 8080)
	require.NoError(t, err)
	assert.Equal(t, addr, again, "the forward is the same one")
}

// startGreeter starts a server in the pod that writes greeting to every
// connection on port (busybox nc, one connection per loop) and waits
// until it listens.
func startGreeter(t *testing.T, sb backend.Sandbox, port int, greeting string) {
	t.Helper()
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: fmt.Sprintf(
		`(while :; do echo %[1]s | nc -l -p %[2]d; done) >/dev/null 2>&1 &
for i in $(seq 300); do grep -qs ':%04[2]X 0*:0000 0A' /proc/net/tcp /proc/net/tcp6 && exit 0; sleep 0.1; done
echo "nothing listens on %[2]d after 30 s"; exit 1`, greeting, port)})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stdout)
}

func dialRead(addr string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(conn)
	if len(b) > 0 {
		err = nil
	}
	return string(b), err
}

// A named volume is a claim; a second sandbox sees what the first wrote.
func TestNamedVolume(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	ctx := t.Context()
	name, err := b.CreateVolume(ctx, backend.VolumeSpec{Session: "vol-test"})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.RemoveVolume(context.Background(), name)) })
	vols, err := b.ListVolumes(ctx, backend.Filter{Session: "vol-test"})
	require.NoError(t, err)
	require.Len(t, vols, 1)
	assert.Equal(t, name, vols[0].Name)

	s := spec("writer", k8stest.BusyboxImage)
	s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: name, Target: "/shared"}}
	w := create(t, b, s)
	res, err := w.Exec(ctx, backend.ExecRequest{Shell: "echo shared-data > /shared/f"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))
	s.Name = "reader"
	r := create(t, b, s)
	res, err = r.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "/shared/f"}})
	require.NoError(t, err)
	assert.Equal(t, "shared-data\n", string(res.Stdout))
}

type lineWaiter struct {
	ch chan struct{}
}

func newLineWaiter() *lineWaiter { return &lineWaiter{ch: make(chan struct{}, 1)} }

func (l *lineWaiter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "\n") {
		select {
		case l.ch <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

func (l *lineWaiter) wait(d time.Duration) bool {
	select {
	case <-l.ch:
		return true
	case <-time.After(d):
		return false
	}
}

// writeKubeconfig writes a kubeconfig for server with no credentials.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	data := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: " + server +
		"\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n"
	require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
	return p
}

// service = true: a Service selects the pod, and goes with it.
func TestService(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	b, err := k8s.New(k8s.Config{Kubeconfig: c.Kubeconfig, Namespace: ns, ImagePullPolicy: "IfNotPresent", Service: true})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	s := spec("svc", k8stest.BusyboxImage)
	s.Ports = []backend.Port{{Port: 8080}}
	ctx := t.Context()
	sb, err := b.Create(ctx, s)
	require.NoError(t, err)
	addr, err := sb.(*k8s.Sandbox).ClusterAddress(ctx, 8080)
	require.NoError(t, err)
	assert.Equal(t, sb.ID()+"."+ns+".svc:8080", addr)
	cs := c.Client(t)
	svc, err := cs.CoreV1().Services(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{backend.LabelID: sb.ID()}, svc.Spec.Selector)
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, int32(8080), svc.Spec.Ports[0].Port)
	require.NoError(t, sb.Destroy(ctx))
	// The garbage collector removes it with the pod.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := cs.CoreV1().Services(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("service %s still there 2 minutes after Destroy", sb.ID())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A Spec naming a claim that does not exist makes it, and Destroy takes it
// along (owner reference to the pod).
func TestVolumeOnDemand(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	ctx := t.Context()
	s := spec("ondemand", k8stest.BusyboxImage)
	s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: "ondemand-data", Target: "/data"}}
	sb, err := b.Create(ctx, s)
	require.NoError(t, err)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo x > /data/f && cat /data/f"})
	require.NoError(t, err)
	assert.Equal(t, "x\n", string(res.Stdout))
	cs := c.Client(t)
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "ondemand-data", metav1.GetOptions{})
	require.NoError(t, err)
	require.Len(t, pvc.OwnerReferences, 1)
	assert.Equal(t, sb.ID(), pvc.OwnerReferences[0].Name)
	require.NoError(t, sb.Destroy(ctx))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "ondemand-data", metav1.GetOptions{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the on-demand claim is still there 2 minutes after Destroy")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// run_as_user: the pod's processes, and sbxd's setup, run as that user.
func TestRunAsUser(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	b, err := k8s.New(k8s.Config{Kubeconfig: c.Kubeconfig, Namespace: ns, ImagePullPolicy: "IfNotPresent",
		RunAsUser: 65534, RunAsGroup: 65534})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	s := spec("nonroot", k8stest.BusyboxImage)
	s.WorkingDir = "/tmp"
	sb := create(t, b, s)
	ctx := t.Context()
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "id -u; test -x /.sbx/sbxd && echo sbxd"})
	require.NoError(t, err)
	assert.Equal(t, "65534\nsbxd\n", string(res.Stdout))
	// A timeout still kills (sbxd runs as the same user as the command).
	res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sleep", "30"}, Timeout: time.Second})
	require.NoError(t, err)
	assert.True(t, res.TimedOut)
	assert.Equal(t, backend.TimeoutExitCode, res.ExitCode)
	// A non-root pod cannot switch users: an error, not a command run as
	// the pod's user.
	_, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"id", "-u"}, User: "root"})
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "does not run as root")
}

// ExecRequest.User: names and numbers from the pod's /etc/passwd, HOME
// set; an unknown user is an error naming it.
func TestExecUser(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	sb := create(t, b, spec("user", k8stest.BusyboxImage))
	ctx := t.Context()
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "grep ^nobody: /etc/passwd | cut -d: -f6"})
	require.NoError(t, err)
	home := strings.TrimSpace(string(res.Stdout))
	require.NotEmpty(t, home, "no nobody in the image's /etc/passwd")
	for _, c := range []struct{ user, want string }{
		{"nobody", "65534 65534 " + home + "\n"},
		{"65534:100", "65534 100 " + home + "\n"},
		{"root", "0 0 /root\n"},
	} {
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `echo "$(id -u) $(id -g) $HOME"`, User: c.user})
		require.NoError(t, err, c.user)
		assert.Equal(t, c.want, string(res.Stdout), c.user)
	}
	_, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}, User: "no-such-user"})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "no-such-user")
}

// Spec.User sets the pod's user by number; a name is refused before
// anything is made.
func TestSpecUser(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	s := spec("specuser", k8stest.BusyboxImage)
	s.User = "65534:65534"
	s.WorkingDir = "/tmp"
	sb := create(t, b, s)
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "echo $(id -u) $(id -g)"})
	require.NoError(t, err)
	assert.Equal(t, "65534 65534\n", string(res.Stdout))
	s.User = "nobody"
	_, err = b.Create(t.Context(), s)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), `user "nobody"`)
}

// hostname and extra_hosts reach the pod: its hostname, and /etc/hosts as
// the kubelet writes it from the host aliases.
func TestHostnameAndExtraHosts(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	s := spec("hosts", k8stest.BusyboxImage)
	s.Hostname = "sage"
	s.ExtraHosts = []string{"db.local:10.0.0.5", "cache.local:10.0.0.5"}
	sb := create(t, b, s)
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "hostname; grep -E 'db.local|cache.local' /etc/hosts"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	require.Len(t, lines, 2, "%q", res.Stdout)
	assert.Equal(t, "sage", lines[0])
	assert.Equal(t, []string{"10.0.0.5", "db.local", "cache.local"}, strings.Fields(lines[1]))
}
