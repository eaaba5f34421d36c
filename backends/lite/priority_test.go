package lite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// cpuWeight returns cgroup's CPU weight as cgroup v1's cpu.shares says it
// (v2's cpu.weight turned back: 1 is the least, 100 the default), or ""
// while the cgroup has no such file.
func cpuWeight(cgroup string) string {
	for _, d := range cgroupDirs(cgroup) {
		if data, err := os.ReadFile(filepath.Join(d, "cpu.shares")); err == nil {
			return strings.TrimSpace(string(data))
		}
		if data, err := os.ReadFile(filepath.Join(d, "cpu.weight")); err == nil {
			switch w := strings.TrimSpace(string(data)); w {
			case "1":
				return "2"
			case normalWeight:
				return normalShares
			default:
				return "weight " + w
			}
		}
	}
	return ""
}

// waitWeight waits up to 10 s until cgroup has CPU weight want (a new
// cgroup has the default until the runtime writes the config's), and
// returns the weight it has.
func waitWeight(cgroup, want string) string {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // polls a condition
		if w := cpuWeight(cgroup); w == want || time.Now().After(deadline) {
			return w
		}
	}
}

// configShares returns the cpu shares the OCI config of bundle sets (0:
// none).
func configShares(t *testing.T, bundle string) uint64 {
	t.Helper()
	cfg, err := readConfig(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Linux.Resources; r != nil && r.CPU != nil && r.CPU.Shares != nil {
		return *r.CPU.Shares
	}
	return 0
}

// The standby a Reset leaves is made at the lowest CPU weight, gets the
// normal one when something waits for it, and its cgroup and config have
// the normal weight once the next Reset starts it.
func TestStandbyMadeAtLowPriority(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("low-standby"))
	ctx := t.Context()
	low, normal := "2", normalShares
	for round := 1; round <= 2; round++ {
		before, err := readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		m, err := readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		gen := m.Gen + 1 // the standby's, being made
		if w := cpuWeight(cgroupName(sb.id, m.Gen)); w != normal {
			t.Errorf("round %d: the running generation %d's CPU weight is %q, want %s", round, m.Gen, w, normal)
		}
		if s := configShares(t, bundleDir(sb.dir, m.Gen)); s != 0 {
			t.Errorf("round %d: the running generation's config sets cpu shares %d", round, s)
		}
		if round == 2 && m.Gen != before.Standby.Gen {
			t.Fatalf("round 2: Reset did not start the standby (generation %d, the standby's %d)", m.Gen, before.Standby.Gen)
		}
		if w := waitWeight(cgroupName(sb.id, gen), low); w != low {
			t.Errorf("round %d: the standby's CPU weight while it is made is %q, want %s", round, w, low)
		}
		b.waitBackground() // hurries it
		m, err = readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Standby.ready() || m.Standby.Gen != gen {
			t.Fatalf("round %d: no standby after the Reset: %+v", round, m.Standby)
		}
		if w := cpuWeight(cgroupName(sb.id, gen)); w != normal {
			t.Errorf("round %d: the standby's CPU weight once waited for is %q, want %s", round, w, normal)
		}
		// Where the cgroup carries the low weight, the config asks for none.
		want := lowShares
		if lowByCgroup(m.runtime()) {
			want = 0
		}
		if s := configShares(t, bundleDir(sb.dir, gen)); s != want {
			t.Errorf("round %d: the standby's config sets cpu shares %d, want %d", round, s, want)
		}
	}
	if res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("a command after the standby started: %v %+v", err, res)
	}
}

// A low weight create that someone waits for (a lock of its sandbox,
// waitBackground, which Close calls) gets the normal weight, and one that
// starts while the backend waits does at once.
func TestLowCreateHurried(t *testing.T) {
	requireHost(t)
	b := &Backend{}
	lowCgroup := func(name string) string {
		t.Helper()
		made := false
		for _, root := range cgroupRoots() {
			if _, err := os.Stat(filepath.Join(root, "cpu.shares")); err != nil {
				continue // not cgroup v1's cpu hierarchy
			}
			d := filepath.Join(root, cgroupParent, name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Rmdir(d) })
			writeExisting(filepath.Join(d, "cpu.shares"), "2")
			made = true
		}
		if !made {
			t.Skip("no cgroup v1 cpu hierarchy to make a test cgroup in (TestStandbyMadeAtLowPriority covers v2 through the runtime)")
		}
		if cpuWeight(name) != "2" {
			t.Fatalf("cannot make a cgroup with a low CPU weight (%q)", cpuWeight(name))
		}
		return name
	}
	waitNormal := func(what, cgroup string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); cpuWeight(cgroup) != normalShares; time.Sleep(time.Millisecond) { // polls a condition
			if time.Now().After(deadline) {
				t.Fatalf("%s: the CPU weight is still %q", what, cpuWeight(cgroup))
			}
		}
	}
	a, c := lowCgroup("hurry-test-a"), lowCgroup("hurry-test-c")
	doneA, doneC := b.startLow(&meta{ID: "a"}, a), b.startLow(&meta{ID: "c"}, c)
	b.hurry("a")
	waitNormal("a hurried create", a)
	if w := cpuWeight(c); w != "2" {
		t.Errorf("another sandbox's create was hurried too: weight %q", w)
	}
	doneA()
	b.waitBackground()
	waitNormal("a create waitBackground found", c)
	doneC()

	late := lowCgroup("hurry-test-late")
	b.urgent.Add(1) // as while waitBackground waits
	doneLate := b.startLow(&meta{ID: "late"}, late)
	waitNormal("a create started while the backend waits for its background work", late)
	doneLate()
	b.urgent.Add(-1)

	forgotten := lowCgroup("hurry-test-done")
	b.startLow(&meta{ID: "done"}, forgotten)()
	b.hurry("done")
	if w := cpuWeight(forgotten); w != "2" {
		t.Errorf("a create that had returned was hurried: weight %q", w)
	}
}

