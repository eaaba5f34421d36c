package lite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// reportPercentiles reports the p50 and p90 of durations in milliseconds.
func reportPercentiles(b *testing.B, prefix string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), prefix+"-p50-ms")
	b.ReportMetric(ms(0.9), prefix+"-p90-ms")
}

// benchEnv opens a backend for a benchmark, with the busybox image.
func benchEnv(b *testing.B) (*Backend, backend.Spec) {
	requireHost(b)
	base := b.TempDir()
	cfg := Config{Runtime: testRuntime(), StateDir: base + "/state", ImageDir: base + "/images", RuntimeRoot: base + "/runtime"}
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return bk, backend.Spec{Name: "bench", Image: "dir:" + busyboxRootfs(b)}
}

// BenchmarkCreateToFirstExec: Create, then the first Exec returns (the
// issue's create-to-first-exec), and Destroy outside the timing.
func BenchmarkCreateToFirstExec(b *testing.B) {
	bk, spec := benchEnv(b)
	ctx := context.Background()
	var create, destroy []time.Duration
	for b.Loop() {
		start := time.Now()
		sb, err := bk.Create(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(err, res.ExitCode)
		}
		create = append(create, time.Since(start))
		b.StopTimer()
		start = time.Now()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		destroy = append(destroy, time.Since(start))
		b.StartTimer()
	}
	reportPercentiles(b, "create+exec", create)
	reportPercentiles(b, "destroy", destroy)
}

// BenchmarkExec: one `true` through runtime exec and sbxd exec.
func BenchmarkExec(b *testing.B) {
	bk, spec := benchEnv(b)
	ctx := context.Background()
	sb, err := bk.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	var d []time.Duration
	for b.Loop() {
		start := time.Now()
		if res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatal(err, res.ExitCode)
		}
		d = append(d, time.Since(start))
	}
	reportPercentiles(b, "exec", d)
}

// BenchmarkReset: Reset of a sandbox with a few changed files. The
// background work a Reset leaves (removing the old generation, making the
// standby) finishes before the next iteration, as it would during any
// episode that runs longer than about 50 ms.
func BenchmarkReset(b *testing.B) {
	bk, spec := benchEnv(b)
	ctx := context.Background()
	sbx, err := bk.Create(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	sb := sbx.(*Sandbox)
	defer sb.Destroy(ctx)
	var d []time.Duration
	for b.Loop() {
		b.StopTimer()
		bk.bg.Wait()
		if _, err := sb.Exec(ctx, backend.ExecRequest{Shell: "echo x > /a; mkdir -p /b/c; echo y > /b/c/d"}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := sb.Reset(ctx); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	reportPercentiles(b, "reset", d)
}
