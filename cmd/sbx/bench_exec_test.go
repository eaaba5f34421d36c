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
