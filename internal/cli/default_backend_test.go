package cli

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// On a machine with Docker, a config file without [sandbox] backend runs
// its sandbox in a container (OpenSage's default, native), with no notice
// about host processes; backend = "auto" chooses native too and says so.
func TestConfigWithoutBackendRunsInAContainer(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	b := make([]byte, 6)
	rand.Read(b)
	run := hex.EncodeToString(b)
	dockertest.AssertNoLeftovers(t, cli, "sbx-test-run", run)
	t.Setenv(config.EnvAutoRecord, filepath.Join(t.TempDir(), "auto.json"))

	for _, head := range []string{"", "[sandbox]\nbackend = \"auto\"\n"} {
		cfg := writeConfig(t, fmt.Sprintf("%s[sandbox.sandboxes.main]\nimage = %q\n[sandbox.sandboxes.main.labels]\nsbx-test-run = %q\n",
			head, dockertest.BusyboxImage, run))
		t.Setenv("SBX_CONFIG", cfg)
		// /.dockerenv exists only inside a Docker container; the
		// hostname is the container's, not this machine's.
		r := sbx(t, "run", "--", "sh", "-c", "test -e /.dockerenv && hostname")
		r.expect(t, 0)
		host, _ := os.Hostname()
		if got := strings.TrimSpace(r.stdout); got == "" || got == host {
			t.Errorf("%q: hostname %q inside, this machine's is %q: not a container", head, got, host)
		}
		if strings.Contains(r.stderr, "without isolation") {
			t.Errorf("%q: notice about host processes on stderr: %q", head, r.stderr)
		}
		if head != "" && !strings.Contains(r.stderr, "backend auto: using native") {
			t.Errorf("auto must name its choice: stderr %q", r.stderr)
		}
	}
}
