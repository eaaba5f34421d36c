package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

func (a *app) benchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a backend",
	}
	var o scaleOptions
	scale := &cobra.Command{
		Use:   "scale",
		Short: "Create N sandboxes, run a command in each, remove them",
		Long: `Scale makes N sandboxes from a config entry with at most P being made (or
removed) at once, runs one command in each, keeps all of them alive while it
measures their memory, then removes them. It reports failures, leaks
(sandboxes of its session still listed after removal), wall times, latency
percentiles and memory per sandbox: the sandbox's own (what the backend
reports for it, e.g. the container's cgroup, asked of up to 50 of them) and,
when the sandboxes live on this host, the host's (the fall in MemAvailable
while they all ran, divided by N, which also counts the engine's
per-sandbox cost).

It exits 1 when any sandbox failed or leaked.`,
		Example: `  sbx bench scale --n 100
  sbx bench scale --n 1000 --parallel 16 --image sandboxkit-test/busybox:1 --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.benchScale(cmd.Context(), o)
		},
	}
	f := scale.Flags()
	f.IntVar(&o.n, "n", 10, "number of sandboxes")
	f.IntVar(&o.parallel, "parallel", 4*runtime.NumCPU(), "sandboxes made or removed at once")
	f.StringVar(&o.image, "image", "", "image to use instead of the entry's")
	f.StringVar(&o.entry, "sandbox", "", `config entry to make the sandboxes from (default "main", or the only entry)`)
	f.StringSliceVar(&o.cmd, "cmd", []string{"echo", "ok"}, "command run once in each sandbox (comma-separated argv)")
	cmd.AddCommand(scale)
	return cmd
}

type scaleOptions struct {
	n, parallel  int
	image, entry string
	cmd          []string
}

// scaleReport is what bench scale prints (--json: as is).
type scaleReport struct {
	Backend  string `json:"backend"`
	Image    string `json:"image"`
	N        int    `json:"n"`
	Parallel int    `json:"parallel"`

	Created   int      `json:"created"`
	Execed    int      `json:"execed"`
	Removed   int      `json:"removed"`
	Failures  int      `json:"failures"`
	Errors    []string `json:"errors,omitempty"` // the first few, distinct
	Leaked    int      `json:"leaked"`
	PeakAlive int      `json:"peak_alive"`

	// The first sandbox is made alone and left out of the figures below
	// but this one (its Create and first Exec): its Create pulls or builds
	// the image.
	FirstCreateMs float64 `json:"first_create_ms"`

	CreateWall  float64 `json:"create_wall_s"` // creating and exec'ing all but the first
	CreateRate  float64 `json:"create_per_s"`  // sandboxes made (and exec'd) per second meanwhile
	DestroyWall float64 `json:"destroy_wall_s"`
	TotalWall   float64 `json:"total_wall_s"` // all but the first sandbox's Create

	CreateMs  percentiles `json:"create_ms"`  // Create, per sandbox (but the first)
	ExecMs    percentiles `json:"exec_ms"`    // the first Exec (but the first sandbox's)
	DestroyMs percentiles `json:"destroy_ms"` // Destroy

	// Memory per sandbox in MiB: the sandbox's own (its cgroup), and the
	// host's MemAvailable fall per sandbox (0 when unknown).
	SandboxMemMiB     percentiles `json:"sandbox_mem_mib"`
	SandboxMemSampled int         `json:"sandbox_mem_sampled"` // sandboxes asked
	HostMemMiB        float64     `json:"host_mem_per_sandbox_mib"`
}

// percentiles summarise N samples. P99 is left out (0) with 100 samples or
// fewer, where the 99th percentile is the maximum.
type percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99,omitempty"`
	Max float64 `json:"max"`
}

// minP99Samples is the fewest samples whose 99th percentile is not their
// maximum.
const minP99Samples = 101

// memSample bounds how many sandboxes bench scale asks for their memory.
const memSample = 50

func percentilesOf(xs []float64) percentiles {
	if len(xs) == 0 {
		return percentiles{}
	}
	slices.Sort(xs)
	at := func(p float64) float64 { return xs[min(len(xs)-1, int(p*float64(len(xs))))] }
	p := percentiles{N: len(xs), P50: at(0.50), Max: xs[len(xs)-1]}
	if len(xs) >= minP99Samples {
		p.P99 = at(0.99)
	}
	return p
}

