package native_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// Benchmarks on the busybox image. Each iteration measures the step twice,
// through the backend and through the bare Engine API (the baseline: what
// docker run / docker exec / docker rm cost on this machine right now),
// interleaved so that load on a shared machine hits both alike. Each
// reports p50 and p99 of both and the ratio of the p50s; ns/op is the
// sum of one backend and one baseline step.
//
//	go test -run '^$' -bench . -benchtime 30x ./backends/native/

// pct returns the p-th percentile of ds in milliseconds.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}

func report(b *testing.B, ours, engine []time.Duration) {
	b.ReportMetric(pct(ours, 0.50), "p50-ms")
	b.ReportMetric(pct(ours, 0.99), "p99-ms")
	b.ReportMetric(pct(engine, 0.50), "engine-p50-ms")
	b.ReportMetric(pct(engine, 0.99), "engine-p99-ms")
	if e := pct(engine, 0.50); e > 0 {
		b.ReportMetric(pct(ours, 0.50)/e, "p50-ratio")
	}
}

func benchBackend(b *testing.B) (*native.Backend, *client.Client) {
	cli := dockertest.Client(b)
	dockertest.RequireImage(b, cli, dockertest.BusyboxImage)
	nb, err := newNative()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nb.Close() })
	return nb, cli
}

// engineStart creates and starts a plain busybox container, as docker run
// -d busybox sleep would.
func engineStart(b *testing.B, cli *client.Client) string {
	ctx := context.Background()
	c, err := cli.ContainerCreate(ctx, &container.Config{
		Image: dockertest.BusyboxImage, Cmd: []string{"sleep", "3600"},
		Labels: map[string]string{labelTestRun: testRun},
	}, nil, nil, nil, "")
	if err != nil {
		b.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		b.Fatal(err)
	}
	return c.ID
}

// engineExec runs argv with the bare exec API (create, attach, read to
// the end, inspect until the exit is recorded), as docker exec does.
func engineExec(b *testing.B, cli *client.Client, id string, argv ...string) {
	ctx := context.Background()
	ex, err := cli.ContainerExecCreate(ctx, id, container.ExecOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatal(err)
	}
	hr, err := cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, hr.Reader)
	hr.Close()
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		ins, err := cli.ContainerExecInspect(ctx, ex.ID)
		if err != nil {
			b.Fatal(err)
		}
		if !ins.Running {
			return
		}
		time.Sleep(delay) // the engine records the exit just after the stream ends
	}
}

func engineRemove(b *testing.B, cli *client.Client, id string) {
	if err := cli.ContainerRemove(context.Background(), id, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateToFirstExec: Create, then the first Exec returning;
// baseline: container create + start + exec.
func BenchmarkCreateToFirstExec(b *testing.B) {
	nb, cli := benchBackend(b)
	ctx := context.Background()
	var ours, engine []time.Duration
	for b.Loop() {
		start := time.Now()
		sb, err := nb.Create(ctx, spec("bench", dockertest.BusyboxImage))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))

		start = time.Now()
		id := engineStart(b, cli)
		engineExec(b, cli, id, "true")
		engine = append(engine, time.Since(start))

		b.StopTimer()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		engineRemove(b, cli, id)
		b.StartTimer()
	}
	report(b, ours, engine)
}

// BenchmarkExec: one Exec round trip in a running sandbox; baseline: a
// bare engine exec in a running container.
func BenchmarkExec(b *testing.B) {
	nb, cli := benchBackend(b)
	ctx := context.Background()
	sb, err := nb.Create(ctx, spec("bench", dockertest.BusyboxImage))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	id := engineStart(b, cli)
	b.Cleanup(func() { engineRemove(b, cli, id) })
	var ours, engine []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "hi"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res.ExitCode)
		}
		ours = append(ours, time.Since(start))
		start = time.Now()
		engineExec(b, cli, id, "echo", "hi")
		engine = append(engine, time.Since(start))
	}
	report(b, ours, engine)
}

// BenchmarkDestroy: Destroy of a running sandbox; baseline: force-removing
// a running container.
func BenchmarkDestroy(b *testing.B) {
	nb, cli := benchBackend(b)
	ctx := context.Background()
	var ours, engine []time.Duration
	for b.Loop() {
		b.StopTimer()
		sb, err := nb.Create(ctx, spec("bench", dockertest.BusyboxImage))
		if err != nil {
			b.Fatal(err)
		}
		id := engineStart(b, cli)
		b.StartTimer()
		start := time.Now()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		start = time.Now()
		engineRemove(b, cli, id)
		engine = append(engine, time.Since(start))
	}
	report(b, ours, engine)
}

// BenchmarkClaim: Claim of a ready pool member (its claim record, then the
// rename; see claim.go); baseline: one ContainerInspect of the member, the
// cheapest engine call that reads a container. Between iterations
// (untimed) the member is made ready again: its record removed and its
// container renamed back, and that rename is reported on its own
// (rename-p50-ms), as the largest part of a claim.
func BenchmarkClaim(b *testing.B) {
	nb, cli := benchBackend(b)
	ctx := context.Background()
	s := spec("bench", dockertest.BusyboxImage)
	s.Labels[backend.LabelPool] = "bench-pool-" + testRun
	s.Labels[backend.LabelPoolState] = backend.PoolReady
	sb, err := nb.Create(ctx, s)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	cid := sb.(*native.Sandbox).ContainerID()
	c, err := cli.ContainerInspect(ctx, cid)
	if err != nil {
		b.Fatal(err)
	}
	ready := strings.TrimPrefix(c.Name, "/")
	var ours, engine, rename []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := nb.Claim(ctx, sb.ID(), backend.Claim{Session: "bench", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		start = time.Now()
		if _, err := cli.ContainerInspect(ctx, cid); err != nil {
			b.Fatal(err)
		}
		engine = append(engine, time.Since(start))

		b.StopTimer()
		if err := cli.VolumeRemove(ctx, claimPrefix+sb.ID(), false); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := cli.ContainerRename(ctx, cid, ready); err != nil {
			b.Fatal(err)
		}
		rename = append(rename, time.Since(start))
		b.StartTimer()
	}
	report(b, ours, engine)
	b.ReportMetric(pct(rename, 0.50), "rename-p50-ms")
}
