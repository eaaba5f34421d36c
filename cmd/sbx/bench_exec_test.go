package main

import (
	"encoding/json"
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
	bin := filepath.Join(t.TempDir(), "sbxd")
	build := exec.Command("go", "build", "-o", bin, "github.com/sandboxkit/sandboxkit/cmd/sbxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building sbxd: %v\n%s", err, out)
	}
	t.Setenv(sbxdbin.EnvPath, bin)
	// --compare makes a second sandbox (here on the same backend) and
	// measures it in alternating rounds.
	out := must(t, "--backend", "local", "bench", "exec", "--n", "30", "--baseline-n", "2", "--compare", "local", "--json")
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	for _, k := range []string{"exec_p50_ms", "exec_p99_ms", "baseline_exec_p50_ms", "speedup", "read_small_p50_ms",
		"write_small_p50_ms", "copy_64mib_mb_per_s", "agent_rss_kib", "compare_exec_p50_ms", "compare_ratio"} {
		v, ok := rep[k].(float64)
		if !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, rep[k])
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
		if p["p50"] <= 0 || p["p99"] < p["p50"] {
			t.Errorf("%s percentiles %v", name, p)
		}
	}
	if rep.Speedup <= 0 {
		t.Errorf("speedup_vs_compare %v", rep.Speedup)
	}
	if list := listSandboxes(t); len(list) != 0 {
		t.Errorf("bench create left sandboxes behind: %+v", list)
	}
}