// p99Cell renders P99 for a table: "-" when there are too few samples to
// tell it from the maximum.
func (p percentiles) p99Cell(format string) string {
	if p.N < minP99Samples {
		return "-"
	}
	return fmt.Sprintf(format, p.P99)
}

// memoryReporter is what a sandbox offers when it can say how much memory
// it uses (native: the container's cgroup).
type memoryReporter interface {
	MemoryUsage(ctx context.Context) (int64, error)
}

func (a *app) benchScale(ctx context.Context, o scaleOptions) error {
	if o.n < 1 || o.parallel < 1 {
		return fmt.Errorf("sbx bench scale: --n and --parallel must be at least 1")
	}
	if len(o.cmd) == 0 {
		return fmt.Errorf("sbx bench scale: --cmd must not be empty")
	}
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	name, err := defaultEntry(cfg, o.entry)
	if err != nil {
		return err
	}
	spec, err := cfg.Spec(name)
	if err != nil {
		return err
	}
	if o.image != "" {
		spec.Image, spec.Build = o.image, nil
	}
	run := make([]byte, 4)
	rand.Read(run)
	// A session of its own finds what is left; the owner lets sbx gc reap
	// it if the bench is killed.
	spec.Session = "bench-" + hex.EncodeToString(run)
	spec.Owner = owner.Self()
	if spec.TTL == 0 {
		spec.TTL = time.Hour
	}
	rep := scaleReport{Backend: b.Name(), Image: spec.Image, N: o.n, Parallel: o.parallel}
	var (
		mu                    sync.Mutex
		errs                  []string
		createMs, execMs, rms []float64
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		rep.Failures++
		msg := err.Error()
		if len(errs) < 5 && !slices.Contains(errs, msg) {
			errs = append(errs, msg)
		}
	}
	logf := func(format string, args ...any) {
		if !a.json {
			fmt.Fprintf(a.stderr, format+"\n", args...)
		}
	}

	// The first sandbox alone: it pulls or builds the image, which is not
	// what is measured, so the clocks start after it.
	memBefore, memKnown := memAvailable()
	sandboxes := make([]backend.Sandbox, o.n)
	makeOne := func(i int) {
		s := spec
		s.Name = fmt.Sprintf("%s-%d", name, i)
		t0 := time.Now()
		sb, err := b.Create(ctx, s)
		if err != nil {
			fail(fmt.Errorf("create: %w", err))
			return
		}
		t1 := time.Now()
		sandboxes[i] = sb
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: o.cmd})
		switch {
		case err != nil:
			fail(fmt.Errorf("exec: %w", err))
		case res.ExitCode != 0:
			fail(fmt.Errorf("exec: %s exited %d: %s", strings.Join(o.cmd, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr))))
		}
		mu.Lock()
		rep.Created++
		createMs = append(createMs, ms(t1.Sub(t0)))
		if err == nil && res.ExitCode == 0 {
			rep.Execed++
			execMs = append(execMs, ms(time.Since(t1)))
		}
		mu.Unlock()
	}
	logf("bench: creating %d sandboxes (%s, image %s, %d at once)", o.n, b.Name(), spec.Image, o.parallel)
	t0 := time.Now()
	makeOne(0)
	rep.FirstCreateMs = ms(time.Since(t0))
	createMs, execMs = nil, nil
	start := time.Now()
	parallel(ctx, o.n-1, o.parallel, func(i int) { makeOne(i + 1) }, func(done int) {
		if (done+1)%100 == 0 {
			logf("bench: %d/%d made", done+1, o.n)
		}
	})
	rep.CreateWall = time.Since(start).Seconds()
	rep.CreateRate = float64(len(createMs)) / max(rep.CreateWall, 1e-9)

	// All alive at once: count them and measure their memory.
	live := slices.DeleteFunc(slices.Clone(sandboxes), func(sb backend.Sandbox) bool { return sb == nil })
	if infos, err := b.List(ctx, backend.Filter{Session: spec.Session}); err == nil {
		for _, info := range infos {
			if info.State == backend.StateRunning {
				rep.PeakAlive++
			}
		}
	} else {
		fail(fmt.Errorf("list: %w", err))
	}
	if memAfter, ok := memAvailable(); ok && memKnown && len(live) > 0 && memBefore > memAfter {
		rep.HostMemMiB = float64(memBefore-memAfter) / float64(len(live)) / (1 << 20)
	}
	// The engine's stats take a while per container: a sample of
	// memSample, spread over the sandboxes, tells the distribution.
	var sbMem []float64
	sample := live
	if len(live) > memSample {
		sample = nil
		for i := range memSample {
			sample = append(sample, live[i*len(live)/memSample])
		}
	}
	parallel(ctx, len(sample), o.parallel, func(i int) {
		mr, ok := backend.As[memoryReporter](sample[i])
		if !ok {
			return
		}
		if n, err := mr.MemoryUsage(ctx); err == nil {
			mu.Lock()
			sbMem = append(sbMem, float64(n)/(1<<20))
			mu.Unlock()
		}
	}, nil)
	rep.SandboxMemMiB, rep.SandboxMemSampled = percentilesOf(sbMem), len(sbMem)

	logf("bench: %d alive; removing them", rep.PeakAlive)
	dstart := time.Now()
	// Removal runs even after Ctrl-C, so the bench leaves nothing.
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	parallel(rmCtx, len(live), o.parallel, func(i int) {
		t0 := time.Now()
		if err := live[i].Destroy(rmCtx); err != nil {
			fail(fmt.Errorf("destroy: %w", err))
			return
		}
		mu.Lock()
		rep.Removed++
		rms = append(rms, ms(time.Since(t0)))
		mu.Unlock()
	}, nil)
	rep.DestroyWall = time.Since(dstart).Seconds()
	rep.TotalWall = time.Since(start).Seconds()
	if left, err := b.List(rmCtx, backend.Filter{Session: spec.Session}); err == nil {
		rep.Leaked = len(left)
	} else {
		fail(fmt.Errorf("list after removal: %w", err))
	}
	rep.CreateMs, rep.ExecMs, rep.DestroyMs = percentilesOf(createMs), percentilesOf(execMs), percentilesOf(rms)
	rep.Errors = errs

	if a.json {
		if err := printJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
		printScale(a, rep)
	}
	if ctx.Err() != nil {
		return &exitCode{stoppedStatus(ctx)}
	}
	if rep.Failures > 0 || rep.Leaked > 0 {
		return &exitCode{exitError}
	}
	return nil
}

