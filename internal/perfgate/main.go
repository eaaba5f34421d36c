// Command perfgate is the performance gate: it measures the figures that
// carry the project's promises, each as a ratio against a floor measured
// in the same run (the two alternate, so that both see the same load),
// checks every ratio against its budget in bench/budgets.toml, and writes
// docs/benchmarks.md with SVG plots. A breach is measured once more; a
// second breach fails, naming the figure, the floor and the budget.
//
// Absolute times differ between machines and moments; ratios against a
// floor of the same machine and moment travel. Budgets are set so that a
// quiet CI run passes with a margin: the gate catches regressions of 1.5x
// and more, not noise.
//
//	go run ./internal/perfgate [-n 15] [-only NAME,...] [-skip NAME,...] [-budgets bench/budgets.toml] [-out docs]
//
// It needs what scripts/test.sh sets up (Docker with the test images,
// runc, the k8s harness for the k8s figures); a pair whose tools are
// missing fails unless -skip-missing.
package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// budget is one entry of the budgets file.
type budget struct {
	Max    float64 `toml:"max"`    // the ratio figure/floor (p50s) must stay at or below it
	Target float64 `toml:"target"` // the ratio the project aims at (reported, not enforced), 0: none
	// MaxP90 bounds the figure's p90 against the floor's p50 (0: not
	// checked), for figures whose tail is the promise (a warm pool's
	// claims while its keeper refills).
	MaxP90 float64 `toml:"max_p90"`
	Reason string  `toml:"reason"` // why this budget
}

// result is one pair's measurement.
type result struct {
	Name          string
	Figure, Floor string // what each is, for people
	FigureMs      []float64
	FloorMs       []float64
	Ratio         float64 // p50(figure) / p50(floor)
	RatioP90      float64 // p90(figure) / p50(floor)
	Budget        budget
	Attempts      int
	Passed        bool
	Err           error
	Note          string
	Took          time.Duration // the pair's measurements, attempts included (the gate's own cost shows)
}

func main() {
	n := flag.Int("n", 15, "measurements of each side of a pair")
	only := flag.String("only", "", "comma-separated pair names to run (default: all)")
	skip := flag.String("skip", "", "comma-separated pair names not to run")
	budgetsFile := flag.String("budgets", "bench/budgets.toml", "the budgets file")
	out := flag.String("out", "docs", "folder for benchmarks.md and its plots (\"\": none)")
	skipMissing := flag.Bool("skip-missing", false, "skip pairs whose tools are missing instead of failing")
	flag.Parse()

	var budgets map[string]budget
	if _, err := toml.DecodeFile(*budgetsFile, &budgets); err != nil {
		fatalf("perfgate: %s: %v", *budgetsFile, err)
	}
	env, err := newEnv()
	if err != nil {
		fatalf("perfgate: %v", err)
	}
	defer env.close()

	var names, skipped []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	if *skip != "" {
		skipped = strings.Split(*skip, ",")
	}
	// A name that is no pair is a typo: refused before anything runs (an
	// -only of none would pass having measured nothing).
	checkPairNames("-only", names)
	checkPairNames("-skip", skipped)
	checkPairNames(*budgetsFile, slices.Collect(maps.Keys(budgets)))
	var results []*result
	failed := false
	for _, p := range pairs {
		if names != nil && !slices.Contains(names, p.name) {
			continue
		}
		if slices.Contains(skipped, p.name) {
			fmt.Printf("%-16s skipped (-skip)\n", p.name)
			continue
		}
		b, ok := budgets[p.name]
		if !ok || b.Max <= 0 || b.Reason == "" {
			fatalf("perfgate: %s has no budget with a max and a reason in %s", p.name, *budgetsFile)
		}
		r := &result{Name: p.name, Figure: p.figure, Floor: p.floor, Budget: b}
		start := time.Now()
		if missing := p.needs(env); missing != "" {
			if *skipMissing {
				fmt.Printf("%-16s skipped: %s\n", p.name, missing)
				continue
			}
			r.Err = fmt.Errorf("cannot run: %s", missing)
		}
		for r.Err == nil && r.Attempts < 2 && !r.Passed {
			r.Attempts++
			r.FigureMs, r.FloorMs, r.Note, r.Err = p.measure(env, *n)
			if r.Err == nil {
				r.Ratio = p50(r.FigureMs) / p50(r.FloorMs)
				r.RatioP90 = pct(r.FigureMs, 0.9) / p50(r.FloorMs)
				r.Passed = r.Ratio <= b.Max && (b.MaxP90 == 0 || r.RatioP90 <= b.MaxP90)
			}
		}
		r.Took = time.Since(start)
		results = append(results, r)
		report(os.Stdout, r)
		failed = failed || !r.Passed
	}
	if *out != "" && names == nil {
		if err := writeDocs(*out, results, env); err != nil {
			fatalf("perfgate: writing %s: %v", *out, err)
		}
	}
	if failed {
		fmt.Println("perfgate: FAILED (a breach was measured twice, or a pair could not run)")
		os.Exit(1)
	}
	fmt.Println("perfgate: every ratio is within its budget")
}

func report(w io.Writer, r *result) {
	switch {
	case r.Err != nil:
		fmt.Fprintf(w, "%-16s ERROR %v (%s)\n", r.Name, r.Err, r.Took.Round(time.Second))
	default:
		status := "ok"
		if !r.Passed {
			status = "BREACH"
		}
		target := ""
		if r.Budget.Target > 0 {
			met := "met"
			if r.Ratio > r.Budget.Target {
				met = "not met"
			}
			target = fmt.Sprintf(", target %s %s", fmtRatio(r.Budget.Target), met)
		}
		tail := ""
		if r.Budget.MaxP90 > 0 {
			tail = fmt.Sprintf("; p90 %s of the floor's p50 (budget %s)", fmtRatio(r.RatioP90), fmtRatio(r.Budget.MaxP90))
		}
		fmt.Fprintf(w, "%-16s %-6s %s (budget %s%s%s): %s p50 %.1f ms against %s p50 %.1f ms, n=%d, attempts %d, %s%s\n",
			r.Name, status, fmtRatio(r.Ratio), fmtRatio(r.Budget.Max), target, tail, r.Figure, p50(r.FigureMs), r.Floor, p50(r.FloorMs), len(r.FigureMs), r.Attempts, r.Took.Round(time.Second), noteOf(r))
	}
}

func noteOf(r *result) string {
	if r.Note == "" {
		return ""
	}
	return " (" + r.Note + ")"
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}

// machine describes this machine and moment, for the page.
func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	load := "?"
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		load = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	return fmt.Sprintf("%d cores (%s), %s/%s, load %s, %s", runtime.NumCPU(), model, runtime.GOOS, runtime.GOARCH, load, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
}

// checkPairNames exits naming where (a flag or file) if one of names is
// no pair's.
func checkPairNames(where string, names []string) {
	for _, name := range names {
		if !slices.ContainsFunc(pairs, func(p pair) bool { return p.name == name }) {
			fatalf("perfgate: %s names %q, which is no pair (known: %s)", where, name, pairNames())
		}
	}
}

func pairNames() string {
	var ns []string
	for _, p := range pairs {
		ns = append(ns, p.name)
	}
	return strings.Join(ns, ", ")
}

// repoRoot is the module's root (the working directory of go run).
func repoRoot() string {
	wd, _ := os.Getwd()
	for d := wd; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return wd
}
