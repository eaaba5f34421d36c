package k8s_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// Benchmarks on the harness cluster and the busybox image. Each iteration
// measures the step through the backend and through bare client-go calls
// (the baseline: what kubectl run + wait + kubectl exec cost on this
// cluster right now), interleaved so that load on a shared machine hits
// both alike. Each reports p50 and p99 of both and the ratio of the p50s.
//
//	go test -run '^$' -bench . -benchtime 20x ./backends/k8s/

func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}

func report(b *testing.B, ours, base []time.Duration) {
	b.ReportMetric(pct(ours, 0.50), "p50-ms")
	b.ReportMetric(pct(ours, 0.99), "p99-ms")
	b.ReportMetric(pct(base, 0.50), "base-p50-ms")
	b.ReportMetric(pct(base, 0.99), "base-p99-ms")
	if e := pct(base, 0.50); e > 0 {
		b.ReportMetric(pct(ours, 0.50)/e, "p50-ratio")
	}
}

// bare is plain client-go on the harness cluster.
type bare struct {
	rc *rest.Config
	cs kubernetes.Interface
	ns string
}

func benchSetUp(b *testing.B) (*k8s.Backend, *bare) {
	c := k8stest.Get(b)
	ns := c.Namespace(b)
	kb, err := k8s.New(k8s.Config{Kubeconfig: c.Kubeconfig, Namespace: ns, ImagePullPolicy: "IfNotPresent"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kb.Close() })
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	return kb, &bare{rc: rc, cs: cs, ns: ns}
}

// start creates a busybox pod sleeping and waits until it runs.
func (x *bare) start(b *testing.B, name string) {
	ctx := context.Background()
	no, grace := false, int64(0)
	_, err := x.cs.CoreV1().Pods(x.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: k8stest.BusyboxImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sleep", "3600"}}},
			AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: &grace,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	w, err := x.cs.CoreV1().Pods(x.ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && p.Status.Phase == corev1.PodRunning {
				return
			}
		case <-timeout:
			b.Fatalf("bare pod %s not running within 2 minutes", name)
		}
	}
}

func (x *bare) exec(b *testing.B, name string, argv ...string) {
	req := x.cs.CoreV1().RESTClient().Post().Namespace(x.ns).Resource("pods").Name(name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "c", Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(x.rc, http.MethodGet, req.URL().String())
	if err != nil {
		b.Fatal(err)
	}
	if err := ex.StreamWithContext(context.Background(), remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		b.Fatal(err)
	}
}

func (x *bare) remove(b *testing.B, name string) {
	grace := int64(0)
	if err := x.cs.CoreV1().Pods(x.ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateToFirstExec: Create, then the first Exec returning;
// baseline: pod create, watch until Running, exec.
func BenchmarkCreateToFirstExec(b *testing.B) {
	kb, x := benchSetUp(b)
	ctx := context.Background()
	var ours, base []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		sb, err := kb.Create(ctx, spec("bench", k8stest.BusyboxImage))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))

		i++
		name := "bare-" + time.Now().Format("150405") + "-" + string(rune('a'+i%26))
		start = time.Now()
		x.start(b, name)
		x.exec(b, name, "true")
		base = append(base, time.Since(start))

		b.StopTimer()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		x.remove(b, name)
		b.StartTimer()
	}
	report(b, ours, base)
}

// BenchmarkExec: one Exec round trip in a running sandbox, through the
// API server (plain) and through sbxd over one attached exec; baseline: a
// bare exec of the same command.
func BenchmarkExec(b *testing.B) {
	kb, x := benchSetUp(b)
	ctx := context.Background()
	sb, err := kb.Create(ctx, spec("bench", k8stest.BusyboxImage))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	x.start(b, "bare-exec")
	b.Cleanup(func() { x.remove(b, "bare-exec") })
	for _, c := range []struct {
		name string
		sb   func(b *testing.B) backend.Sandbox
	}{
		{"plain", func(*testing.B) backend.Sandbox { return sb }},
		{"sbxd", func(b *testing.B) backend.Sandbox {
			c, err := sbxd.Wrap(ctx, sb)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Agent(ctx); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return c
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := c.sb(b)
			var ours, base []time.Duration
			for b.Loop() {
				start := time.Now()
				res, err := s.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "hi"}})
				if err != nil || res.ExitCode != 0 {
					b.Fatal(err, res.ExitCode)
				}
				ours = append(ours, time.Since(start))
				start = time.Now()
				x.exec(b, "bare-exec", "echo", "hi")
				base = append(base, time.Since(start))
			}
			report(b, ours, base)
		})
	}
}