func printScale(a *app, r scaleReport) {
	w := a.stdout
	fmt.Fprintf(w, "backend %s, image %s: %d sandboxes, %d at once\n", r.Backend, r.Image, r.N, r.Parallel)
	fmt.Fprintf(w, "created %d, exec ok %d, alive at once %d, removed %d, failures %d, leaked %d\n",
		r.Created, r.Execed, r.PeakAlive, r.Removed, r.Failures, r.Leaked)
	fmt.Fprintf(w, "first sandbox (pull or build included, left out below): %.1fms\n", r.FirstCreateMs)
	fmt.Fprintf(w, "wall: create+exec %.1fs (%.1f/s), remove %.1fs, total %.1fs\n",
		r.CreateWall, r.CreateRate, r.DestroyWall, r.TotalWall)
	t := newTable(w, "PER SANDBOX", "N", "P50", "P99", "MAX")
	row := func(what string, p percentiles, unit string) {
		t.row(what, strconv.Itoa(p.N), fmt.Sprintf("%.1f%s", p.P50, unit), p.p99Cell("%.1f"+unit), fmt.Sprintf("%.1f%s", p.Max, unit))
	}
	row("create", r.CreateMs, "ms")
	row("first exec", r.ExecMs, "ms")
	row("remove", r.DestroyMs, "ms")
	if r.SandboxMemMiB.Max > 0 {
		row(fmt.Sprintf("memory (own, %d asked)", r.SandboxMemSampled), r.SandboxMemMiB, "MiB")
	}
	t.flush()
	if r.HostMemMiB > 0 {
		fmt.Fprintf(w, "host memory per sandbox (this host's MemAvailable fall / alive): %.1f MiB\n", r.HostMemMiB)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}

// parallel runs fn(0..n-1) with at most p at once, calling progress (when
// set) after each. It stops starting new ones when ctx ends.
func parallel(ctx context.Context, n, p int, fn func(int), progress func(done int)) {
	sem := make(chan struct{}, p)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
			if progress != nil {
				mu.Lock()
				done++
				progress(done)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
