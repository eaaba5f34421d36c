package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// bench exec on the local backend prints one JSON object with every field
// the issue asks for. The sbxd it injects is built from this tree (the
// embedded one may predate it).
func TestBenchExecJSON(t *testing.T) {
	setup(t)
	useTreeSbxd(t)
	// --compare makes a second sandbox (here on the same backend) and
	// measures it in alternating rounds.
	out := must(t, "--backend", "local", "bench", "exec", "--n", "30", "--baseline-n", "2", "--compare", "local", "--json")
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"exec_p50_ms", "exec_max_ms", "baseline_exec_p50_ms", "baseline_exec_max_ms", "speedup", "read_small_p50_ms",
		"write_small_p50_ms", "copy_64mib_mb_per_s", "agent_rss_kib", "compare_exec_p50_ms", "compare_ratio"} {
		v, ok := rep[k].(float64)
		if !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, rep[k])
		}
	}
	// 30 and 2 samples: their top figure is the maximum, not a p99.
	for _, k := range []string{"exec_p99_ms", "baseline_exec_p99_ms"} {
		if v, ok := rep[k]; ok {
			t.Errorf("%s = %v reported from 100 samples or fewer", k, v)
		}
	}
	if rep["compare_backend"] != "local" {
		t.Errorf("compare_backend = %v, want local", rep["compare_backend"])
	}
	if list := listSandboxes(t); len(list) != 0 {
		t.Errorf("bench exec left sandboxes behind: %+v", list)
	}
	r := sbx(t, "--backend", "local", "bench", "exec", "--n", "1", "--compare", "nosuch")
	if r.code == 0 || !strings.Contains(r.stderr, `"nosuch"`) {
		t.Errorf("--compare nosuch: exit %d, stderr %q", r.code, r.stderr)
	}
}

// useTreeSbxd makes the sbxd that sbx injects the one built from this tree
// (the embedded one may predate it).
func useTreeSbxd(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sbxd")
	build := exec.Command("go", "build", "-o", bin, "github.com/sandboxkit/sandboxkit/cmd/sbxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sbxd: %v\n%s", err, out)
	}
	t.Setenv(sbxdbin.EnvPath, bin)
}

// bench create times create-to-first-exec on two backends in alternating
// rounds and removes every sandbox it made.
func TestBenchCreateJSON(t *testing.T) {
	setup(t)
	out := must(t, "--backend", "local", "bench", "create", "--n", "3", "--compare", "local", "--json")
	var rep struct {
		Backend         string             `json:"backend"`
		N               int                `json:"n"`
		CreateFirstExec map[string]float64 `json:"create_first_exec_ms"`
		Destroy         map[string]float64 `json:"destroy_ms"`
		CompareBackend  string             `json:"compare_backend"`
		CompareCreate   map[string]float64 `json:"compare_create_first_exec_ms"`
		Speedup         float64            `json:"speedup_vs_compare"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if rep.Backend != "local" || rep.CompareBackend != "local" || rep.N != 3 {
		t.Errorf("report %+v", rep)
	}
	for name, p := range map[string]map[string]float64{"create": rep.CreateFirstExec, "destroy": rep.Destroy, "compare create": rep.CompareCreate} {
		if p["p50"] <= 0 || p["max"] < p["p50"] || p["n"] != 3 {
			t.Errorf("%s percentiles %v", name, p)
		}
		if _, ok := p["p99"]; ok {
			t.Errorf("%s: a p99 from 3 samples: %v", name, p)
		}
	}
	if rep.Speedup <= 0 {
		t.Errorf("speedup_vs_compare %v", rep.Speedup)
	}
	if list := listSandboxes(t); len(list) != 0 {
		t.Errorf("bench create left sandboxes behind: %+v", list)
	}
}

// The plain path is measured in rounds alternating with sbxd's (and the
// compared backend's), not in one block before the agent starts: every path
// sees the same load from start to end.
func TestExecSchedule(t *testing.T) {
	for _, c := range []struct {
		n, baselineN int
		compare      bool
	}{{500, 50, false}, {500, 50, true}, {30, 2, true}, {1, 1, false}, {60, 500, false}, {100, 7, false}} {
		got := execSchedule(c.n, c.baselineN, c.compare)
		total := map[execPath]int{}
		plainBatches := 0
		for i, b := range got {
			if b.n <= 0 {
				t.Errorf("%+v: empty batch %d: %+v", c, i, got)
			}
			total[b.path] += b.n
			if b.path == pathPlain {
				plainBatches++
				if i == 0 || got[i-1].path != pathSbxd {
					t.Errorf("%+v: plain batch %d does not follow one through sbxd: %+v", c, i, got)
				}
			}
			if b.path == pathCompare && (i == 0 || got[i-1].path == pathCompare) {
				t.Errorf("%+v: compare batch %d follows no other path: %+v", c, i, got)
			}
		}
		want := map[execPath]int{pathSbxd: c.n, pathPlain: c.baselineN}
		if c.compare {
			want[pathCompare] = c.n
		}
		if fmt.Sprint(total) != fmt.Sprint(want) {
			t.Errorf("%+v: %v execs, want %v", c, total, want)
		}
		rounds := (c.n + execRound - 1) / execRound
		if wantBatches := min(rounds, c.baselineN); plainBatches != wantBatches {
			t.Errorf("%+v: the plain execs come in %d batches, want them spread over %d rounds", c, plainBatches, wantBatches)
		}
	}
}

// With 100 samples or fewer no p99 is reported, with 10 or fewer no p90:
// they would be the maximum.
func TestPercentilesTopFigure(t *testing.T) {
	xs := func(n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(n - i) // unsorted
		}
		return out
	}
	for _, c := range []struct {
		n              int
		p90, p99, max  float64
		mean           float64
		cell90, cell99 string
	}{
		{1, 0, 0, 1, 1, "-", "-"},
		{10, 0, 0, 10, 5.5, "-", "-"},
		{11, 10, 0, 11, 6, "10.0", "-"},
		{50, 46, 0, 50, 25.5, "46.0", "-"},
		{100, 91, 0, 100, 50.5, "91.0", "-"},
		{101, 91, 100, 101, 51, "91.0", "100.0"},
		{500, 451, 496, 500, 250.5, "451.0", "496.0"},
	} {
		p := percentilesOf(xs(c.n))
		if p.N != c.n || p.Min != 1 || p.Mean != c.mean || p.P90 != c.p90 || p.P99 != c.p99 || p.Max != c.max ||
			p.p90Cell("%.1f") != c.cell90 || p.p99Cell("%.1f") != c.cell99 {
			t.Errorf("%d samples: %+v, p90 cell %q, p99 cell %q", c.n, p, p.p90Cell("%.1f"), p.p99Cell("%.1f"))
		}
	}
}
