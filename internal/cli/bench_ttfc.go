package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

// The modes of bench ttfc, in the order "all" runs them.
const (
	ttfcSequential = "sequential"
	ttfcStaggered  = "staggered"
	ttfcBurst      = "burst"
)

var ttfcModes = []string{ttfcSequential, ttfcStaggered, ttfcBurst}

type ttfcOptions struct {
	mode                   string
	n, rounds, size, burst int
	interval               time.Duration
	image, entry           string
	cmd                    []string
	shared                 bool
}

func (a *app) benchTTFCCmd() *cobra.Command {
	var o ttfcOptions
	cmd := &cobra.Command{
		Use:   "ttfc",
		Short: "Measure time to first command: cold sandboxes against a warm pool, in the same run",
		Long: `Ttfc measures the time from asking for a sandbox of a config entry to the
first output of a command in it ("time to first command"), cold and from a
warm pool, in alternating rounds of one run so that both see the same load
on this machine:

  cold    the sandbox is made for the request, as Pool.Acquire does when
          no member is ready (it lists the pool's ready members, finds
          none, then creates, provisions and starts the sbxd agent), and the
          command runs through the agent;
  pooled  Pool.Acquire claims a ready sandbox from a pool that a keeper in
          this process keeps full, whose sbxd agent is already connected,
          and the command runs through it. The pool is private, as
          sbx serve's (the claim is recorded while the command runs);
          --shared measures one other processes may claim from too, as
          sbx pool keep's (the claim is made before the command).

Modes (--mode all runs the three):

  sequential  one request at a time; before each, the pool is full again
              (that wait is not timed): what a single agent sees.
  staggered   a request every --interval, whether the pool is full or not:
              shows whether the keeper keeps up (see the cold fallbacks).
  burst       --burst requests at once, from a pool of as many.

The pool's settings are the entry's [pool] table when it has one, else
--size (burst: --burst). The command is "echo ok" (--cmd); the clock stops
at its first byte of output (at its end if it prints nothing). Used
sandboxes are released and removed in the background, outside the timings;
before each round the previous round's are gone (or back in the pool).

It reports, per mode, the percentiles of both paths in ms, the speedup
(cold p50 / pooled p50), the pooled requests that found the pool empty
and were made cold (cold fallbacks), and the p50 of Acquire alone (the
rest is the first command). It exits 1 when a request failed or
when a sandbox of the run is left after it.`,
		Example: `  sbx bench ttfc --json
  sbx bench ttfc --backend lite --mode staggered --interval 100ms -n 50
  sbx bench ttfc --backend native --mode burst --burst 20 --rounds 5 --image sandboxkit-test/busybox:1`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(ttfcModes, o.mode) && o.mode != "all" {
				return usageError(cmd, "--mode %q: want sequential, staggered, burst or all", o.mode)
			}
			if o.n < 1 || o.rounds < 1 || o.size < 1 || o.burst < 1 {
				return usageError(cmd, "-n, --rounds, --size and --burst must be at least 1")
			}
			if o.size > config.MaxPoolSize || o.burst > config.MaxPoolSize {
				return usageError(cmd, "--size and --burst must be at most %d", config.MaxPoolSize)
			}
			if o.interval <= 0 {
				return usageError(cmd, "--interval %s: must be positive", o.interval)
			}
			if len(o.cmd) == 0 {
				return usageError(cmd, "--cmd must not be empty")
			}
			return a.benchTTFC(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.mode, "mode", "all", "sequential, staggered, burst or all")
	f.IntVarP(&o.n, "n", "n", 40, "requests per round (sequential and staggered; a burst is --burst requests)")
	f.IntVar(&o.rounds, "rounds", 3, "rounds per path and mode (cold and pooled alternate)")
	f.IntVar(&o.size, "size", 4, "pool size when the entry has no [pool] table (sequential and staggered)")
	f.IntVar(&o.burst, "burst", 20, "requests at once in burst mode, from a pool of as many")
	f.BoolVar(&o.shared, "shared", false, "measure a pool other processes may claim from too (sbx pool keep's) instead of a private one (sbx serve's)")
	f.DurationVar(&o.interval, "interval", 100*time.Millisecond, "time between requests in staggered mode")
	f.StringVar(&o.image, "image", "", "image to use instead of the entry's")
	f.StringVar(&o.entry, "sandbox", "", `config entry to make the sandboxes from (default "main", or the only entry)`)
	f.StringSliceVar(&o.cmd, "cmd", []string{"echo", "ok"}, "the first command (comma-separated argv)")
	return cmd
}

// ttfcReport is what bench ttfc prints (--json: as is).
type ttfcReport struct {
	Backend string   `json:"backend"`
	Entry   string   `json:"entry"`
	Image   string   `json:"image"`
	Command []string `json:"command"`
	Rounds  int      `json:"rounds"`
	// PoolFrom: "config" (the entry's [pool] table) or "flags".
	PoolFrom string `json:"pool_from"`
	// Private: the pooled path's pool was private (see --shared).
	Private  bool       `json:"private"`
	Modes    []ttfcMode `json:"modes"`
	Failures int        `json:"failures"`
	Errors   []string   `json:"errors,omitempty"` // the first few, distinct
	// Leaked: sandboxes of the run still listed after it (named in Errors).
	Leaked int `json:"leaked"`
}

// ttfcMode is one mode's figures.
type ttfcMode struct {
	Mode       string  `json:"mode"`
	PoolSize   int     `json:"pool_size"`
	Refill     int     `json:"refill"`
	Requests   int     `json:"requests_per_round"`
	IntervalMs float64 `json:"interval_ms,omitempty"` // staggered
	// Cold and Pooled: time to first command, in ms.
	Cold   percentiles `json:"cold_ms"`
	Pooled percentiles `json:"pooled_ms"`
	// Speedup is Cold.P50 / Pooled.P50.
	Speedup float64 `json:"speedup"`
	// ColdFallbacks: pooled requests that found the pool empty and were
	// made cold (their times are in Pooled).
	ColdFallbacks int `json:"cold_fallbacks"`
	// ColdAcquire and PooledAcquire: Acquire alone, in ms (the rest of
	// the time to first command is the command).
	ColdAcquire   percentiles `json:"cold_acquire_ms"`
	PooledAcquire percentiles `json:"pooled_acquire_ms"`
}

// Bench sandboxes carry ttfcRunLabel (the run) and ttfcPoolLabel (mode and
// path): each pool of the run has its own key, so it shares members with
// no other keeper of the entry, and the cold path's pool, which has no
// keeper, is always empty.
const (
	ttfcRunLabel  = "sbx-bench"
	ttfcPoolLabel = "sbx-bench-pool"
)

const (
	// ttfcRequestTimeout bounds one request.
	ttfcRequestTimeout = 5 * time.Minute
	// ttfcFillTimeout bounds waiting for a pool to fill (the first fill
	// may pull the image).
	ttfcFillTimeout = 10 * time.Minute
	// ttfcFillReport is how often fill says how far a pool is.
	ttfcFillReport = 10 * time.Second
	// ttfcSettleTimeout bounds waiting for a round's sandboxes to be gone.
	ttfcSettleTimeout = time.Minute
)

// ttfcRun is one bench ttfc run.
type ttfcRun struct {
	a         *app
	b         backend.Backend
	o         ttfcOptions
	name      string
	spec      backend.Spec
	provision func(context.Context, backend.Sandbox) error
	settings  *config.PoolConfig // the entry's [pool], or nil
	session   string
	binding   session.Binding
	bins      agentBinaries

	mu       sync.Mutex
	failures int
	errs     []string
}

func (a *app) benchTTFC(ctx context.Context, o ttfcOptions) error {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	r, err := a.newTTFCRun(cfg, b, o)
	if err != nil {
		return err
	}
	rep := ttfcReport{Backend: b.Name(), Entry: r.name, Image: r.spec.Image, Command: o.cmd, Rounds: o.rounds, PoolFrom: "flags", Private: !o.shared}
	if r.settings != nil {
		rep.PoolFrom = "config"
	}
	modes := ttfcModes
	if o.mode != "all" {
		modes = []string{o.mode}
	}
	var runErr error
	for _, mode := range modes {
		m, err := r.runMode(ctx, mode)
		if err != nil {
			runErr = fmt.Errorf("%s mode: %w", mode, err)
			break
		}
		rep.Modes = append(rep.Modes, m)
	}
	// The check runs after Ctrl-C too: nothing of the run may be left.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	left, err := r.leftBehind(lctx)
	if err != nil {
		r.fail(fmt.Errorf("listing the run's sandboxes: %w", err))
	}
	rep.Leaked = len(left)
	for _, info := range left {
		r.fail(fmt.Errorf("left behind: %s (pool state %q)", info.ID, info.Labels[backend.LabelPoolState]))
	}
	rep.Failures, rep.Errors = r.failures, r.errs
	if runErr != nil {
		for _, e := range rep.Errors {
			a.printError(errors.New(e))
		}
		return runErr
	}
	return a.benchResult(ctx, rep, func() { printTTFC(a, rep) }, rep.Failures > 0 || rep.Leaked > 0)
}

// newTTFCRun resolves the entry: its sandboxes are made as a pool makes
// them (Launcher.Standalone), with --image, in the run's own session.
func (a *app) newTTFCRun(cfg *config.Config, b backend.Backend, o ttfcOptions) (*ttfcRun, error) {
	if _, ok := backend.AsBackend[backend.Claimer](b); !ok {
		return nil, fmt.Errorf("sbx bench ttfc: the %s backend has no warm pools (it cannot hand a ready sandbox to exactly one task: it is no backend.Claimer), so there is no pooled path to measure: %w",
			b.Name(), errors.ErrUnsupported)
	}
	name, err := defaultEntry(cfg, o.entry)
	if err != nil {
		return nil, err
	}
	e, err := cfg.Entry(name)
	if err != nil {
		return nil, err
	}
	spec, provision, err := (&session.Launcher{Config: cfg, Backend: b, Logger: a.logger}).Standalone(name)
	if err != nil {
		return nil, err
	}
	sess := benchSession()
	benchOverrides(&spec, o.image, sess)
	return &ttfcRun{a: a, b: b, o: o, name: name, spec: spec, provision: provision, settings: e.PoolSettings(), session: sess,
		binding: session.Binding{Owner: owner.Self(), Session: sess}}, nil
}

// poolSettings are mode's pool settings: the entry's, else --size; a
// burst's pool is as large as the burst.
func (r *ttfcRun) poolSettings(mode string) config.PoolConfig {
	set := config.PoolConfig{Size: r.o.size}
	if r.settings != nil {
		set = *r.settings
	}
	if mode == ttfcBurst {
		set.Size = r.o.burst
	}
	return set
}

// requests is how many requests a round of mode makes.
func (r *ttfcRun) requests(mode string) int {
	if mode == ttfcBurst {
		return r.o.burst
	}
	return r.o.n
}

// newPool returns the pool of mode's path ("cold" or "pooled").
func (r *ttfcRun) newPool(mode, path string, set config.PoolConfig) (*session.Pool, error) {
	spec := r.spec
	spec.Labels = map[string]string{ttfcRunLabel: r.session, ttfcPoolLabel: mode + "-" + path}
	for k, v := range r.spec.Labels {
		spec.Labels[k] = v
	}
	return session.NewPool(session.PoolOptions{Backend: r.b, Name: r.name, Spec: spec, Provision: r.provision,
		Settings: set, Wrap: r.wrap, Logger: r.a.logger, Private: path == "pooled" && !r.o.shared})
}

// wrap starts the sbxd agent in a sandbox the pools make, so that the
// first command goes through a connected agent.
func (r *ttfcRun) wrap(ctx context.Context, sb backend.Sandbox) (backend.Sandbox, error) {
	c, _, err := r.a.startAgent(ctx, sb, sbxd.WithBinary(r.bins.find))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// agentBinaries keeps sbxd's binary per architecture once read, as sbx
// serve does: where the agent is copied into every new sandbox, reading
// (and unzipping) it each time would be counted in every cold start.
type agentBinaries struct {
	mu   sync.Mutex
	bins map[string][]byte
}

func (ab *agentBinaries) find(arch string) ([]byte, error) {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	if bin, ok := ab.bins[arch]; ok {
		return bin, nil
	}
	bin, err := sbxdbin.Find("", arch)
	if err != nil {
		return nil, err
	}
	if ab.bins == nil {
		ab.bins = map[string][]byte{}
	}
	ab.bins[arch] = bin
	return bin, nil
}

// runMode measures one mode: rounds of cold requests (from a pool without
// a keeper) alternating with rounds of pooled ones (from a kept pool).
func (r *ttfcRun) runMode(ctx context.Context, mode string) (ttfcMode, error) {
	set := r.poolSettings(mode)
	kept, err := r.newPool(mode, "pooled", set)
	if err != nil {
		return ttfcMode{}, err
	}
	cold, err := r.newPool(mode, "cold", set)
	if err != nil {
		return ttfcMode{}, err
	}
	m := ttfcMode{Mode: mode, PoolSize: kept.Settings().Size, Refill: kept.Settings().Refill, Requests: r.requests(mode)}
	if mode == ttfcStaggered {
		m.IntervalMs = ms(r.o.interval)
	}
	kctx, stop := context.WithCancel(ctx)
	keeping := make(chan error, 1)
	go func() { keeping <- kept.Keep(kctx) }()
	defer func() {
		// The keeper stops once it is no longer making members (it
		// refills after the last round): it then has only ready ones to
		// remove, which Close waits for.
		if ctx.Err() == nil {
			r.fill(ctx, kept)
		}
		stop()
		<-keeping
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := errors.Join(kept.Close(cctx), cold.Close(cctx)); err != nil {
			r.fail(fmt.Errorf("removing the %s mode's sandboxes: %w", mode, err))
		}
	}()

	r.a.benchLog("bench: %s: filling a pool of %d (%s)", mode, m.PoolSize, r.b.Name())
	// One request of each path, not measured: caches, the agent binary.
	for _, p := range []*session.Pool{cold, kept} {
		if err := r.fill(ctx, kept); err != nil {
			return m, err
		}
		res := r.request(ctx, p)
		if res.c != nil {
			res.c.Release()
			r.settle(ctx, []*session.Claimed{res.c})
		}
		if res.err != nil {
			return m, fmt.Errorf("first request: %w", res.err)
		}
	}

	var coldMs, pooledMs, coldAcq, pooledAcq []float64
	for round := range r.o.rounds {
		r.a.benchLog("bench: %s: round %d of %d", mode, round+1, r.o.rounds)
		order := []*session.Pool{cold, kept}
		if round%2 == 1 {
			order = []*session.Pool{kept, cold}
		}
		for _, p := range order {
			results, err := r.round(ctx, mode, p, kept)
			for _, res := range results {
				switch {
				case res.err != nil:
					r.fail(res.err)
				case p == cold:
					coldMs, coldAcq = append(coldMs, ms(res.d)), append(coldAcq, ms(res.acquire))
				default:
					pooledMs, pooledAcq = append(pooledMs, ms(res.d)), append(pooledAcq, ms(res.acquire))
					if !res.c.Warm {
						m.ColdFallbacks++
					}
				}
			}
			if err != nil {
				return m, err
			}
		}
	}
	m.Cold, m.Pooled = percentilesOf(coldMs), percentilesOf(pooledMs)
	m.ColdAcquire, m.PooledAcquire = percentilesOf(coldAcq), percentilesOf(pooledAcq)
	if m.Pooled.P50 > 0 {
		m.Speedup = m.Cold.P50 / m.Pooled.P50
	}
	return m, nil
}

// ttfcResult is one request's outcome.
type ttfcResult struct {
	c       *session.Claimed // nil when Acquire failed
	d       time.Duration    // asking to first output
	acquire time.Duration    // asking to Acquire's return
	err     error
}

// round makes one round of mode's requests on p. Before it, kept is full
// and nothing of the previous round is left; after it, the sandboxes are
// released and gone (all untimed). It returns an error only when it could
// not go on (the pool does not fill, ctx ended).
func (r *ttfcRun) round(ctx context.Context, mode string, p, kept *session.Pool) ([]ttfcResult, error) {
	n := r.requests(mode)
	results := make([]ttfcResult, 0, n)
	if mode == ttfcSequential {
		for range n {
			if err := r.fill(ctx, kept); err != nil {
				return results, err
			}
			res := r.request(ctx, p)
			results = append(results, res)
			if res.c != nil {
				res.c.Release()
				r.settle(ctx, []*session.Claimed{res.c})
			}
		}
		return results, ctx.Err()
	}
	if err := r.fill(ctx, kept); err != nil {
		return results, err
	}
	out := make([]ttfcResult, n)
	started := 0
	var wg sync.WaitGroup
	start := time.Now()
	gate := make(chan struct{})
	for i := range n {
		if mode == ttfcStaggered && !sleepUntil(ctx, start.Add(time.Duration(i)*r.o.interval)) {
			break
		}
		wg.Go(func() {
			if mode == ttfcBurst {
				<-gate
			}
			out[i] = r.request(ctx, p)
		})
		started++
	}
	close(gate)
	wg.Wait()
	results = out[:started]
	var used []*session.Claimed
	for _, res := range results {
		if res.c != nil {
			res.c.Release()
			used = append(used, res.c)
		}
	}
	r.settle(ctx, used)
	return results, ctx.Err()
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// request asks p for a sandbox and runs the command in it. Its result's
// sandbox is to be released (nil when Acquire failed).
func (r *ttfcRun) request(ctx context.Context, p *session.Pool) ttfcResult {
	ctx, cancel := context.WithTimeout(ctx, ttfcRequestTimeout)
	defer cancel()
	start := time.Now()
	c, err := p.Acquire(ctx, r.binding)
	if err != nil {
		return ttfcResult{err: err}
	}
	res := ttfcResult{c: c, acquire: time.Since(start)}
	out := &syncbuf.FirstWrite{}
	er, err := c.Exec(ctx, backend.ExecRequest{Cmd: r.o.cmd, Stdout: out})
	res.d = out.Since(start)
	switch {
	case err != nil:
		res.err = fmt.Errorf("sandbox %s: %s: %w", c.ID(), strings.Join(r.o.cmd, " "), err)
	case er.ExitCode != 0:
		res.err = fmt.Errorf("sandbox %s: %s exited %d: %s", c.ID(), strings.Join(r.o.cmd, " "), er.ExitCode, strings.TrimSpace(string(er.Stderr)))
	}
	return res
}

// fill waits until kept has its Size ready members. While it waits it says
// every ttfcFillReport how far the pool is, with the keeper's last error,
// so that a pool that cannot fill (a namespace that does not exist, an
// image that cannot be pulled) is not a silent wait.
func (r *ttfcRun) fill(ctx context.Context, kept *session.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, ttfcFillTimeout)
	defer cancel()
	size := kept.Settings().Size
	for {
		wctx, wcancel := context.WithTimeout(ctx, ttfcFillReport)
		err := kept.Ready(wctx, size)
		wcancel()
		if err == nil {
			return nil
		}
		st := kept.Stats()
		if ctx.Err() != nil {
			if st.LastError != "" {
				return fmt.Errorf("%w (last error: %s)", err, st.LastError)
			}
			return err
		}
		if st.LastError != "" {
			r.a.benchLog("bench: the pool is still filling: %d of %d ready; the keeper's last error: %s", st.Ready, size, st.LastError)
		} else {
			r.a.benchLog("bench: the pool is still filling: %d of %d ready", st.Ready, size)
		}
	}
}

// settle waits until the released sandboxes are gone (their resources
// released too, where the backend is a RemovalWaiter), or back in their
// pool (where it reuses them), so that their removal does not load the
// next round.
func (r *ttfcRun) settle(ctx context.Context, used []*session.Claimed) {
	ctx, cancel := context.WithTimeout(ctx, ttfcSettleTimeout)
	defer cancel()
	for _, c := range used {
		for {
			sb, err := r.b.Get(ctx, c.ID())
			if errors.Is(err, backend.ErrNotFound) {
				// Not found can still mean being torn down (a k8s pod
				// being deleted): wait for its resources too.
				if rw, ok := backend.AsBackend[backend.RemovalWaiter](r.b); ok {
					if err := rw.WaitRemoved(ctx, c.ID()); err != nil {
						r.a.logger.Warn("bench: a released sandbox is still being removed; going on", "sandbox", c.ID(), "err", err)
						return
					}
				}
				break
			}
			if err == nil {
				// Back in its pool: ready, or "making" in a private one.
				if info, err := sb.Info(ctx); err == nil && info.Labels[backend.LabelPoolState] != backend.PoolClaimed {
					break
				}
			}
			if !sleepUntil(ctx, time.Now().Add(20*time.Millisecond)) {
				if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
					r.a.logger.Warn("bench: a released sandbox is still there; going on", "sandbox", c.ID(), "waited", ttfcSettleTimeout)
				}
				return
			}
		}
	}
}

// leftBehind lists the run's sandboxes (its pools' members and what was
// made in its session).
func (r *ttfcRun) leftBehind(ctx context.Context) ([]backend.Info, error) {
	byLabel, err := r.b.List(ctx, backend.Filter{Labels: map[string]string{ttfcRunLabel: r.session}})
	if err != nil {
		return nil, err
	}
	bySession, err := r.b.List(ctx, backend.Filter{Session: r.session})
	if err != nil {
		return nil, err
	}
	left := byLabel
	for _, info := range bySession {
		if !slices.ContainsFunc(left, func(i backend.Info) bool { return i.ID == info.ID }) {
			left = append(left, info)
		}
	}
	return left, nil
}

// fail counts a failed request and keeps its message if it is one of the
// first few distinct ones.
func (r *ttfcRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures++
	msg := err.Error()
	if len(r.errs) < 5 && !slices.Contains(r.errs, msg) {
		r.errs = append(r.errs, msg)
	}
}

func printTTFC(a *app, rep ttfcReport) {
	w := a.stdout
	fmt.Fprintf(w, "backend %s, entry %s, image %s, command %q: %d rounds per path, cold and pooled alternating; pool settings from %s\n",
		rep.Backend, rep.Entry, orDash(rep.Image), strings.Join(rep.Command, " "), rep.Rounds, rep.PoolFrom)
	t := newTable(w, "MODE", "PATH", "N", "P50", "P90", "P99", "MEAN", "MIN", "MAX", "SPEEDUP", "COLD FALLBACKS")
	cell := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "ms" }
	for _, m := range rep.Modes {
		mode := fmt.Sprintf("%s (pool %d)", m.Mode, m.PoolSize)
		switch m.Mode {
		case ttfcStaggered:
			mode = fmt.Sprintf("%s (every %gms, pool %d)", m.Mode, m.IntervalMs, m.PoolSize)
		case ttfcBurst:
			mode = fmt.Sprintf("%s (%d at once, pool %d)", m.Mode, m.Requests, m.PoolSize)
		}
		for _, path := range []struct {
			name string
			p    percentiles
		}{{"cold", m.Cold}, {"pooled", m.Pooled}} {
			p := path.p
			speedup, fallbacks := "", ""
			if path.name == "pooled" {
				speedup, fallbacks = fmt.Sprintf("%.1fx", m.Speedup), strconv.Itoa(m.ColdFallbacks)
			}
			t.row(mode, path.name, strconv.Itoa(p.N), cell(p.P50), p.p90Cell("%.1fms"), p.p99Cell("%.1fms"),
				cell(p.Mean), cell(p.Min), cell(p.Max), speedup, fallbacks)
			mode = ""
		}
	}
	t.flush()
	for _, m := range rep.Modes {
		fmt.Fprintf(w, "%s: Acquire alone p50 cold %.1fms, pooled %.1fms\n", m.Mode, m.ColdAcquire.P50, m.PooledAcquire.P50)
	}
	fmt.Fprintf(w, "failures %d, left behind %d\n", rep.Failures, rep.Leaked)
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}
