package cli

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/session"
)

// A killed sbx up leaves a session whose launch never completed: sbx status
// shows it as incomplete, and sbx gc removes it at once (its launcher is
// gone), while a session whose launch completed stays.
func TestKilledUpIsIncompleteAndReaped(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	stamp := time.Now().UnixNano() & 0xfffffffffff
	cut, done := fmt.Sprintf("k%011x", stamp), fmt.Sprintf("d%011x", stamp)
	for _, id := range []string{cut, done} {
		dockertest.AssertNoLeftovers(t, cli, backend.LabelSession, id)
	}
	// The neo4j initializer waits for Bolt on 7687, which busybox never
	// serves: the launch is still running when sbx up is killed.
	hanging := writeConfig(t, `
[sandbox]
backend = "native"
[sandbox.sandboxes.neo4j]
image = "`+dockertest.BusyboxImage+`"
command = "sleep 600"
[sandbox.sandboxes.neo4j.extra]
initializer_timeout_sec = 300
`)
	quick := writeConfig(t, `
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
`)
	must(t, "--config", quick, "up", "--id", done)
	t.Cleanup(func() { sbx(t, "--config", quick, "down", done) })

	up := exec.Command(bin, "--config", hanging, "--progress", "plain", "up", "--id", cut)
	var stderr syncbuf.Buffer
	up.Stderr = &stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbx(t, "--config", hanging, "down", cut) })
	// Wait until the sandbox exists and the launch is waiting for it.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "[neo4j] started") {
		if time.Now().After(deadline) {
			up.Process.Kill()
			t.Fatalf("sbx up did not start the sandbox:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	state := func(id string) session.LaunchState {
		t.Helper()
		var rows []sessionRow
		if err := json.Unmarshal([]byte(must(t, "--config", quick, "--json", "status")), &rows); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Session == id {
				return r.Launch
			}
		}
		return "gone"
	}
	if got := state(cut); got != session.Launching {
		t.Errorf("while sbx up runs: %s, want launching", got)
	}
	up.Process.Kill()
	up.Wait()

	if got := state(cut); got != session.Abandoned {
		t.Errorf("after sbx up was killed: %s, want abandoned", got)
	}
	if got := state(done); got != session.Launched {
		t.Errorf("the completed session: %s, want launched", got)
	}
	if out := must(t, "--config", quick, "status"); !strings.Contains(out, "incomplete") {
		t.Errorf("status does not say the session is incomplete:\n%s", out)
	}
	out := must(t, "--config", quick, "gc")
	if !strings.Contains(out, "the launch of session "+cut+" was cut short") {
		t.Errorf("gc printed %q", out)
	}
	if got := state(cut); got != "gone" {
		t.Errorf("after gc the cut session is %s, want gone", got)
	}
	if got := state(done); got != session.Launched {
		t.Errorf("gc touched the completed session: %s", got)
	}
}
