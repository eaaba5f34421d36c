package remotedocker_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// BenchmarkExec compares one Exec round trip on the harness's remote host
// (over SSH) with the same on the local engine (native). The two alternate
// call by call, so both see the same machine load; it reports each one's
// p50 and the ratio:
//
//	go test -run '^$' -bench Exec -benchtime 200x ./backends/remotedocker/
func BenchmarkExec(b *testing.B) {
	h := remotetest.Get(b)
	dockertest.RequireImage(b, dockertest.Client(b), dockertest.BusyboxImage)
	nb, err := native.New(native.Config{PullPolicy: native.PullNever})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nb.Close() })
	rb := open(b, config(h))
	ctx := context.Background()
	var sbs []backend.Sandbox
	for _, be := range []backend.Backend{nb, rb} {
		sb, err := be.Create(ctx, spec("bench", dockertest.BusyboxImage))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sb.Destroy(context.Background()) })
		// Warm up: the first exec pays for connections.
		if _, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	ds := make([][]time.Duration, len(sbs))
	for b.Loop() {
		for i, sb := range sbs {
			start := time.Now()
			res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "hi"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatal(err, res.ExitCode)
			}
			ds[i] = append(ds[i], time.Since(start))
		}
	}
	nat, rem := p50(ds[0]), p50(ds[1])
	b.ReportMetric(ms(nat), "native-p50-ms")
	b.ReportMetric(ms(rem), "remote-p50-ms")
	b.ReportMetric(ms(p99(ds[1])), "remote-p99-ms")
	if nat > 0 {
		b.ReportMetric(float64(rem)/float64(nat), "remote/native")
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func p50(ds []time.Duration) time.Duration { return quantile(ds, 0.50) }
func p99(ds []time.Duration) time.Duration { return quantile(ds, 0.99) }

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
