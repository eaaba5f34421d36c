package lite

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// A program using lite that is killed (SIGKILL) at any moment of making,
// using, resetting or destroying a sandbox leaves nothing that Destroy, as
// sbx gc calls it on what List shows, cannot remove: no container the
// runtime knows, no process of it (runsc's gofer and sandbox), mount,
// cgroup or folder (the test environment's leak check). Each round kills
// the helper a moment later into its loop; the moments are jittered, and
// the seed logged.
func TestKilledMidway(t *testing.T) {
	e := newTestEnv(t)
	cfg, err := json.Marshal(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	rt, err := lookRuntime(e.cfg.Runtime, e.cfg.RuntimeRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, after := range []time.Duration{150 * time.Millisecond, 450 * time.Millisecond, 800 * time.Millisecond, 1300 * time.Millisecond, 2100 * time.Millisecond} {
		after += time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
		cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidwayHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "SBX_LITE_KILLED_HELPER="+string(cfg), "SBX_LITE_KILLED_IMAGE="+e.image)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		// The runtime's commands the helper started finish on their own
		// (a kill of their caller does not reach them); gc comes later.
		waitRuntimeCommands(t, rt)
		b := e.open(t)
		infos, err := b.List(t.Context(), backend.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, info := range infos {
			sb, err := b.Get(t.Context(), info.ID)
			if err == nil {
				err = sb.Destroy(t.Context())
			}
			if err != nil {
				t.Errorf("killed after %v: Destroy(%s, %s): %v", after, info.ID, info.State, err)
			}
		}
		t.Logf("killed after %v: %d sandboxes left to destroy", after.Round(time.Millisecond), len(infos))
	}
}

// waitRuntimeCommands waits (at most 20 s) until no command of runtime rt
// runs on its state root: its container processes (runc's init, runsc's
// gofer and sandbox) are not commands.
func waitRuntimeCommands(t *testing.T, rt *ociRuntime) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var running []string
		files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			args := strings.Split(string(data), "\x00")
			if args[0] == rt.path && strings.Contains(string(data), rt.root) {
				running = append(running, strings.Join(args, " "))
			}
		}
		if len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("runtime commands still running after 20 s: %q", running)
			return
		}
	}
}

// TestKilledMidwayHelper is TestKilledMidway's program: it makes, uses,
// resets and destroys sandboxes until it is killed.
func TestKilledMidwayHelper(t *testing.T) {
	data := os.Getenv("SBX_LITE_KILLED_HELPER")
	if data == "" {
		t.Skip("run by TestKilledMidway")
	}
	var cfg Config
	if err := json.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for {
		// Owned by this process, so that sbx gc would reap it once killed.
		sb, err := b.Create(ctx, backend.Spec{Name: "killed", Image: os.Getenv("SBX_LITE_KILLED_IMAGE"), TTL: time.Hour, Owner: owner.Self()})
		if err != nil {
			t.Fatal(err)
		}
		sb.Exec(ctx, backend.ExecRequest{Shell: "echo x > /tmp/x; sleep 0.1"})
		sb.(*Sandbox).Reset(ctx)
		sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}})
		sb.Destroy(ctx)
	}
}
