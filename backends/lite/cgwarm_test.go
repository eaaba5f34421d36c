package lite

import (
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/cgwarm"
)

// TestRuntimeStartsWarmTheCgroupLock: each way lite has the runtime move a
// process into a container's cgroup (a one-shot run, a create, an exec
// through the runtime) warms the kernel's cgroup lock beside it (package
// cgwarm), and the warming has ended when the call returns (a create's and
// a run's; an exec's by its own deadline at the latest). Under gVisor an
// exec moves nothing and warms nothing.
func TestRuntimeStartsWarmTheCgroupLock(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	warmed := func(t *testing.T, what string, want bool, f func()) {
		t.Helper()
		// A terminal or attach of an earlier test may still be warming
		// (for at most execWarm): not this call's.
		for deadline := time.Now().Add(2 * execWarm); cgwarm.Running() != 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		before := cgwarm.Started()
		f()
		switch n := cgwarm.Started() - before; {
		case want && n < 1:
			t.Errorf("%s: no warming began", what)
		case !want && n != 0:
			t.Errorf("%s: %d warmings began, want none", what, n)
		}
		if n := cgwarm.Running(); n != 0 {
			t.Errorf("%s: %d warmings still running after it returned", what, n)
		}
	}
	warmed(t, "RunOnce", true, func() {
		res, err := b.RunOnce(t.Context(), e.spec("once"), backend.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("RunOnce: exit %d, %v", res.ExitCode, err)
		}
	})
	var sb backend.Sandbox
	warmed(t, "Create", true, func() {
		var err error
		if sb, err = b.Create(t.Context(), e.spec("made")); err != nil {
			t.Fatalf("Create: %v", err)
		}
	})
	t.Cleanup(func() { sb.Destroy(t.Context()) })
	m, err := sb.(*Sandbox).meta()
	if err != nil {
		t.Fatal(err)
	}
	// runsc starts an exec's process in its sentry: nothing moves.
	warmed(t, "Exec through the runtime", !m.runtime().gvisor(), func() {
		res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec: exit %d, %v", res.ExitCode, err)
		}
	})
}
