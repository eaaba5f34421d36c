package native_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// Benchmarks on the busybox image; each reports p50 and p99 of the
// measured step alongside ns/op:
//
//	go test -run '^$' -bench . -benchtime 50x ./backends/native/

// percentiles reports p50 and p99 of ds as metrics.
func percentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 {
		return float64(ds[min(len(ds)-1, int(p*float64(len(ds))))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

func benchBackend(b *testing.B) backend.Backend {
	cli := dockertest.Client(b)
	dockertest.RequireImage(b, cli, dockertest.BusyboxImage)
	nb, err := newNative()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nb.Close() })
	return nb
}

// BenchmarkCreateToFirstExec: Create, then the first Exec returning.
func BenchmarkCreateToFirstExec(b *testing.B) {
	nb := benchBackend(b)
	ctx := context.Background()
	var ds []time.Duration
	var made []backend.Sandbox
	b.Cleanup(func() {
		for _, sb := range made {
			sb.Destroy(context.Background())
		}
	})
	for b.Loop() {
		start := time.Now()
		sb, err := nb.Create(ctx, spec("bench", dockertest.BusyboxImage))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if err := sb.Destroy(ctx); err != nil {
			made = append(made, sb)
		}
		b.StartTimer()
	}
	percentiles(b, ds)
}

// BenchmarkExec: one Exec round trip in a running sandbox.
func BenchmarkExec(b *testing.B) {
	nb := benchBackend(b)
	ctx := context.Background()
	sb, err := nb.Create(ctx, spec("bench", dockertest.BusyboxImage))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "hi"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(err, res.ExitCode)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}

// BenchmarkDestroy: Destroy of a running sandbox.
func BenchmarkDestroy(b *testing.B) {
	nb := benchBackend(b)
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		b.StopTimer()
		sb, err := nb.Create(ctx, spec("bench", dockertest.BusyboxImage))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
	}
	percentiles(b, ds)
}
