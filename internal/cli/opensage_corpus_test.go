package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/modelcontextprotocol/go-sdk/mcp"

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
// has it imported. Each run sees the entry's keys take effect and the
// OpenSage checkout's scripts and tools in /sandbox_scripts and
// /bash_tools, and is warned, by name, about the extras only other
// backends read.
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
			// The pod that fills a volume from the checkout's folders
			// runs an image the node has (OpenSage's variable).
			t.Setenv("OPENSAGE_K8S_INIT_IMAGE", k8stest.BusyboxImage)
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
				{ cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; } | cut -d' ' -f1
				ls /sandbox_scripts/ossfuzz /bash_tools/debugging`)
			want := "same-file\n/work\n67108864\n100000\n/bash_tools/debugging:\nSKILL.md\n\n/sandbox_scripts/ossfuzz:\ncompile_debug.sh\n"
			if out != want {
				t.Errorf("in the sandbox: %q, want %q (environment, working_dir, mem_limit, a quota of cpus' one CPU, the checkout's scripts and tools)", out, want)
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

// freePort returns a TCP port free on 127.0.0.1 now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestOpenSageCorpusGDBDebug launches the corpus's debugging agent
// (examples/agents/gdb_debug/config.toml, unchanged but for the
// environment that picks its image names and ports) on native, from the
// project root of an OpenSage-shaped checkout, with no registry: main's
// image is on hand, so its Dockerfile (which needs the network) is not
// built; gdb_mcp's image is missing, its pull fails, so its Dockerfile
// builds the stand-in of OpenSage's image, whose own command serves MCP
// over SSE on 1111. Inside: /shared holds the shared data named by a
// relative absolute_shared_data_path (the working directory's) and is
// mode 0777; /sandbox_scripts and /bash_tools hold the checkout's
// src/opensage folders; the missing mount_host_paths folder was made;
// cpus = "0" pinned CPU 0; gdb_mcp's debug build ran; its SSE endpoint,
// printed by up, serves the image's tools.
func TestOpenSageCorpusGDBDebug(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	const rel = "examples/agents/gdb_debug/config.toml"
	cfg := corpusConfig(t, rel, nil)
	root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(cfg))))
	// The stand-in server, built into the gdb_mcp Dockerfile's folder.
	build := exec.Command("go", "build", "-o", filepath.Join(root, "templates", "dockerfiles", "gdb_mcp", "fakeservice"), "../../initializers/internal/fakeservice")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in MCP server: %v\n%s", err, out)
	}
	t.Chdir(root) // the working directory: OpenSage's relative absolute_shared_data_path
	run := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffffff)
	mainImage, gdbImage := "opensage-corpus-main:"+run, "opensage-corpus-gdb-mcp:"+run
	if err := cli.ImageTag(t.Context(), dockertest.BusyboxImage, mainImage); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ref := range []string{mainImage, gdbImage} {
			cli.ImageRemove(context.Background(), ref, image.RemoveOptions{PruneChildren: true})
		}
	})
	cacheDir := filepath.Join(t.TempDir(), "cache", "made-by-launch")
	gdbPort := freePort(t)
	t.Setenv("MAIN_IMAGE", mainImage)
	t.Setenv("GDB_IMAGE", gdbImage)
	t.Setenv("GDB_PORT", strconv.Itoa(gdbPort))
	t.Setenv("CACHE_DIR", cacheDir)
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:9") // no registry, fast
	t.Setenv("SBX_PROJECT_ROOT", "")

	check := sbx(t, "config", "check", cfg)
	check.expect(t, 0)
	if want := "sandbox scripts: " + filepath.Join(root, "src/opensage/sandbox_scripts") + " (from the OpenSage checkout at the project root " + root + ")\n"; !strings.Contains(check.stdout, want) {
		t.Errorf("config check: stdout %q, want %q", check.stdout, want)
	}
	for _, want := range []string{
		"sandbox.sandboxes.gdb_mcp.timeout, sandbox.sandboxes.main.timeout: OpenSage's Docker client timeout",
		"sandbox.sandboxes.main.extra.cached_base_image: read by OpenSage's cache loader",
		"sandbox.sandboxes.gdb_mcp.extra.pids_max: read by the lite backend, not by the native backend",
		`sandbox.mount_host_paths: volume "` + cacheDir + `:/mnt/cache": host path does not exist: made (0755) when a sandbox is made`,
	} {
		if !strings.Contains(check.stderr, want) {
			t.Errorf("config check: stderr %q, want %q", check.stderr, want)
		}
	}

	start := time.Now()
	var res upResult
	if err := json.Unmarshal([]byte(must(t, "--config", cfg, "--json", "--progress", "none", "up")), &res); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbx(t, "--config", cfg, "down", res.Session) })
	t.Logf("launched in %s (gdb_mcp's image built)", time.Since(start))
	ids := map[string]string{}
	urls := map[string][]string{}
	for _, m := range res.Sandboxes {
		ids[m.Name], urls[m.Name] = m.ID, m.URLs
	}
	in := func(name, script string) string {
		t.Helper()
		return must(t, "--config", cfg, "exec", ids[name], "--", "sh", "-c", script)
	}
	for _, c := range []struct{ name, script, want string }{
		{"main", "cat /shared/README.txt", "Shared data of the corpus: copied into /shared.\n"},
		{"main", "stat -c %a /shared /bash_tools", "777\n777\n"},
		{"main", "test -e /built-by-dockerfile && echo built || echo on-hand", "on-hand\n"},
		{"main", "ls /sandbox_scripts/ossfuzz /bash_tools/debugging", "/bash_tools/debugging:\nSKILL.md\n\n/sandbox_scripts/ossfuzz:\ncompile_debug.sh\n"},
		{"main", "test -d /mnt/cache && echo mounted", "mounted\n"},
		{"main", "grep Cpus_allowed_list /proc/self/status | cut -f2", "0\n"},
		{"gdb_mcp", "cat /out/debug-build; test -e /opt/sandboxkit/gdbmcp || echo not-injected", "-g3 -O0\nnot-injected\n"},
	} {
		if got := in(c.name, c.script); got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.name, c.script, got, c.want)
		}
	}
	if fi, err := os.Stat(cacheDir); err != nil || !fi.IsDir() {
		t.Errorf("mount_host_paths' missing folder was not made: %v", err)
	}
	sse := fmt.Sprintf("http://127.0.0.1:%d/sse", gdbPort)
	if !slices.Contains(urls["gdb_mcp"], sse) {
		t.Errorf("up's URLs of gdb_mcp %q, want %s", urls["gdb_mcp"], sse)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "opensage-like", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.SSEClientTransport{Endpoint: sse}, nil)
	if err != nil {
		t.Fatalf("MCP over SSE at %s: %v", sse, err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "gdb_command" {
		t.Errorf("the image's tools: %+v, %v", tools, err)
	}
}

// Every config of the corpus passes sbx config check unchanged (keys of
// other backends and of OpenSage's own tools are warnings, not errors),
// and the default config's warnings and notes name what sandboxkit leaves
// to others.
func TestOpenSageCorpusConfigCheck(t *testing.T) {
	setup(t)
	t.Setenv("SBX_PROJECT_ROOT", "")
	var files []string
	err := filepath.WalkDir(opensageProject, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".toml") && d.Name() != "pyproject.toml" {
			files = append(files, p)
		}
		return err
	})
	if err != nil || len(files) < 3 {
		t.Fatalf("corpus files %v: %v", files, err)
	}
	for _, f := range files {
		r := sbx(t, "config", "check", f)
		r.expect(t, 0)
		if !strings.HasPrefix(r.stdout, "ok: "+f+" (backend native, ") {
			t.Errorf("%s: stdout %q", f, r.stdout)
		}
		if !strings.HasSuffix(f, "default_config.toml") {
			continue
		}
		for _, want := range []string{
			"warning: sandbox.sandboxes.neo4j.extra.NEO4J_dbms_mode: read by nothing in sandboxkit (ignored)\n",
			`warning: sandbox "codeql" (type codeql) runs callgraph/run_codeql.sh from sandbox_scripts, which `,
		} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("%s: stderr %q, want %q", f, r.stderr, want)
			}
		}
		if want := "sandbox pdb_mcp: type pdb_mcp has no initializer; it runs as a plain sandbox from its keys\n"; !strings.Contains(r.stdout, want) {
			t.Errorf("%s: stdout %q, want %q", f, r.stdout, want)
		}
	}
}
