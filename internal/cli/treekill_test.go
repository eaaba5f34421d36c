package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// A timeout kills the command's whole tree, also a child that left the
// session (setsid) and dropped the environment marker (env -i), on local
// (host processes) and native (inside the container).
func TestTimeoutKillsEscapedChildren(t *testing.T) {
	for _, native := range []bool{false, true} {
		t.Run(map[bool]string{false: "local", true: "native"}[native], func(t *testing.T) {
			setup(t)
			if native {
				cli := dockertest.Client(t)
				dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
				t.Setenv("SBX_CONFIG", writeConfig(t, fmt.Sprintf("[sandbox]\nbackend = \"native\"\n[sandbox.sandboxes.main]\nimage = %q\n", dockertest.BusyboxImage)))
			}
			r := sbx(t, "run", "--keep", "--", "true")
			r.expect(t, 0)
			id := strings.TrimSpace(r.stderr)
			defer sbx(t, "rm", id)
			sleep := fmt.Sprintf("sleep %d", 200+time.Now().Nanosecond()%700)
			r = sbx(t, "exec", "--timeout", "1s", id, "--", "sh", "-c", "setsid env -i "+sleep+" & sleep 100")
			r.expect(t, 124)
			// What runs where the sandbox's commands run.
			ps := `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done`
			deadline := time.Now().Add(5 * time.Second)
			for {
				out := must(t, "exec", id, "--", "sh", "-c", ps)
				if !strings.Contains(out, sleep) {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("%q outlived the timeout", sleep)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