// A pool's new member (Spec.Ahead) is started at the lowest CPU weight,
// as a standby is made, and runs at the normal weight once Create has
// returned, its config no longer asking for less; a sandbox a task waits
// for (no Ahead) is made at the normal weight throughout.
func TestAheadMadeAtLowPriority(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	for _, ahead := range []bool{true, false} {
		spec := e.spec(fmt.Sprintf("ahead-%v", ahead))
		spec.Ahead = ahead
		before, err := statedir.IDs(b.dir)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		type made struct {
			sb  backend.Sandbox
			err error
		}
		done := make(chan made, 1)
		go func() {
			sb, err := b.Create(t.Context(), spec)
			done <- made{sb, err}
		}()
		// The weights the new sandbox's cgroup had while Create ran.
		seen := map[string]bool{}
		var id string
		var res made
	poll:
		for ; ; time.Sleep(time.Millisecond) { // polls a condition
			select {
			case res = <-done:
				break poll
			default:
			}
			if id == "" {
				ids, _ := statedir.IDs(b.dir)
				for _, x := range ids {
					if !slices.Contains(before, x) {
						id = x
					}
				}
				continue
			}
			if w := cpuWeight(cgroupName(id, 0)); w != "" {
				seen[w] = true
			}
		}
		if res.err != nil {
			t.Fatalf("Create (ahead %v): %v", ahead, res.err)
		}
		sb := res.sb.(*Sandbox)
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		if id != sb.id {
			t.Fatalf("ahead %v: the sandbox polled, %q, is not the one made, %s", ahead, id, sb.id)
		}
		if seen["2"] != ahead {
			t.Errorf("ahead %v: CPU weights while it was made: %v", ahead, seen)
		}
		if w := cpuWeight(cgroupName(sb.id, 0)); w != normalShares {
			t.Errorf("ahead %v: CPU weight once made %q, want %s", ahead, w, normalShares)
		}
		if s := configShares(t, bundleDir(sb.dir, 0)); s != 0 {
			t.Errorf("ahead %v: the config sets cpu shares %d once made (a Reset in place and the standbys start from it)", ahead, s)
		}
		if res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("ahead %v: a command: %v %+v", ahead, err, res)
		}
	}
}

// A standby made at low weight while its cgroup gets the normal weight
// written into it all the time (hurry writes it every 5 ms while a Reset,
// Destroy or Close waits for the standby) is made all the same. On cgroup
// v1, runc reads back the cpu shares a config asks for and failed the
// create ("the minimum allowed cpu-shares is 1024") when the normal weight
// came in between its write and its read.
func TestStandbyMadeWhileHurried(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("hurried-standby"))
	ctx := t.Context()
	writes := 0 // of the normal weight into a standby's cgroup
	for round := 1; round <= 20; round++ {
		before, err := readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(sb.dir, "main.log")
		var logSize int64 // the runtime's messages of this round come after it
		if fi, err := os.Stat(logPath); err == nil {
			logSize = fi.Size()
		}
		stop := make(chan struct{})
		hammered := make(chan struct{})
		go func() {
			defer close(hammered)
			for {
				select {
				case <-stop:
					return
				default:
				}
				for g := before.Gen + 1; g <= before.Gen+3; g++ {
					for _, d := range cgroupDirs(cgroupName(sb.id, g)) { // as setNormalWeight
						for file, w := range map[string]string{"cpu.shares": normalShares, "cpu.weight": normalWeight} {
							if ok, _ := writeExisting(filepath.Join(d, file), w); ok {
								writes++
							}
						}
					}
				}
			}
		}()
		err = sb.Reset(ctx)
		if err == nil {
			b.waitBackground()
		}
		close(stop)
		<-hammered
		if err != nil {
			t.Fatalf("round %d: Reset: %v", round, err)
		}
		m, err := readMeta(sb.dir)
		if err != nil {
			t.Fatal(err)
		}
		if !m.Standby.ready() || m.Standby.Gen != m.Gen+1 {
			t.Fatalf("round %d: no standby after a Reset whose standby was hurried while made (generation %d): %+v (main.log: %s)", round, m.Gen, m.Standby, tail(logPath, logSize))
		}
	}
	if writes == 0 {
		t.Fatal("the normal weight was never written into a standby's cgroup while it was made: the test hurried nothing")
	}
}
