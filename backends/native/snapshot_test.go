package native_test

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// A fork's image stays while its forks exist and goes at the first
// PruneCaches (sbx gc) after the last fork is gone, not before.
func TestForkImagePrunedAfterLastFork(t *testing.T) {
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	ctx := t.Context()
	parent := create(t, b, spec("fork-prune", dockertest.BusyboxImage))
	forks, err := parent.(backend.Forker).Fork(ctx, backend.ForkRequest{N: 2})
	require.NoError(t, err)
	forkImages := func() []string {
		imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", "sandboxkit.native.fork-image="+parent.ID()))})
		require.NoError(t, err)
		var ids []string
		for _, img := range imgs {
			ids = append(ids, img.ID)
		}
		return ids
	}
	require.Len(t, forkImages(), 1)
	_, err = b.PruneCaches(ctx, false)
	require.NoError(t, err)
	require.Len(t, forkImages(), 1, "pruned while forks use it")
	for _, f := range forks {
		require.NoError(t, f.Destroy(ctx))
	}
	names, err := b.PruneCaches(ctx, false)
	require.NoError(t, err)
	require.Empty(t, forkImages(), "left after PruneCaches: %v", names)
}

// BenchmarkFork: one fork of a running busybox sandbox whose file system
// holds 10 MiB of new files (commit, create, start), beside the baseline
// of a Create of the same image measured in the same run.
func BenchmarkFork(b *testing.B) {
	bk, _ := benchBackend(b)
	ctx := context.Background()
	sp := backend.Spec{Name: "bench-fork", Image: dockertest.BusyboxImage, TTL: 30 * time.Minute}
	parent, err := bk.Create(ctx, sp)
	if err != nil {
		b.Fatal(err)
	}
	defer parent.Destroy(ctx)
	res, err := parent.Exec(ctx, backend.ExecRequest{Shell: "dd if=/dev/urandom of=/big bs=1M count=10 2>/dev/null"})
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("filling the sandbox: %v", err)
	}
	var baseline, forks []time.Duration
	for range 5 {
		start := time.Now()
		sb, err := bk.Create(ctx, sp)
		if err != nil {
			b.Fatal(err)
		}
		baseline = append(baseline, time.Since(start))
		sb.Destroy(ctx)
	}
	for b.Loop() {
		start := time.Now()
		out, err := parent.(backend.Forker).Fork(ctx, backend.ForkRequest{N: 1})
		if err != nil {
			b.Fatal(err)
		}
		forks = append(forks, time.Since(start))
		b.StopTimer()
		out[0].Destroy(ctx)
		b.StartTimer()
	}
	b.ReportMetric(pct(forks, 0.5), "fork-p50-ms")
	b.ReportMetric(pct(baseline, 0.5), "create-baseline-p50-ms")
	b.ReportMetric(pct(forks, 0.5)/pct(baseline, 0.5), "fork/create-p50")
	bk.PruneCaches(ctx, false)
}
