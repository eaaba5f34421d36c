package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// bench ttfc on the local backend, end to end and small: every mode is
// reported with both paths, sequential pooled requests never fall back to
// a cold start, and nothing of the run is left. No timing is asserted.
func TestBenchTTFCJSON(t *testing.T) {
	setup(t)
	useTreeSbxd(t)
	out := must(t, "--backend", "local", "bench", "ttfc", "-n", "3", "--rounds", "2", "--size", "2", "--burst", "3", "--interval", "20ms", "--json")
	var rep ttfcReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out)
	}
	if rep.Backend != "local" || rep.Entry != "main" || rep.Rounds != 2 || rep.PoolFrom != "flags" || rep.Failures != 0 || rep.Leaked != 0 {
		t.Errorf("report %+v", rep)
	}
	var modes []string
	for _, m := range rep.Modes {
		modes = append(modes, m.Mode)
		wantN, wantSize := 3, 2
		if m.Mode == ttfcBurst {
			wantSize = 3
		}
		if m.Requests != wantN || m.PoolSize != wantSize {
			t.Errorf("%s: %d requests per round from a pool of %d, want %d from %d", m.Mode, m.Requests, m.PoolSize, wantN, wantSize)
		}
		for path, p := range map[string]percentiles{"cold": m.Cold, "pooled": m.Pooled} {
			if p.N != 2*wantN || p.Min <= 0 || p.P50 < p.Min || p.Mean <= 0 || p.Max < p.P50 {
				t.Errorf("%s %s: %+v, want %d samples, all positive", m.Mode, path, p, 2*wantN)
			}
		}
		if m.Speedup <= 0 {
			t.Errorf("%s: speedup %v", m.Mode, m.Speedup)
		}
		if m.Mode == ttfcSequential && m.ColdFallbacks != 0 {
			t.Errorf("sequential: %d cold fallbacks from a pool full before every request", m.ColdFallbacks)
		}
	}
	if !slices.Equal(modes, ttfcModes) {
		t.Errorf("modes %v, want %v", modes, ttfcModes)
	}
	left, err := openBackend(t).List(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range left {
		t.Errorf("left behind: %s (%v)", info.ID, info.Labels)
	}
}

// An entry's [pool] table sets the pool, and the human table names every
// path of the mode run.
func TestBenchTTFCPoolFromConfig(t *testing.T) {
	setup(t)
	useTreeSbxd(t)
	t.Setenv("SBX_CONFIG", writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
[sandbox.sandboxes.main.pool]
size = 3
refill = 1
`))
	out := must(t, "bench", "ttfc", "--mode", "sequential", "-n", "2", "--rounds", "1", "--json")
	var rep ttfcReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.PoolFrom != "config" || len(rep.Modes) != 1 || rep.Modes[0].PoolSize != 3 || rep.Modes[0].Refill != 1 {
		t.Errorf("report %+v", rep)
	}
	table := must(t, "bench", "ttfc", "--mode", "staggered", "-n", "2", "--rounds", "1")
	for _, want := range []string{"staggered (every 100ms, pool 3)", "cold", "pooled", "failures 0, left behind 0"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	for _, args := range [][]string{{"--mode", "fast"}, {"-n", "0"}, {"--interval", "0s"}, {"--burst", "1001"}} {
		r := sbx(t, append([]string{"bench", "ttfc"}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, args[0]) {
			t.Errorf("bench ttfc %v: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// A backend without warm pools (opensandbox is no backend.Claimer; here
// its in-process fake) is refused before anything is made, by name.
func TestBenchTTFCNeedsAClaimer(t *testing.T) {
	setup(t)
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	t.Setenv("OPEN_SANDBOX_API_KEY", "k")
	t.Setenv("SBX_CONFIG", writeConfig(t, `
[sandbox]
backend = "opensandbox"
default_image = "ubuntu:24.04"
[sandbox.opensandbox]
domain = "`+srv.Domain()+`"
[sandbox.sandboxes.main]
`))
	r := sbx(t, "bench", "ttfc", "-n", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "the opensandbox backend has no warm pools") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
}
