package cli

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// bench scale leaves the first sandbox (whose Create pulls or builds the
// image) out of its timings, as it says: here the in-process OpenSandbox
// server takes 1.5 s over the first create request only.
func TestBenchScaleLeavesOutTheFirstSandbox(t *testing.T) {
	setup(t)
	const slow = 1500 * time.Millisecond
	var creates atomic.Int32
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: "k", PendingFor: time.Millisecond, ReadyAfter: time.Millisecond,
		Intercept: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes" && creates.Add(1) == 1 {
				time.Sleep(slow) // as a pull would
			}
			return false
		}})
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
	out := must(t, "--json", "bench", "scale", "--n", "3", "--parallel", "2", "--cmd", "true")
	var rep scaleReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.Created != 3 || rep.Execed != 3 || rep.Failures != 0 || rep.Leaked != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.FirstCreateMs < float64(slow.Milliseconds()) {
		t.Errorf("first_create_ms %.1f, want at least the first create's %s", rep.FirstCreateMs, slow)
	}
	if rep.CreateMs.N != 2 || rep.CreateMs.Max >= float64(slow.Milliseconds()) {
		t.Errorf("create_ms %+v: want the 2 sandboxes after the first, without its %s", rep.CreateMs, slow)
	}
	if rep.CreateWall >= slow.Seconds() {
		t.Errorf("create_wall_s %.2f: the first sandbox's %s counted", rep.CreateWall, slow)
	}
	if rep.CreateRate <= 0 {
		t.Errorf("create_per_s %v", rep.CreateRate)
	}
}
