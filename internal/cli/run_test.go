package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestRunLiteOneShot: sbx run on lite runs its command as the sandbox's
// first process, with no agent (backend.OneShotRunner),
// with the exit code, stdin and timeout sbx run promises, and leaves no
// sandbox; with --keep the sandbox is an ordinary one, with its agent.
func TestRunLiteOneShot(t *testing.T) {
	cfg := liteConfig(t, "", "")
	r := sbx(t, "--config", cfg, "run", "--", "sh", "-c", `tr '\0' ' ' </proc/1/cmdline; echo; echo oops >&2; exit 5`)
	r.expect(t, 5)
	if !strings.HasPrefix(r.stdout, "sh -c ") {
		t.Errorf("PID 1 is %q: want the command, without the agent", r.stdout)
	}
	if r.stderr != "oops\n" {
		t.Errorf("stderr %q", r.stderr)
	}
	r = sbx(t, "--config", cfg, "run", "--", "nosuch")
	r.expect(t, 127)
	if !strings.Contains(r.stderr, `"nosuch": executable file not found`) {
		t.Errorf("stderr %q", r.stderr)
	}
	r = sbxIn(t, t.Context(), "from stdin\n", "--config", cfg, "run", "-i", "--", "cat")
	r.expect(t, 0)
	if r.stdout != "from stdin\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	r = sbx(t, "--config", cfg, "run", "--timeout", "500ms", "--", "sleep", "30")
	r.expect(t, 124)
	if !strings.Contains(r.stderr, "timed out") {
		t.Errorf("stderr %q", r.stderr)
	}
	var left []sandboxJSON
	if err := json.Unmarshal([]byte(must(t, "--config", cfg, "--json", "ls", "--all")), &left); err != nil || len(left) > 0 {
		t.Errorf("sandboxes left: %+v (%v)", left, err)
	}

	r = sbx(t, "--config", cfg, "run", "--keep", "--", "sh", "-c", `tr '\0' ' ' </proc/1/cmdline`)
	r.expect(t, 0)
	if !strings.Contains(r.stdout, "--agent") {
		t.Errorf("a kept sandbox's PID 1 is %q: want the agent", r.stdout)
	}
	must(t, "--config", cfg, "rm", strings.TrimSpace(r.stderr))
}