// BenchmarkCopy64MiB: 64 MiB in and back out of a running sandbox, through
// tar over exec (Archiver: sbx cp, tree copies), cat over exec
// (FileSystem) and the sbxd agent's stream (bulk bypass off). Reports MB/s
// of both directions together.
//
//	go test -run '^$' -bench Copy64MiB -benchtime 3x ./backends/k8s/
func BenchmarkCopy64MiB(b *testing.B) {
	kb, _ := benchSetUp(b)
	ctx := context.Background()
	sb, err := kb.Create(ctx, spec("bench-copy", k8stest.BusyboxImage))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	data := bigFile(64 << 20)
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	tw.WriteHeader(&tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()})
	tw.Write(data)
	tw.Close()
	// The agent starts once, outside the measured loops.
	c, err := sbxd.Wrap(ctx, sb, sbxd.WithBulkThreshold(-1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if _, err := c.Agent(ctx); err != nil {
		b.Fatal(err)
	}
	check := func(b *testing.B, n int64, err error) {
		if err != nil || n != int64(len(data)) {
			b.Fatalf("copied %d bytes of %d: %v", n, len(data), err)
		}
	}
	for _, m := range []struct {
		name string
		run  func(b *testing.B)
	}{
		{"tar-over-exec", func(b *testing.B) {
			a := sb.(backend.Archiver)
			if err := a.PutArchive(ctx, "/tmp", bytes.NewReader(tarball.Bytes())); err != nil {
				b.Fatal(err)
			}
			rc, err := a.GetArchive(ctx, "/tmp/big.bin")
			if err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			tr := tar.NewReader(rc)
			if _, err := tr.Next(); err != nil {
				b.Fatal(err)
			}
			n, err := io.Copy(io.Discard, tr)
			check(b, n, err)
		}},
		{"cat-over-exec", func(b *testing.B) {
			f := sb.(backend.FileSystem)
			if err := f.WriteFile(ctx, "/tmp/big.bin", bytes.NewReader(data), 0o644); err != nil {
				b.Fatal(err)
			}
			rc, err := f.ReadFile(ctx, "/tmp/big.bin")
			if err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			n, err := io.Copy(io.Discard, rc)
			check(b, n, err)
		}},
		{"sbxd-stream", func(b *testing.B) {
			if err := c.WriteFile(ctx, "/tmp/big.bin", bytes.NewReader(data), 0o644); err != nil {
				b.Fatal(err)
			}
			rc, err := c.ReadFile(ctx, "/tmp/big.bin")
			if err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			n, err := io.Copy(io.Discard, rc)
			check(b, n, err)
		}},
	} {
		b.Run(m.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				start := time.Now()
				m.run(b)
				ds = append(ds, time.Since(start))
			}
			b.ReportMetric(2*64*1.048576/(pct(ds, 0.5)/1000), "MB/s")
		})
	}
}

// BenchmarkClaim: one claim of a ready pool member (Backend.Claim: one
// JSON patch); baseline: a plain GET of the same pod. Between iterations
// the member is put back to ready with a plain merge patch (not in ns/op;
// reported as write-p50-ms: any claim is at least one write to etcd), so
// every claim is a first one.
//
//	go test -run '^$' -bench Claim -benchtime 200x ./backends/k8s/
func BenchmarkClaim(b *testing.B) {
	kb, x := benchSetUp(b)
	ctx := context.Background()
	// Unthrottled (client-go's default is 5 requests a second).
	rc := rest.CopyConfig(x.rc)
	rc.QPS = -1
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	s := spec("bench-claim", k8stest.BusyboxImage)
	s.Labels = map[string]string{backend.LabelPool: "bench", backend.LabelPoolState: backend.PoolReady}
	sb, err := kb.Create(ctx, s)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	unclaim := []byte(`{"metadata":{"annotations":{"sandboxkit.io/claim":null},"labels":{"` + backend.LabelPoolState + `":"` + backend.PoolReady + `"}}}`)
	var ours, base, write []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := kb.Claim(ctx, sb.ID(), backend.Claim{Session: "bench", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))

		b.StopTimer()
		start = time.Now()
		if _, err := cs.CoreV1().Pods(x.ns).Get(ctx, sb.ID(), metav1.GetOptions{}); err != nil {
			b.Fatal(err)
		}
		base = append(base, time.Since(start))
		start = time.Now()
		if _, err := cs.CoreV1().Pods(x.ns).Patch(ctx, sb.ID(), types.MergePatchType, unclaim, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
		write = append(write, time.Since(start))
		// The backend's client allows 50 requests a second (burst 100):
		// stay under it, so no claim waits for its rate limiter.
		time.Sleep(20 * time.Millisecond)
		b.StartTimer()
	}
	report(b, ours, base)
	b.ReportMetric(pct(write, 0.50), "write-p50-ms")
}
