package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// TestLaunchOpenSageShapedNative launches config/testdata/opensage_native.toml
// (every entry key OpenSage parses: platform, container_name, mounts, a
// command with shell syntax, docker_args) on the engine with the test's
// busybox image, and checks inside the sandboxes that each key took effect.
func TestLaunchOpenSageShapedNative(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	id := fmt.Sprintf("o%011x", time.Now().UnixNano()&0xfffffffffff)
	dockertest.AssertNoLeftovers(t, cli, backend.LabelSession, id)
	t.Setenv("SBX_PROJECT_ROOT", "")
	t.Setenv("DEFAULT_IMAGE", dockertest.BusyboxImage) // the environment wins over the file's template variable
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "testdata", "opensage_native.toml"))
	if err != nil {
		t.Fatal(err)
	}
	// One container name per run: a left-over container of another run
	// must not clash.
	text := strings.Replace(string(data), `container_name = "opensage_main_keys"`, `container_name = "opensage_main_`+id+`"`, 1)
	text = strings.Replace(text, "source=keys_cache", "source=keys_cache_"+id, 1)
	cfg := writeConfig(t, text)
	ids := up(t, "--config", cfg, "--progress", "none", "--id", id)
	t.Cleanup(func() {
		sbx(t, "--config", cfg, "down", id)
		cli.VolumeRemove(context.Background(), "keys_cache_"+id, true)
	})
	if ids["main"] == "" || ids["worker"] == "" {
		t.Fatalf("up made %v, want main and worker", ids)
	}
	in := func(name, script string) string {
		t.Helper()
		return strings.TrimSpace(must(t, "--config", cfg, "exec", ids[name], "--", "sh", "-c", script))
	}
	checks := []struct{ name, script, want string }{
		{"main", "hostname", "sage"},                                  // --hostname
		{"main", "grep -c 'db.local' /etc/hosts", "1"},                // --add-host
		{"main", `echo "$OPENSAGE"`, "1"},                             // -e
		{"main", "df -k /dev/shm | awk 'NR==2 {print $2}'", "262144"}, // --shm-size=256m
		{"main", "test -d /cache && touch /cache/x && echo ok", "ok"}, // mounts, writable
		{"main", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max", "512"},
		{"worker", "ls /sys/class/net | grep -v '^lo$' | wc -l", "0"}, // --network none
	}
	for _, c := range checks {
		if got := in(c.name, c.script); got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.name, c.script, got, c.want)
		}
	}
	// container_name: the engine knows the container by that name.
	inspect, err := cli.ContainerInspect(t.Context(), "opensage_main_"+id)
	if err != nil {
		t.Fatalf("container_name: %v", err)
	}
	hc := inspect.HostConfig
	if hc.Memory != 1<<30 || hc.NanoCPUs != 1_500_000_000 || !slices.Contains(hc.CapAdd, "CAP_SYS_PTRACE") && !slices.Contains(hc.CapAdd, "SYS_PTRACE") || !slices.Contains(hc.SecurityOpt, "seccomp=unconfined") {
		t.Errorf("host config: memory %d, nano cpus %d, cap_add %v, security_opt %v", hc.Memory, hc.NanoCPUs, hc.CapAdd, hc.SecurityOpt)
	}
}
