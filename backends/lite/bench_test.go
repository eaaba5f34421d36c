package lite

import (
	"context"
	"github.com/sandboxkit/sandboxkit/internal/agentbench"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// benchEnv opens a backend for a benchmark, with the busybox image.
func benchEnv(b *testing.B) (*Backend, backend.Spec) {
	requireHost(b)
	base := b.TempDir()
	b.Cleanup(func() { unmountNullNetNS(base + "/runtime") })
	cfg := Config{Runtime: testRuntime(), StateDir: base + "/state", ImageDir: base + "/images", RuntimeRoot: base + "/runtime"}
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return bk, backend.Spec{Name: "bench", Image: "dir:" + busyboxRootfs(b)}
}

// BenchmarkAgentExec: a command through the sandbox's agent against a
// host spawn of the same program plus a local socket round trip (the
// performance gate's lite-agent-exec).
func BenchmarkAgentExec(b *testing.B) {
	bk, spec := benchEnv(b)
	sb, err := bk.Create(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	agentbench.ExecAgainstSpawn(b, sb)
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
	agentbench.Report(b, "create+exec", create)
	agentbench.Report(b, "destroy", destroy)
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
	agentbench.Report(b, "exec", d)
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
		bk.waitBackground()
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
	agentbench.Report(b, "reset", d)
}
