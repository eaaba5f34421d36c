package main

import (
	"fmt"
	"html"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// writeDocs writes dir/benchmarks.md and its plots (dir/benchmarks/*.svg).
func writeDocs(dir string, results []*result, e *env) error {
	plots := filepath.Join(dir, "benchmarks")
	if err := os.MkdirAll(plots, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(plots, "ratios.svg"), []byte(ratiosSVG(results)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(plots, "times.svg"), []byte(timesSVG(results)), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`# Benchmarks

This page is written by the performance gate (` + "`go run ./internal/perfgate`" + `,
run by ` + "`.ci/run`" + `); do not edit it by hand. Every figure is measured against a
floor measured in the same run, the two alternating, and the gate checks
the ratio of their medians against a budget in ` + "`bench/budgets.toml`" + `
(where each budget's reason is written). Ratios travel between machines;
the absolute times beside them are this run's, on this machine:

`)
	fmt.Fprintf(&b, "> %s\n\n", machine())
	b.WriteString("| figure | floor | ratio (p50s) | budget | target | figure p50 / p90 | floor p50 / p90 |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(&b, "| %s | %s | could not run: %s | %s | | | |\n", r.Figure, r.Floor, html.EscapeString(r.Err.Error()), fmtRatio(r.Budget.Max))
			continue
		}
		target := ""
		if r.Budget.Target > 0 {
			mark := "met"
			if r.Ratio > r.Budget.Target {
				mark = "not met"
			}
			target = fmt.Sprintf("%s (%s)", fmtRatio(r.Budget.Target), mark)
		}
		budget := fmtRatio(r.Budget.Max)
		if r.Budget.MaxP90 > 0 {
			budget += fmt.Sprintf("; p90 %s of the floor's p50 (budget %s)", fmtRatio(r.RatioP90), fmtRatio(r.Budget.MaxP90))
		}
		fmt.Fprintf(&b, "| %s | %s | **%s** | %s | %s | %.1f / %.1f ms | %.1f / %.1f ms |\n",
			r.Figure, r.Floor, fmtRatio(r.Ratio), budget, target, p50(r.FigureMs), pct(r.FigureMs, 0.9), p50(r.FloorMs), pct(r.FloorMs, 0.9))
	}
	b.WriteString(`
Ratios against their budgets (the bar is the ratio, the line the budget,
the dot the target):

![ratios](benchmarks/ratios.svg)

Times (log scale): per pair the figure above its floor; the box spans
p10 to p90, the tick is the median, the line min to max:

![times](benchmarks/times.svg)

Notes:
`)
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(&b, "- %s: %s\n", r.Name, r.Note)
		}
	}
	fmt.Fprintf(&b, "- Each side was measured %s; a pair that breached its budget was measured once more.\n", samplesNote(results))
	return os.WriteFile(filepath.Join(dir, "benchmarks.md"), []byte(b.String()), 0o644)
}

func samplesNote(results []*result) string {
	ns := map[int]bool{}
	for _, r := range results {
		ns[len(r.FigureMs)] = true
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(ns)) {
		parts = append(parts, fmt.Sprint(n))
	}
	return strings.Join(parts, " or ") + " times"
}

const (
	svgWidth = 760
	labelW   = 150
	rowH     = 22
)

// ratiosSVG draws each pair's ratio as a bar against its budget, on a log
// axis (pooled against cold is a few thousandths, the CLI several times).
func ratiosSVG(results []*result) string {
	lo, hi := math.Inf(1), 0.0
	for _, r := range results {
		for _, v := range []float64{r.Ratio, r.Budget.Max, r.Budget.Target} {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		lo, hi = 0.1, 10
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	h := rowH*len(results) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, h)
	plotW := float64(svgWidth - labelW - 90)
	x := func(v float64) float64 {
		return float64(labelW) + (math.Log10(max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}
	for i, r := range results {
		y := 10 + i*rowH
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-6, y+14, html.EscapeString(r.Name))
		color := "#4a7"
		if !r.Passed {
			color = "#c44"
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+3, max(x(r.Ratio)-float64(labelW), 1), rowH-8, color)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-width="2"/>`+"\n", x(r.Budget.Max), x(r.Budget.Max), y, y+rowH-2)
		if r.Budget.Target > 0 {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="3" fill="#36c"/>`+"\n", x(r.Budget.Target), y+rowH/2)
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", max(x(r.Ratio), x(r.Budget.Max), x(r.Budget.Target))+6, y+14, fmtRatio(r.Ratio))
	}
	axisY := 10 + len(results)*rowH + 5
	for v := lo; v <= hi*1.0001; v *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="5" y2="%d" stroke="#ddd"/>`+"\n", x(v), x(v), axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%gx</text>`+"\n", x(v), axisY+12, v)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// fmtRatio shows a ratio with the digits that matter.
func fmtRatio(v float64) string {
	if v < 0.1 {
		return fmt.Sprintf("%.3fx", v)
	}
	return fmt.Sprintf("%.2fx", v)
}

// timesSVG draws each pair's figure and floor distributions on a log axis.
func timesSVG(results []*result) string {
	lo, hi := math.Inf(1), 0.0
	for _, r := range results {
		for _, s := range [][]float64{r.FigureMs, r.FloorMs} {
			if len(s) > 0 {
				lo, hi = min(lo, slices.Min(s)), max(hi, slices.Max(s))
			}
		}
	}
	if hi == 0 {
		lo, hi = 1, 10
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(max(lo, 0.01)))), math.Pow(10, math.Ceil(math.Log10(hi)))
	h := 2*rowH*len(results) + 40
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgWidth, h)
	plotW := float64(svgWidth - labelW - 40)
	x := func(v float64) float64 {
		return float64(labelW) + (math.Log10(max(v, lo))-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotW
	}
	row := 0
	for _, r := range results {
		for i, side := range []struct {
			label string
			s     []float64
			color string
		}{{r.Name, r.FigureMs, "#4a7"}, {"floor", r.FloorMs, "#999"}} {
			y := 10 + row*rowH
			row++
			anchor := "end"
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="%s" fill="%s">%s</text>`+"\n", labelW-6, y+14, anchor, map[bool]string{true: "#000", false: "#777"}[i == 0], html.EscapeString(side.label))
			if len(side.s) == 0 {
				continue
			}
			mid := y + rowH/2
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s"/>`+"\n", x(slices.Min(side.s)), x(slices.Max(side.s)), mid, mid, side.color)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" opacity="0.6"/>`+"\n", x(pct(side.s, 0.1)), y+4, max(x(pct(side.s, 0.9))-x(pct(side.s, 0.1)), 1), rowH-8, side.color)
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#000" stroke-width="2"/>`+"\n", x(p50(side.s)), x(p50(side.s)), y+2, y+rowH-2)
		}
	}
	axisY := 10 + row*rowH + 5
	for v := lo; v <= hi*1.0001; v *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="5" y2="%d" stroke="#ddd"/>`+"\n", x(v), x(v), axisY)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%g ms</text>`+"\n", x(v), axisY+12, v)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func p50(s []float64) float64 { return pct(s, 0.5) }

// pct is the q quantile of s (nearest rank).
func pct(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(math.Ceil(q*float64(len(c)))) - 1
	return c[min(max(i, 0), len(c)-1)]
}
