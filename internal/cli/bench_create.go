package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

type benchCreateOptions struct {
	n            int
	image, entry string
	compare      string
	compareImage string
	sbxd         bool
}

func (a *app) benchCreateCmd() *cobra.Command {
	var o benchCreateOptions
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Measure create-to-first-exec, optionally against another backend in the same run",
		Long: `Create makes N sandboxes one after the other; for each it times Create plus
the first Exec of "true" (create-to-first-exec), then Destroy.

With --compare BACKEND it does the same on that backend (same config file and
entry, without [sandbox] docker_host) in alternating iterations, so both see
the same load on this machine, and reports how many times faster this
backend's p50 is.`,
		Example: `  sbx bench create --backend lite --compare native --compare-image sandboxkit-test/busybox:1 --n 30 --json`,
		Args:    exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.benchCreate(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.n, "n", 20, "sandboxes made (per backend)")
	f.StringVar(&o.image, "image", "", "image to use instead of the entry's")
	f.StringVar(&o.entry, "sandbox", "", `config entry to make the sandboxes from (default "main", or the only entry)`)
	f.StringVar(&o.compare, "compare", "", "also measure this backend, in alternating iterations, and report the ratio")
	f.StringVar(&o.compareImage, "compare-image", "", "image on the --compare backend (default: as on this one)")
	f.BoolVar(&o.sbxd, "sbxd", false, "run the first exec on this backend through the sbxd agent (as a program using sbxd.Wrap does); the --compare backend uses its plain exec")
	return cmd
}

// benchCreateReport is what bench create prints (--json: as is).
type benchCreateReport struct {
	Backend          string      `json:"backend"`
	Sbxd             bool        `json:"sbxd"` // this backend's first exec went through sbxd
	Image            string      `json:"image"`
	N                int         `json:"n"`
	CreateFirstExec  percentiles `json:"create_first_exec_ms"`
	Destroy          percentiles `json:"destroy_ms"`
	CompareBackend   string      `json:"compare_backend,omitempty"`
	CompareImage     string      `json:"compare_image,omitempty"`
	CompareCreate    percentiles `json:"compare_create_first_exec_ms,omitzero"`
	CompareDestroy   percentiles `json:"compare_destroy_ms,omitzero"`
	SpeedupVsCompare float64     `json:"speedup_vs_compare,omitempty"` // compare p50 / this p50
}

// createTarget is one backend bench create measures.
type createTarget struct {
	cfg               *config.Config
	b                 backend.Backend
	imageFlag         string // --image or --compare-image
	sbxd              bool   // first exec through sbxd.Wrap
	image             string
	create, destroyMs []float64
}

func (a *app) benchCreate(ctx context.Context, o benchCreateOptions) error {
	if o.n < 1 {
		return errors.New("sbx bench create: --n must be at least 1")
	}
	if err := handOverFor(o.compare); err != nil {
		return fmt.Errorf("--compare: %w", err)
	}
	cfg, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	targets := []*createTarget{{cfg: cfg, b: b, imageFlag: o.image, sbxd: o.sbxd}}
	if o.compare != "" {
		ocfg, ob, err := a.openCompare(ctx, cfg, o.compare)
		if err != nil {
			return err
		}
		defer ob.Close()
		targets = append(targets, &createTarget{cfg: ocfg, b: ob, imageFlag: cmp.Or(o.compareImage, o.image)})
	}
	session := benchSession()
	if !a.json {
		fmt.Fprintf(a.stderr, "bench: %d create+exec+destroy rounds per backend\n", o.n)
	}
	// One unmeasured round each: image resolution, caches, the sbxd volume.
	for i := -1; i < o.n; i++ {
		for _, t := range targets {
			created, destroyed, err := a.createRound(ctx, t, o.entry, session)
			if err != nil {
				return err
			}
			if i >= 0 {
				t.create = append(t.create, ms(created))
				t.destroyMs = append(t.destroyMs, ms(destroyed))
			}
		}
	}
	rep := benchCreateReport{Backend: b.Name(), Sbxd: o.sbxd, Image: targets[0].image, N: o.n,
		CreateFirstExec: percentilesOf(targets[0].create), Destroy: percentilesOf(targets[0].destroyMs)}
	if len(targets) > 1 {
		t := targets[1]
		rep.CompareBackend, rep.CompareImage = t.b.Name(), t.image
		rep.CompareCreate, rep.CompareDestroy = percentilesOf(t.create), percentilesOf(t.destroyMs)
		if rep.CreateFirstExec.P50 > 0 {
			rep.SpeedupVsCompare = rep.CompareCreate.P50 / rep.CreateFirstExec.P50
		}
	}
	if a.json {
		return printJSON(a.stdout, rep)
	}
	printBenchCreate(a, rep)
	return nil
}

// createRound makes a sandbox on t, runs true in it (through sbxd with
// t.sbxd) and destroys it, and returns how long create to first exec took
// and how long the destroy. Its errors, except sbxd.Wrap's, start with
// t's backend name.
func (a *app) createRound(ctx context.Context, t *createTarget, entry, session string) (created, destroyed time.Duration, err error) {
	start := time.Now()
	quiet := func(string, ...any) {}
	sb, spec, err := a.benchSandbox(ctx, t.cfg, t.b, benchExecOptions{image: t.imageFlag, entry: entry}, session, quiet)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", t.b.Name(), err)
	}
	t.image = spec.Image
	var ex backend.Sandbox = sb
	if t.sbxd {
		c, err := sbxd.Wrap(ctx, sb, sbxd.WithLogger(a.logger))
		if err != nil {
			destroy(ctx, sb)
			return 0, 0, err
		}
		ex = c
	}
	res, err := ex.Exec(ctx, trueReq)
	created = time.Since(start)
	if c, ok := ex.(*sbxd.Client); ok {
		c.Close()
	}
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("true exited %d", res.ExitCode)
	}
	start = time.Now()
	derr := destroy(ctx, sb)
	destroyed = time.Since(start)
	if err = errors.Join(err, derr); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", t.b.Name(), err)
	}
	return created, destroyed, nil
}

func printBenchCreate(a *app, rep benchCreateReport) {
	tb := newTable(a.stdout, "BACKEND", "IMAGE", "CREATE+FIRST EXEC P50", "P99", "MAX", "DESTROY P50")
	row := func(backend, image string, create, destroy percentiles) {
		tb.row(backend, image, fmt.Sprintf("%.1fms", create.P50), create.p99Cell("%.1fms"), fmt.Sprintf("%.1fms", create.Max), fmt.Sprintf("%.1fms", destroy.P50))
	}
	row(rep.Backend, rep.Image, rep.CreateFirstExec, rep.Destroy)
	if rep.CompareBackend != "" {
		row(rep.CompareBackend, rep.CompareImage, rep.CompareCreate, rep.CompareDestroy)
	}
	tb.flush()
	if rep.CompareBackend != "" {
		fmt.Fprintf(a.stdout, "%s creates %.1fx faster than %s (p50)\n", rep.Backend, rep.SpeedupVsCompare, rep.CompareBackend)
	}
}
