package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// benchCLIRun runs the built sbx binary's bench cli --n 2 --json with the
// environment's config and returns its report, checked for what every
// backend reports: both commands, each with 2 samples of sbx, positive.
func benchCLIRun(t *testing.T, bin string, args ...string) benchCLIReport {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, append(args, "bench", "cli", "--n", "2", "--json")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("sbx bench cli: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var rep benchCLIReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout.String())
	}
	if rep.N != 2 || rep.Session == "" {
		t.Errorf("report %+v", rep)
	}
	var names []string
	for _, c := range rep.Commands {
		names = append(names, c.Name)
		if p := c.SbxMs; p.N != 2 || p.Min <= 0 || p.P50 < p.Min || p.Max < p.P50 {
			t.Errorf("%s: sbx %+v, want 2 positive samples", c.Name, p)
		}
		if len(c.SbxArgv) == 0 || c.SbxArgv[0] != bin {
			t.Errorf("%s: sbx argv %q does not run %s", c.Name, c.SbxArgv, bin)
		}
	}
	if !slices.Equal(names, []string{"run", "exec"}) {
		t.Errorf("commands %v, want run and exec", names)
	}
	return rep
}

// On the local backend both commands are timed as whole sbx processes,
// with no docker baseline (and a note saying why), and nothing is left. No
// timing is asserted.
func TestBenchCLILocal(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	t.Setenv("SBX_CONFIG", writeConfig(t, fmt.Sprintf("[sandbox]\nbackend = \"local\"\n[sandbox.local]\nstate_dir = %q\n[sandbox.sandboxes.main]\n", t.TempDir())))
	rep := benchCLIRun(t, bin)
	if rep.Backend != "local" || rep.BaselineNote == "" {
		t.Errorf("report %+v, want local with a baseline note", rep)
	}
	for _, c := range rep.Commands {
		if c.BaselineArgv != nil || c.BaselineMs.N != 0 || c.Ratio != 0 {
			t.Errorf("%s: a baseline on local: %+v", c.Name, c)
		}
	}
	left, err := openBackend(t).List(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range left {
		t.Errorf("left behind: %s (%v)", info.ID, info.Labels)
	}
}

// On native both commands have a docker baseline against the same engine
// and a ratio, and neither the kept sandbox (the bench's session) nor any
// sbx run's (the entry's label) is left.
func TestBenchCLINative(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	bin := sbxBin(t)
	setup(t)
	const label = "sbx-bench-cli-test"
	run := benchSession()
	t.Setenv("SBX_CONFIG", writeConfig(t, fmt.Sprintf("[sandbox]\nbackend = \"native\"\n[sandbox.sandboxes.main]\nimage = %q\nlabels = { %s = %q }\n",
		dockertest.BusyboxImage, label, run)))
	rep := benchCLIRun(t, bin, "--backend", "native")
	if rep.Backend != "native" || rep.Image != dockertest.BusyboxImage || rep.BaselineNote != "" {
		t.Errorf("report %+v", rep)
	}
	for _, c := range rep.Commands {
		if len(c.BaselineArgv) < 2 || c.BaselineMs.N != 2 || c.BaselineMs.Min <= 0 || c.Ratio <= 0 {
			t.Errorf("%s: baseline %q %+v, ratio %v", c.Name, c.BaselineArgv, c.BaselineMs, c.Ratio)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for key, value := range map[string]string{label: run, backend.LabelSession: rep.Session} {
		left, err := dockertest.Leftovers(ctx, cli, key, value)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range left {
			t.Errorf("left behind: %s (label %s=%s)", l, key, value)
		}
	}
}
