package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
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
	cmd.AddCommand(scale, a.benchCLICmd())
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

// percentiles summarise N samples. A percentile that would be the
// maximum with this few samples is left out (0): P90 with 10 samples or
// fewer, P99 with 100 or fewer.
type percentiles struct {
	N    int     `json:"n"`
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90,omitempty"`
	P99  float64 `json:"p99,omitempty"`
	Max  float64 `json:"max"`
}

// minP90Samples and minP99Samples are the fewest samples whose 90th and
// 99th percentiles are not their maximum.
const (
	minP90Samples = 11
	minP99Samples = 101
)

// memSample bounds how many sandboxes bench scale asks for their memory.
const memSample = 50

func percentilesOf(xs []float64) percentiles {
	if len(xs) == 0 {
		return percentiles{}
	}
	slices.Sort(xs)
	at := func(p float64) float64 { return xs[min(len(xs)-1, int(p*float64(len(xs))))] }
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	mean := math.Round(sum/float64(len(xs))*1000) / 1000 // as ms(): to the microsecond
	p := percentiles{N: len(xs), Min: xs[0], Mean: mean, P50: at(0.50), Max: xs[len(xs)-1]}
	if len(xs) >= minP90Samples {
		p.P90 = at(0.90)
	}
	if len(xs) >= minP99Samples {
		p.P99 = at(0.99)
	}
	return p
}

// p90Cell and p99Cell render P90 and P99 for a table: "-" when there are
// too few samples to tell them from the maximum.
func (p percentiles) p90Cell(format string) string { return topCell(p.N, minP90Samples, p.P90, format) }
func (p percentiles) p99Cell(format string) string { return topCell(p.N, minP99Samples, p.P99, format) }

func topCell(n, least int, v float64, format string) string {
	if n < least {
		return "-"
	}
	return fmt.Sprintf(format, v)
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
	name, spec, err := benchSpec(cfg, o.entry, o.image, benchSession())
	if err != nil {
		return err
	}
	r := &scaleRun{a: a, b: b, o: o, name: name, spec: spec,
		rep: scaleReport{Backend: b.Name(), Image: spec.Image, N: o.n, Parallel: o.parallel}}

	memBefore, memKnown := memAvailable()
	live, start := r.createAll(ctx)
	r.rep.CreateWall = time.Since(start).Seconds()
	r.rep.CreateRate = float64(len(r.createMs)) / max(r.rep.CreateWall, 1e-9)

	// All alive at once: count them and measure their memory.
	r.countAlive(ctx)
	if memAfter, ok := memAvailable(); ok && memKnown && len(live) > 0 && memBefore > memAfter {
		r.rep.HostMemMiB = float64(memBefore-memAfter) / float64(len(live)) / (1 << 20)
	}
	r.sampleMemory(ctx, live)

	a.benchLog("bench: %d alive; removing them", r.rep.PeakAlive)
	// Removal runs even after Ctrl-C, so the bench leaves nothing.
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	r.removeAll(rmCtx, live)
	r.rep.TotalWall = time.Since(start).Seconds()
	r.countLeaked(rmCtx)
	rep := r.report()

	return a.benchResult(ctx, rep, func() { printScale(a, rep) }, rep.Failures > 0 || rep.Leaked > 0)
}

// benchResult prints a bench's report (JSON, or with print) and turns its
// end into sbx's exit code: the stop signal's when stopped, 1 when failed
// (a request failed, a sandbox was left).
func (a *app) benchResult(ctx context.Context, rep any, print func(), failed bool) error {
	if a.json {
		if err := printJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
		print()
	}
	if ctx.Err() != nil {
		return &exitCode{stoppedStatus(ctx)}
	}
	if failed {
		return &exitCode{exitError}
	}
	return nil
}

// scaleRun is one bench scale run: what its sandboxes are made from and
// what it measures, shared by the goroutines that make, measure and remove
// them.
type scaleRun struct {
	a    *app
	b    backend.Backend
	o    scaleOptions
	name string       // the config entry
	spec backend.Spec // the entry's, in the run's own session

	mu                         sync.Mutex // guards the fields below while goroutines run
	rep                        scaleReport
	errs                       []string // the first few distinct failures
	createMs, execMs, removeMs []float64
}

// fail counts a failure and keeps its message if it is one of the first
// few distinct ones.
func (r *scaleRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Failures++
	msg := err.Error()
	if len(r.errs) < 5 && !slices.Contains(r.errs, msg) {
		r.errs = append(r.errs, msg)
	}
}

// createAll makes the sandboxes, at most o.parallel at once, runs the
// command once in each and returns those it made, and when the measured
// part (after the first sandbox) began.
func (r *scaleRun) createAll(ctx context.Context) ([]backend.Sandbox, time.Time) {
	sandboxes := make([]backend.Sandbox, r.o.n)
	r.a.benchLog("bench: creating %d sandboxes (%s, image %s, %d at once)", r.o.n, r.b.Name(), r.spec.Image, r.o.parallel)
	// The first sandbox alone: it pulls or builds the image, which is not
	// what is measured, so it is reported apart and the clocks start
	// after it.
	t0 := time.Now()
	sandboxes[0] = r.createOne(ctx, 0)
	r.rep.FirstCreateMs = ms(time.Since(t0))
	r.mu.Lock()
	r.createMs, r.execMs = nil, nil
	r.mu.Unlock()
	start := time.Now()
	parallel(ctx, r.o.n-1, r.o.parallel, func(i int) { sandboxes[i+1] = r.createOne(ctx, i+1) }, func(done int) {
		if (done+1)%100 == 0 {
			r.a.benchLog("bench: %d/%d made", done+1, r.o.n)
		}
	})
	return slices.DeleteFunc(sandboxes, func(sb backend.Sandbox) bool { return sb == nil }), start
}

