package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// opensageProject is the test corpus: a project tree shaped like an
// OpenSage checkout, with OpenSage-shaped configs written for these tests.
var opensageProject = filepath.Join("..", "..", "config", "testdata", "opensage-project")

// corpusConfig copies the corpus config at rel (under opensageProject) to
// the same place in a copy of the project tree with edit applied to its
// text, and returns the copy's path (the project root stays the copy's).
func corpusConfig(t *testing.T, rel string, edit func(string) string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "opensage")
	if err := os.CopyFS(root, os.DirFS(opensageProject)); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, rel)
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if edit != nil {
		text = edit(text)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOneKeySwitch launches the same OpenSage-shaped file (one small entry:
// a Docker image name, an environment variable, a working dir, mem_limit,
// cpus, and in [extra] the keys of agentdocker-lite, k8s, opensandbox and
// OpenSage's cache loader) with only [sandbox] backend changed, on native,
// agentdocker-lite (lite) and k8s, with no registry reachable: native uses
// the engine's image, lite exports it from the local engine, the k8s node
// has it imported. Each run sees the entry's keys take effect, and is
// warned, by name, about the extras only other backends read.
func TestOneKeySwitch(t *testing.T) {
	const rel = "examples/agents/one_key_switch/config.toml"
	for _, tt := range []struct {
		backend string
		prepare func(t *testing.T)
		// ignored are the extras warned about on this backend.
		ignored []string
	}{
		{"native", func(t *testing.T) {
			dockertest.RequireImage(t, dockertest.Client(t), dockertest.BusyboxImage)
		}, []string{"cached_rootfs_tar", "cpu_max", "fs_backend", "kubeconfig", "memory_max", "namespace", "opensandbox_timeout_sec", "pids_max"}},
		{"agentdocker-lite", func(t *testing.T) {
			if _, err := exec.LookPath("runc"); err != nil && os.Getenv("SBX_REQUIRE_LITE") != "1" {
				t.Skip("lite: no runc (scripts/lite-setup.sh)")
			}
			// The image is in Docker's store only: a fresh image cache,
			// which holds it by its image ID once the launch took it
			// from the engine.
			cli := dockertest.Client(t)
			dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
			inspect, err := cli.ImageInspect(t.Context(), dockertest.BusyboxImage)
			if err != nil {
				t.Fatal(err)
			}
			cache := t.TempDir()
			t.Setenv("XDG_CACHE_HOME", cache)
			t.Cleanup(func() {
				unpacked := filepath.Join(cache, "sandboxkit", "lite", "images", strings.ReplaceAll(inspect.ID, ":", "-"), "rootfs", "bin", "busybox")
				if _, err := os.Stat(unpacked); err != nil {
					t.Errorf("lite did not take the image from the engine's store: %v", err)
				}
			})
		}, []string{"cached_rootfs_tar", "kubeconfig", "namespace", "opensandbox_timeout_sec"}},
		{"k8s", func(t *testing.T) {
			c := k8stest.Get(t)
			t.Setenv("K8S_KUBECONFIG", c.Kubeconfig)
			t.Setenv("K8S_NAMESPACE", c.Namespace(t))
		}, []string{"cached_rootfs_tar", "cpu_max", "fs_backend", "memory_max", "opensandbox_timeout_sec", "pids_max"}},
	} {
		t.Run(tt.backend, func(t *testing.T) {
			setup(t)
			tt.prepare(t)
			// No registry is reachable: a pull through a proxy fails
			// at once rather than by a timeout.
			t.Setenv("HTTPS_PROXY", "http://127.0.0.1:9")
			t.Setenv("HTTP_PROXY", "http://127.0.0.1:9")
			cfg := corpusConfig(t, rel, func(s string) string {
				out := strings.Replace(s, "\nbackend = \"native\"\n", "\nbackend = \""+tt.backend+"\"\n", 1)
				if out == s && tt.backend != "native" {
					t.Fatal("the corpus file lost its backend line")
				}
				return out
			})
			var res upResult
			if err := json.Unmarshal([]byte(must(t, "--config", cfg, "--json", "--progress", "none", "up")), &res); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sbx(t, "--config", cfg, "down", res.Session) })
			if len(res.Sandboxes) != 1 {
				t.Fatalf("up made %+v, want main", res.Sandboxes)
			}
			id := res.Sandboxes[0].ID
			out := must(t, "--config", cfg, "exec", id, "--", "sh", "-c",
				`echo "$SWITCH_PROBE"; pwd; cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes
				{ cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; } | cut -d' ' -f1`)
			if want := "same-file\n/work\n67108864\n100000\n"; out != want {
				t.Errorf("in the sandbox: %q, want %q (environment, working_dir, mem_limit, a quota of cpus' one CPU)", out, want)
			}
			// cpus = "0" is a CPU set: pinned where the backend can.
			pinned := strings.TrimSpace(must(t, "--config", cfg, "exec", id, "--", "sh", "-c", `grep Cpus_allowed_list /proc/self/status | cut -f2`))
			if tt.backend != "k8s" && pinned != "0" {
				t.Errorf("cpus = \"0\": the sandbox runs on CPUs %q, want 0", pinned)
			}
			var ignored []string
			for _, w := range res.Warnings {
				if strings.Contains(w, "chmod") {
					t.Errorf("the session's volumes: %s", w) // /shared is 0777 on every backend
				}
				if k, ok := strings.CutPrefix(w, "sandbox.sandboxes.main.extra."); ok {
					k, _, _ = strings.Cut(k, ":")
					ignored = append(ignored, k)
				}
			}
			slices.Sort(ignored)
			if !slices.Equal(ignored, tt.ignored) {
				t.Errorf("extras warned about: %v, want %v (warnings %q)", ignored, tt.ignored, res.Warnings)
			}
		})
	}
}
