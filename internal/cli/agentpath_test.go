package cli

import (
	"strings"
	"testing"
)

// sbx run and sbx exec reach the agent the sandbox's init serves (lite,
// native) instead of the backend's exec: the command's parent is then the
// sandbox's first process, where a runtime or engine exec would give it
// another (or none in the sandbox). sbx run on lite needs no agent at all:
// its command is the sandbox's first process (backend.OneShotRunner).
// Nothing is left afterwards.
func TestRunAndExecGoThroughTheSandboxAgent(t *testing.T) {
	for _, target := range []struct {
		name string
		make func(t *testing.T) chaosTarget
	}{
		{"lite", requireLite(chaosLite)},
		{"native", chaosNative},
	} {
		t.Run(target.name, func(t *testing.T) {
			ct := target.make(t)
			t.Setenv("SBX_CONFIG", ct.config)
			before := ct.inventory(t)

			r := sbx(t, "run", "--", "sh", "-c", "echo $$ $PPID")
			r.expect(t, 0)
			switch {
			case target.name == "lite" && r.stdout != "1 0\n":
				t.Errorf("sbx run: the command's PID and parent are %q, want 1 0 (the sandbox's first process)", r.stdout)
			case target.name == "native" && !strings.HasSuffix(r.stdout, " 1\n"):
				t.Errorf("sbx run: the command's PID and parent are %q, want parent 1 (the agent sbxd init serves)", r.stdout)
			}
			kept := sbx(t, "run", "--keep", "--", "true")
			kept.expect(t, 0)
			lines := strings.Split(strings.TrimSpace(kept.stderr), "\n")
			id := lines[len(lines)-1]
			r = sbx(t, "exec", id, "--", "sh", "-c", "echo $PPID; exit 3")
			r.expect(t, 3)
			if r.stdout != "1\n" {
				t.Errorf("sbx exec: the command's parent is %q, want 1 (the agent sbxd init serves)", r.stdout)
			}
			sbx(t, "rm", id).expect(t, 0)
			if left := leftBehind(t, before, ct.inventory); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