// createOne makes sandbox i and runs the command in it, timing both; it
// returns nil when Create failed.
func (r *scaleRun) createOne(ctx context.Context, i int) backend.Sandbox {
	s := r.spec
	s.Name = fmt.Sprintf("%s-%d", r.name, i)
	t0 := time.Now()
	sb, err := r.b.Create(ctx, s)
	if err != nil {
		r.fail(fmt.Errorf("create: %w", err))
		return nil
	}
	t1 := time.Now()
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: r.o.cmd})
	switch {
	case err != nil:
		r.fail(fmt.Errorf("exec: %w", err))
	case res.ExitCode != 0:
		r.fail(fmt.Errorf("exec: %s exited %d: %s", strings.Join(r.o.cmd, " "), res.ExitCode, strings.TrimSpace(string(res.Stderr))))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Created++
	r.createMs = append(r.createMs, ms(t1.Sub(t0)))
	if err == nil && res.ExitCode == 0 {
		r.rep.Execed++
		r.execMs = append(r.execMs, ms(time.Since(t1)))
	}
	return sb
}

// countAlive counts the run's sandboxes that the backend lists as running.
func (r *scaleRun) countAlive(ctx context.Context) {
	infos, err := r.b.List(ctx, backend.Filter{Session: r.spec.Session})
	if err != nil {
		r.fail(fmt.Errorf("list: %w", err))
		return
	}
	for _, info := range infos {
		if info.State == backend.StateRunning {
			r.rep.PeakAlive++
		}
	}
}

// sampleMemory asks up to memSample of the live sandboxes for their memory.
// The engine's stats take a while per container: a sample spread over the
// sandboxes tells the distribution.
func (r *scaleRun) sampleMemory(ctx context.Context, live []backend.Sandbox) {
	var sbMem []float64
	sample := live
	if len(live) > memSample {
		sample = nil
		for i := range memSample {
			sample = append(sample, live[i*len(live)/memSample])
		}
	}
	parallel(ctx, len(sample), r.o.parallel, func(i int) {
		mr, ok := backend.As[memoryReporter](sample[i])
		if !ok {
			return
		}
		if n, err := mr.MemoryUsage(ctx); err == nil {
			r.mu.Lock()
			sbMem = append(sbMem, float64(n)/(1<<20))
			r.mu.Unlock()
		}
	}, nil)
	r.rep.SandboxMemMiB, r.rep.SandboxMemSampled = percentilesOf(sbMem), len(sbMem)
}

// removeAll destroys the live sandboxes, at most o.parallel at once.
func (r *scaleRun) removeAll(ctx context.Context, live []backend.Sandbox) {
	start := time.Now()
	parallel(ctx, len(live), r.o.parallel, func(i int) {
		t0 := time.Now()
		if err := live[i].Destroy(ctx); err != nil {
			r.fail(fmt.Errorf("destroy: %w", err))
			return
		}
		r.mu.Lock()
		r.rep.Removed++
		r.removeMs = append(r.removeMs, ms(time.Since(t0)))
		r.mu.Unlock()
	}, nil)
	r.rep.DestroyWall = time.Since(start).Seconds()
}

// countLeaked counts the run's sandboxes still listed after removal.
func (r *scaleRun) countLeaked(ctx context.Context) {
	left, err := r.b.List(ctx, backend.Filter{Session: r.spec.Session})
	if err != nil {
		r.fail(fmt.Errorf("list after removal: %w", err))
		return
	}
	r.rep.Leaked = len(left)
}

// report completes the report with the latency percentiles and the errors.
func (r *scaleRun) report() scaleReport {
	rep := r.rep
	rep.CreateMs, rep.ExecMs, rep.DestroyMs = percentilesOf(r.createMs), percentilesOf(r.execMs), percentilesOf(r.removeMs)
	rep.Errors = r.errs
	return rep
}

// benchSession names a bench run's own session, by which it finds what it
// left behind.
func benchSession() string {
	run := make([]byte, 4)
	rand.Read(run)
	return "bench-" + hex.EncodeToString(run)
}

// benchSpec returns the name and spec of the config entry a bench makes its
// sandboxes from (the default one when entry is ""), with benchOverrides
// applied.
func benchSpec(cfg *config.Config, entry, image, session string) (string, backend.Spec, error) {
	name, err := defaultEntry(cfg, entry)
	if err != nil {
		return "", backend.Spec{}, err
	}
	spec, err := cfg.Spec(name)
	if err != nil {
		return "", backend.Spec{}, err
	}
	benchOverrides(&spec, image, session)
	return name, spec, nil
}

// benchOverrides puts image (when set) instead of the spec's, and the spec
// in session. The owner lets sbx gc reap the sandboxes if the bench is
// killed.
func benchOverrides(spec *backend.Spec, image, session string) {
	if image != "" {
		spec.Image, spec.Build = image, nil
	}
	spec.Session = session
	spec.Owner = owner.Self()
	if spec.TTL == 0 {
		spec.TTL = time.Hour
	}
}

// benchLog reports a bench's progress on stderr (not with --json).
func (a *app) benchLog(format string, args ...any) {
	if !a.json {
		fmt.Fprintf(a.stderr, format+"\n", args...)
	}
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
