package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// setup gives the test its own state dir and a config like the built-in
// default (one "main" sandbox on the local backend), but written as a file
// that asks for local, so sbx prints no notice about it.
func setup(t testing.TB) {
	t.Helper()
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	if err := os.WriteFile(path, []byte("[sandbox]\nbackend = \"local\"\n[sandbox.sandboxes.main]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SBX_CONFIG", path)
}

// The embedded default (no file anywhere) runs on the host, and says so on
// stderr once per command.
func TestEmbeddedDefaultSaysItRunsOnTheHost(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("SBX_CONFIG", "")
	t.Chdir(t.TempDir())
	r := sbx(t, "run", "--", "echo", "hi")
	r.expect(t, 0)
	if r.stdout != "hi\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	if n := strings.Count(r.stderr, "without isolation"); n != 1 {
		t.Errorf("the notice appears %d times in stderr %q, want once", n, r.stderr)
	}
	if !strings.Contains(r.stderr, `backend = "auto"`) {
		t.Errorf("the notice must say how to get isolation: %q", r.stderr)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// sbx runs the CLI in-process with empty stdin.
func sbx(t testing.TB, args ...string) result {
	t.Helper()
	return sbxIn(t, context.Background(), "", args...)
}

func sbxIn(t testing.TB, ctx context.Context, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// must runs sbx and fails the test unless it exits 0.
func must(t testing.TB, args ...string) string {
	t.Helper()
	r := sbx(t, args...)
	if r.code != 0 {
		t.Fatalf("sbx %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

func (r result) expect(t testing.TB, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

// listSandboxes returns sbx ls --json.
func listSandboxes(t *testing.T) []sandboxJSON {
	t.Helper()
	var out []sandboxJSON
	if err := json.Unmarshal([]byte(must(t, "ls", "--json")), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// openBackend opens the backend sbx uses, for making sandboxes sbx cannot.
func openBackend(t *testing.T) backend.Backend {
	t.Helper()
	cfg, err := sandboxkit.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sandboxkit.Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// readPIDs waits for file to hold a line of PIDs and returns them.
func readPIDs(t *testing.T, file string) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(file)
		if err == nil && strings.HasSuffix(string(data), "\n") {
			var pids []int
			for f := range strings.FieldsSeq(string(data)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s: %q", file, data)
				}
				pids = append(pids, pid)
			}
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no PIDs written", file)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expectGone fails unless every process is gone (zombies count as gone)
// within a short grace period.
func expectGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for procfs.Alive(pid, 0) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d is still running", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestRunEcho(t *testing.T) {
	setup(t)
	r := sbx(t, "run", "--", "echo", "hello")
	r.expect(t, 0)
	if r.stdout != "hello\n" {
		t.Errorf("stdout %q, want %q", r.stdout, "hello\n")
	}
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after run: %+v", got)
	}
}

func TestRunWithoutDash(t *testing.T) {
	setup(t)
	// Flags after the command belong to it.
	r := sbx(t, "run", "echo", "-n", "hi")
	r.expect(t, 0)
	if r.stdout != "hi" {
		t.Errorf("stdout %q, want %q", r.stdout, "hi")
	}
}

func TestRunExitCodeAndStderr(t *testing.T) {
	setup(t)
	r := sbx(t, "run", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	r.expect(t, 3)
	if r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after run: %+v", got)
	}
}

func TestRunTimeout(t *testing.T) {
	setup(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	start := time.Now()
	r := sbx(t, "run", "--timeout", "1s", "--", "sh", "-c",
		`sleep 30 & echo $! $$ > "$1"; exec sleep 30`, "sh", pidFile)
	elapsed := time.Since(start)
	r.expect(t, 124)
	if elapsed > 3*time.Second {
		t.Errorf("took %v, want < 3s", elapsed)
	}
	if !strings.Contains(r.stderr, "timed out after 1s") {
		t.Errorf("stderr %q does not say it timed out", r.stderr)
	}
	expectGone(t, readPIDs(t, pidFile))
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after run: %+v", got)
	}
}

func TestRunInterrupt(t *testing.T) {
	setup(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- sbxIn(t, ctx, "", "run", "--", "sh", "-c", `sleep 30 & echo $! $$ > "$1"; exec sleep 30`, "sh", pidFile)
	}()
	pids := readPIDs(t, pidFile)

	// While it runs, the sandbox is owned by this process.
	list := listSandboxes(t)
	if len(list) != 1 || list[0].Owner == "" {
		t.Fatalf("sandboxes while running: %+v", list)
	}
	if alive, known := owner.Alive(list[0].Owner); !alive || !known {
		t.Errorf("owner %q: alive %v known %v", list[0].Owner, alive, known)
	}

	cancel()
	select {
	case r := <-done:
		r.expect(t, exitInterrupted)
	case <-time.After(10 * time.Second):
		t.Fatal("sbx run did not return after cancel")
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after interrupt: %+v", got)
	}
}

func TestRunKeep(t *testing.T) {
	setup(t)
	r := sbx(t, "run", "--keep", "--", "sh", "-c", "echo data > f")
	r.expect(t, 0)
	id := strings.TrimSpace(r.stderr)
	list := listSandboxes(t)
	if len(list) != 1 || list[0].ID != id || list[0].Name != "main" {
		t.Fatalf("stderr %q; sandboxes %+v", r.stderr, list)
	}
	if list[0].Owner != "" {
		t.Errorf("kept sandbox has owner %q: sbx gc would remove it", list[0].Owner)
	}
	if out := must(t, "exec", id, "--", "cat", "f"); out != "data\n" {
		t.Errorf("file in kept sandbox: %q", out)
	}
	if out := must(t, "rm", id); out != id+"\n" {
		t.Errorf("rm printed %q", out)
	}
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after rm: %+v", got)
	}
}

func TestRunStdin(t *testing.T) {
	setup(t)
	r := sbxIn(t, context.Background(), "piped\n", "run", "-i", "--", "cat")
	r.expect(t, 0)
	if r.stdout != "piped\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	// Without -i the command gets no stdin.
	r = sbxIn(t, context.Background(), "piped\n", "run", "--", "cat")
	r.expect(t, 0)
	if r.stdout != "" {
		t.Errorf("stdout without -i: %q", r.stdout)
	}
}

func TestRunSandboxFlag(t *testing.T) {
	setup(t)
	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.worker]
[sandbox.sandboxes.other]
environment = { WHO = "other" }
`)
	// No "main" and two entries: sbx run must be told which.
	r := sbx(t, "--config", cfg, "run", "--", "true")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, "--sandbox") || !strings.Contains(r.stderr, "other, worker") {
		t.Errorf("stderr %q", r.stderr)
	}
	r = sbx(t, "--config", cfg, "run", "--sandbox", "other", "--", "sh", "-c", "echo $WHO")
	r.expect(t, 0)
	if r.stdout != "other\n" {
		t.Errorf("stdout %q", r.stdout)
	}
}

func writeConfig(t testing.TB, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandbox.toml")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMisspeltKey(t *testing.T) {
	setup(t)
	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
workng_dir = "x"
`)
	for _, args := range [][]string{
		{"--config", cfg, "run", "--", "true"},
		{"config", "check", cfg},
	} {
		r := sbx(t, args...)
		r.expect(t, 1)
		if !strings.Contains(r.stderr, "workng_dir") || !strings.HasPrefix(r.stderr, "sbx: ") ||
			strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("sbx %v: stderr %q, want one line naming workng_dir", args, r.stderr)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	setup(t)
	t.Setenv("SBX_CONFIG", "")
	t.Setenv("SBX_PROJECT_ROOT", "")
	wd := t.TempDir()
	t.Chdir(wd)
	r := sbx(t, "config", "check")
	r.expect(t, 0)
	if want := "ok: built-in default config (backend local, 1 sandbox: main)\n" +
		"project root: " + wd + " (from the config's folder: no .git, pyproject.toml, go.mod or setup.py at or above it)\n" +
		"isolation: main none\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}

	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
volumes = ["/does/not/exist:/data"]
[sandbox.sandboxes.worker]
`)
	r = sbx(t, "config", "check", cfg)
	r.expect(t, 0)
	if want := "ok: " + cfg + " (backend local, 2 sandboxes: main, worker)\n"; !strings.HasPrefix(r.stdout, want) {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	if !strings.HasPrefix(r.stderr, "warning: ") || !strings.Contains(r.stderr, "/does/not/exist") {
		t.Errorf("stderr %q, want a warning about the volume", r.stderr)
	}

	var res configCheckResult
	if err := json.Unmarshal([]byte(must(t, "--json", "config", "check", cfg)), &res); err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Backend != "local" || len(res.Sandboxes) != 2 || len(res.Warnings) != 1 ||
		res.ProjectRoot != filepath.Dir(cfg) || !strings.HasPrefix(res.ProjectRootFrom, "the config's folder") {
		t.Errorf("json %+v", res)
	}
}

func TestConfigCheckExample(t *testing.T) {
	setup(t)
	example := filepath.Join("..", "..", "config.example.toml")
	// The file is part of the repository: missing is a regression.
	if _, err := os.Stat(example); err != nil {
		t.Fatalf("config.example.toml documents every key and must parse: %v", err)
	}
	r := sbx(t, "config", "check", example)
	r.expect(t, 0)
	// The file users copy isolates: local (host processes) is only the
	// commented alternative.
	if !strings.HasPrefix(r.stdout, "ok: "+example+" (backend native, ") {
		t.Errorf("stdout %q, want backend native", r.stdout)
	}
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\n# backend = \"local\"\n") {
		t.Error(`config.example.toml does not show backend = "local" as a commented alternative`)
	}
}

// OpenSage-shaped configs with every entry key OpenSage parses (platform,
// docker_args, container_name, the lite and k8s [extra] keys, commands with
// shell syntax) pass config check; configs without sandboxes are valid but
// launch nothing.
func TestConfigCheckOpenSageKeys(t *testing.T) {
	setup(t)
	t.Setenv("SBX_PROJECT_ROOT", "")
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{
		{"opensage_native.toml", "(backend native, 2 sandboxes: main, worker)\n"},
		{"opensage_lite.toml", "(backend agentdocker-lite, 1 sandbox: main)\n"},
		{"opensage_k8s.toml", "(backend k8s, 2 sandboxes: main, neo4j)\n"},
		{"opensage_nosandbox.toml", "(backend native, nothing to launch: no [sandbox.sandboxes.NAME] entries)\n"},
	} {
		path := filepath.Join("..", "..", "config", "testdata", tt.file)
		r := sbx(t, "config", "check", path)
		r.expect(t, 0)
		// The repository is the files' project (.git, go.mod).
		if want := "ok: " + path + " " + tt.want + "project root: " + repo + " (from the nearest folder holding "; !strings.HasPrefix(r.stdout, want) {
			t.Errorf("%s: stdout %q, want it to start with %q", tt.file, r.stdout, want)
		}
	}
}

// config check prints the project root that project_relative_* keys
// resolve against and where it came from, and fails on a Dockerfile or
// shared data path that does not exist there, naming the key and the path.
func TestConfigCheckProjectRoot(t *testing.T) {
	setup(t)
	t.Setenv("SBX_PROJECT_ROOT", "")
	root := t.TempDir()
	for _, d := range []string{".git", "docker/main", "agents/mine"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "docker/main/Dockerfile"), []byte("FROM busybox\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(text string) string {
		p := filepath.Join(root, "agents/mine/sandbox.toml")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mem := filepath.Join(root, "mem")
	cfg := write(`
[sandbox]
backend = "native"
host_shared_mem_dir = "` + mem + `"
[sandbox.sandboxes.main]
project_relative_dockerfile_path = "docker/main/Dockerfile"
`)
	r := sbx(t, "config", "check", cfg)
	r.expect(t, 0)
	if _, err := os.Stat(mem); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("config check made host_shared_mem_dir %s (stat: %v); only a launch makes it", mem, err)
	}
	if want := "project root: " + root + " (from the nearest folder holding .git at or above the config's folder)\n" +
		"isolation: main container\n"; !strings.HasSuffix(r.stdout, want) {
		t.Errorf("stdout %q, want it to end with %q", r.stdout, want)
	}

	missing := filepath.Join(root, "docker/mian/Dockerfile")
	for _, tt := range []struct{ text, want string }{
		{`
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
project_relative_dockerfile_path = "docker/mian/Dockerfile"
`, "sandbox.sandboxes.main.project_relative_dockerfile_path: build context " + filepath.Dir(missing) + " does not exist (relative to the project root " + root},
		{`
[sandbox]
backend = "native"
[sandbox.sandboxes.main]
project_relative_dockerfile_path = "docker/main/Dockerfile.gpu"
`, "sandbox.sandboxes.main.project_relative_dockerfile_path: Dockerfile " + filepath.Join(root, "docker/main/Dockerfile.gpu") + " does not exist"},
	} {
		r := sbx(t, "config", "check", write(tt.text))
		r.expect(t, 1)
		if !strings.Contains(r.stderr, tt.want) {
			t.Errorf("stderr %q, want %q", r.stderr, tt.want)
		}
	}
	// Shared data that does not exist is a warning, as in OpenSage.
	r = sbx(t, "config", "check", write(`
[sandbox]
backend = "native"
project_relative_shared_data_path = "data/seed.tar.gz"
[sandbox.sandboxes.main]
`))
	r.expect(t, 0)
	if want := "warning: sandbox.project_relative_shared_data_path: shared data " + filepath.Join(root, "data/seed.tar.gz") + " does not exist"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
}

// A config with [sandbox] but no entries is valid; run and up on it fail
// naming the missing table, before opening a backend.
func TestNothingToLaunch(t *testing.T) {
	setup(t)
	for _, tt := range []struct{ text, missing string }{
		{"[sandbox]\nbackend = \"native\"\n[sandbox.native]\npull_policy = \"never\"\n", "[sandbox.sandboxes.NAME] tables"},
		{"task_name = \"chat\"\n", "[sandbox] table"},
	} {
		cfg := writeConfig(t, tt.text)
		r := sbx(t, "config", "check", cfg)
		r.expect(t, 0)
		if !strings.Contains(r.stdout, "nothing to launch") {
			t.Errorf("config check: stdout %q", r.stdout)
		}
		for _, args := range [][]string{{"run", "--", "true"}, {"up"}} {
			r := sbx(t, append([]string{"--config", cfg}, args...)...)
			r.expect(t, 1)
			if !strings.Contains(r.stderr, "nothing to launch: the file has no "+tt.missing) ||
				!strings.Contains(r.stderr, "[sandbox.sandboxes.main]") {
				t.Errorf("sbx %v: stderr %q, want the missing table named", args, r.stderr)
			}
		}
	}
}

func TestUnknownBackend(t *testing.T) {
	setup(t)
	for _, args := range [][]string{
		{"--backend", "dokcer", "run", "--", "true"},
		{"--backend", "dokcer", "config", "check"},
		{"--backend", "dokcer", "ls"},
	} {
		r := sbx(t, args...)
		r.expect(t, 1)
		if !strings.Contains(r.stderr, `"dokcer"`) || !strings.Contains(r.stderr, "known: ") ||
			!strings.Contains(r.stderr, "local") {
			t.Errorf("sbx %v: stderr %q, want the known backends listed", args, r.stderr)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	setup(t)
	for _, args := range [][]string{
		{"run"},
		{"exec", "main"},
		{"exec", "main", "--"},
		{"cp", "a"},
		{"rm"},
		{"frobnicate"},
		{"ls", "--nope"},
		{"--log-level", "loud", "ls"},
	} {
		r := sbx(t, args...)
		r.expect(t, 1)
		if !strings.HasPrefix(r.stderr, "sbx: ") {
			t.Errorf("sbx %v: stderr %q", args, r.stderr)
		}
	}
}

func TestBinary(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	out, err := exec.Command(bin, "run", "--", "echo", "hello").Output()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("sbx run -- echo hello: %q, %v", out, err)
	}
	err = exec.Command(bin, "run", "--", "sh", "-c", "exit 3").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("sbx run -- sh -c 'exit 3': %v, want exit status 3", err)
	}

	// SIGINT: the command is killed, the sandbox removed, exit 130.
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(bin, "run", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 30`, "sh", pidFile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := readPIDs(t, pidFile)
	_ = cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("sbx run after SIGINT: %v, want exit status 130", err)
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after SIGINT: %+v", got)
	}

	// SIGKILL: nothing is cleaned up, but the sandbox's owner is gone, so
	// sbx gc removes it and what runs in it.
	cmd = exec.Command(bin, "run", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 30`, "sh", pidFile+"2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids = readPIDs(t, pidFile+"2")
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := listSandboxes(t); len(got) != 1 {
		t.Fatalf("sandboxes after SIGKILL: %+v", got)
	}
	if out := must(t, "gc"); !strings.Contains(out, "owner") || !strings.Contains(out, "is gone") {
		t.Errorf("gc printed %q", out)
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after gc: %+v", got)
	}

	var stderr bytes.Buffer
	cmd = exec.Command(bin, "--backend", "dokcer", "ls")
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.HasPrefix(stderr.String(), "sbx: ") {
		t.Fatalf("sbx --backend dokcer ls: %v, stderr %q", err, stderr.String())
	}
}
