package session_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/session"
)

// gdbImage is sandboxkit-test/debian with gdb (scripts/gdb-image.sh).
const gdbImage = "sandboxkit-test/debian-gdb:1"

// nativeConfig parses a config on the native backend with the given
// entries.
func nativeConfig(t *testing.T, entries string) *sandboxkit.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	data := "[sandbox]\nbackend = \"native\"\ndefault_ttl = \"1h\"\n" + entries
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := sandboxkit.LoadConfig(path)
	if err != nil {
		t.Fatalf("config:\n%s\n%v", data, err)
	}
	return cfg
}

// progressLog records a launch's progress.
type progressLog struct {
	mu     sync.Mutex
	events []session.Progress
}

func (p *progressLog) record(e session.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
}

// index is the position of the first event of sandbox at step (-1: none).
func (p *progressLog) index(sandbox, step string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.IndexFunc(p.events, func(e session.Progress) bool { return e.Sandbox == sandbox && e.Step == step })
}

// newLauncher returns a launcher with a fixed session ID and registers a
// check that nothing labelled with it is left when the test ends.
func newLauncher(t *testing.T, cli *client.Client, cfg *sandboxkit.Config) (*session.Launcher, *progressLog) {
	t.Helper()
	id := fmt.Sprintf("t%011x", time.Now().UnixNano()&0xfffffffffff)
	dockertest.AssertNoLeftovers(t, cli, backend.LabelSession, id)
	p := &progressLog{}
	return &session.Launcher{Config: cfg, ID: id, Progress: p.record}, p
}

// destroyOnCleanup ends the session when the test does (after a failed
// assertion too).
func destroyOnCleanup(t *testing.T, s *session.Session) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
}

func execOut(t *testing.T, sb backend.Sandbox, argv ...string) string {
	t.Helper()
	res, err := sb.Exec(context.Background(), backend.ExecRequest{Cmd: argv, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s%s", argv, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// crashProgram compiles cmd/gdbmcp/testdata/crash.c statically with debug
// information (skips without gcc, fails under SBX_REQUIRE_DOCKER=1).
func crashProgram(t *testing.T) []byte {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		if dockertest.Required() {
			t.Fatalf("gcc is needed to build the program to debug: %v", err)
		}
		t.Skip("no gcc to build the program to debug")
	}
	out := filepath.Join(t.TempDir(), "crash")
	if b, err := exec.Command("gcc", "-g", "-O0", "-static", "-o", out, "../cmd/gdbmcp/testdata/crash.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestSessionMainAndGDBMCP launches main and gdb_mcp on the Debian test
// image with gdb, debugs a crashing program through real MCP calls, resumes
// the session from a second launcher, and tears it down.
func TestSessionMainAndGDBMCP(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.DebianImage)
	dockertest.RequireImage(t, cli, gdbImage)
	prog := crashProgram(t)
	// The tool and script folders come from [sandbox] keys.
	tools := t.TempDir()
	for p, content := range map[string]string{"bash/hello.sh": "echo hello from bash_tools\n", "scripts/readme.txt": "scripts\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tools, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tools, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := nativeConfig(t, `bash_tools_path = "`+tools+`/bash"
sandbox_scripts_path = "`+tools+`/scripts"
[sandbox.sandboxes.main]
image = "`+dockertest.DebianImage+`"
working_dir = "/shared"

[sandbox.sandboxes.gdb_mcp]
image = "`+gdbImage+`"
[sandbox.sandboxes.gdb_mcp.extra]
initializer_timeout_sec = 120
work_dir = "/shared"
`)
	l, progress := newLauncher(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := l.Launch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)
	for _, name := range []string{"main", "gdb_mcp"} {
		if progress.index(name, session.StepStarted) < 0 || progress.index(name, session.StepReady) < 0 {
			t.Errorf("%s: progress lacks started or ready: %+v", name, progress.events)
		}
	}

	main, err := s.Sandbox("main")
	if err != nil {
		t.Fatal(err)
	}
	// The env file has in-session addresses, and names resolve.
	env := execOut(t, main, "cat", "/shared/bashrc")
	if !strings.Contains(env, "export GDB_MCP_URL='http://gdb_mcp:1111/mcp'") || !strings.Contains(env, "export SBX_SESSION_ID='"+s.ID+"'") {
		t.Errorf("/shared/bashrc:\n%s", env)
	}
	if got := execOut(t, main, "sh", "-c", `echo "$GDB_MCP_HOST:$GDB_MCP_PORT"`); strings.TrimSpace(got) != "gdb_mcp:1111" {
		t.Errorf("published env in main: %q", got)
	}
	execOut(t, main, "python3", "-c", "import socket; socket.create_connection(('gdb_mcp', 1111), 10).close()")
	if got := execOut(t, main, "sh", "/bash_tools/hello.sh"); got != "hello from bash_tools\n" {
		t.Errorf("/bash_tools/hello.sh printed %q", got)
	}
	if got := execOut(t, main, "cat", "/sandbox_scripts/readme.txt"); got != "scripts\n" {
		t.Errorf("/sandbox_scripts/readme.txt: %q", got)
	}
	// /sandbox_scripts is read-only.
	if res, err := main.Exec(ctx, backend.ExecRequest{Cmd: []string{"touch", "/sandbox_scripts/x"}}); err != nil || res.ExitCode == 0 {
		t.Errorf("writing /sandbox_scripts: want a failure, got %v, exit %d", err, res.ExitCode)
	}

	// The program and its input, through /shared.
	if err := sbfiles.WriteFile(ctx, main, "/shared/crash", bytes.NewReader(prog), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sbfiles.WriteFile(ctx, main, "/shared/input.txt", strings.NewReader("boom\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	h, err := session.HandleOf[*initializers.GDBMCP](s, "gdb_mcp")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "session-test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.URL(), MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("MCP connect to %s: %v", h.URL(), err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		if res.IsError {
			t.Fatalf("%s: tool error: %s", name, b.String())
		}
		return b.String()
	}
	call("set_program", map[string]any{"path": "/shared/crash"})
	call("set_args", map[string]any{"args": "first", "input_file": "/shared/input.txt"})
	call("break", map[string]any{"location": "parse"})
	if got := call("run", map[string]any{"timeout_sec": 60}); !strings.Contains(got, "breakpoint 1") || !strings.Contains(got, "args: 2 first") {
		t.Errorf("run: %q", got)
	}
	if got := call("continue", map[string]any{"timeout_sec": 60}); !strings.Contains(got, "SIGSEGV") {
		t.Errorf("continue: want SIGSEGV, got %q", got)
	}
	bt := strings.Split(strings.TrimSpace(call("backtrace", nil)), "\n")
	if len(bt) < 3 || !strings.HasPrefix(bt[0], "#0 crash (") || !strings.Contains(bt[1], "parse") || !strings.Contains(bt[2], "main") {
		t.Errorf("backtrace: want crash, parse, main; got %q", bt)
	}
	cs.Close()

	// A second launcher (a restarted host program) resumes the session.
	r, err := (&session.Launcher{Config: cfg}).Resume(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := len(r.Members()); got != 2 {
		t.Errorf("resumed session has %d members, want 2", got)
	}
	rh, err := session.HandleOf[*initializers.GDBMCP](r, "gdb_mcp")
	if err != nil || rh.URL() != h.URL() {
		t.Errorf("resumed handle: %v, %v (want %s)", rh, err, h.URL())
	}
	if err := wait.ForMCP(1111, "/mcp").WithTimeout(30*time.Second).WaitUntilReady(ctx, r.Members()[0].Sandbox); err != nil {
		t.Errorf("MCP after resume: %v", err)
	}
}

var (
	fakeOnce  sync.Once
	fakeImage string
	fakeErr   error
)

// fakeserviceTag names a build of initializers/internal/fakeservice by
// its source, so that an image of it is reused while the source is the
// same.
func fakeserviceTag() (string, error) {
	src, err := os.ReadFile("../initializers/internal/fakeservice/main.go")
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(src)
	return hex.EncodeToString(sum[:6]), nil
}

// buildFakeservice builds initializers/internal/fakeservice for Linux,
// static, and returns the binary.
func buildFakeservice() ([]byte, error) {
	dir, err := os.MkdirTemp("", "sandboxkit-fakeservice-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "fakeservice")
	cmd := exec.Command("go", "build", "-o", bin, "../initializers/internal/fakeservice")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building fakeservice: %v\n%s", err, out)
	}
	return os.ReadFile(bin)
}

// fakeServiceImage builds initializers/internal/fakeservice into a
// throwaway image (reused while the source is unchanged): the stand-in
// for Neo4j and Joern, whose images cannot be pulled here.
func fakeServiceImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	fakeOnce.Do(func() {
		tag, err := fakeserviceTag()
		if err != nil {
			fakeErr = err
			return
		}
		ref := "sandboxkit-test/fakeservice:" + tag
		ctx := context.Background()
		if _, err := cli.ImageInspect(ctx, ref); err == nil {
			fakeImage = ref
			return
		}
		data, err := buildFakeservice()
		if err != nil {
			fakeErr = err
			return
		}
		var tarball bytes.Buffer
		tw := tar.NewWriter(&tarball)
		tw.WriteHeader(&tar.Header{Name: "fakeservice", Mode: 0o755, Size: int64(len(data))})
		tw.Write(data)
		tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir})
		tw.Close()
		rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &tarball, SourceName: "-"}, ref,
			image.ImportOptions{Changes: []string{`CMD ["/fakeservice", "never"]`}})
		if err != nil {
			fakeErr = err
			return
		}
		io.Copy(io.Discard, rc)
		rc.Close()
		fakeImage = ref
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return fakeImage
}

// TestSessionNeo4jJoernWithFakeServiceImages checks the neo4j and joern
// initializers' specs, wiring, dependency order and readiness probes
// against a small local stand-in image (their real images cannot be
// pulled here; see TestSessionRealNeo4jJoern).
func TestSessionNeo4jJoernWithFakeServiceImages(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	fake := fakeServiceImage(t, cli)
	cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"

[sandbox.sandboxes.neo4j]
image = "`+fake+`"
command = "/fakeservice neo4j"
[sandbox.sandboxes.neo4j.extra]
password = "sekret-pw"
initializer_timeout_sec = 60

[sandbox.sandboxes.joern]
image = "`+fake+`"
command = "/fakeservice joern 8081"
[sandbox.sandboxes.joern.extra]
initializer_timeout_sec = 60
`)
	l, progress := newLauncher(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := l.Launch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)

	// joern is provisioned only after main and neo4j are ready.
	jp := progress.index("joern", session.StepProvisioning)
	for _, dep := range []string{"main", "neo4j"} {
		if r := progress.index(dep, session.StepReady); r < 0 || jp < 0 || r > jp {
			t.Errorf("joern provisioned at event %d, %s ready at %d: want after", jp, dep, r)
		}
	}
	main, _ := s.Sandbox("main")
	env := execOut(t, main, "cat", "/shared/bashrc")
	for _, want := range []string{
		"export NEO4J_URI='bolt://neo4j:7687'", "export NEO4J_HOST='neo4j'", "export NEO4J_PORT='7687'",
		"export NEO4J_USER='neo4j'", "export NEO4J_PASSWORD='sekret-pw'",
		"export JOERN_SERVER_HOST='joern'", "export JOERN_SERVER_PORT='8081'",
	} {
		if !strings.Contains(env, want) {
			t.Errorf("/shared/bashrc lacks %s:\n%s", want, env)
		}
	}
	// In-session name resolution: main reaches neo4j's Bolt port by name.
	if got := execOut(t, main, "sh", "-c", `printf '\140\140\260\027\000\010\010\005\000\000\000\000\000\000\000\000\000\000\000\000' | nc -w 5 neo4j 7687 | od -An -tx1`); !strings.Contains(got, "00 00 08 05") {
		t.Errorf("bolt handshake from main to neo4j:7687 by name: %q", got)
	}

	n, err := session.HandleOf[*initializers.Neo4j](s, "neo4j")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(n.BoltURI(), "bolt://127.0.0.1:") || n.Password != "sekret-pw" {
		t.Errorf("neo4j handle: %+v", n)
	}
	j, err := session.HandleOf[*initializers.Joern](s, "joern")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := j.Query(ctx, "1 + 1"); err != nil || !strings.Contains(out, "1 + 1") {
		t.Errorf("joern query: %q, %v", out, err)
	}
	if _, err := session.HandleOf[*initializers.Neo4j](s, "joern"); err == nil {
		t.Error("HandleOf with the wrong type: want an error")
	}
}

// TestSessionRealNeo4jJoern runs the real images (SBX_TEST_REAL_IMAGES=1;
// they are pulled).
func TestSessionRealNeo4jJoern(t *testing.T) {
	if os.Getenv("SBX_TEST_REAL_IMAGES") != "1" {
		t.Skip("set SBX_TEST_REAL_IMAGES=1 to pull and run the real Neo4j and Joern images")
	}
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.neo4j]
[sandbox.sandboxes.joern]
`)
	l, _ := newLauncher(t, cli, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	s, err := l.Launch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)
	j, err := session.HandleOf[*initializers.Joern](s, "joern")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := j.Query(ctx, "1 + 1"); err != nil || !strings.Contains(out, "2") {
		t.Errorf("joern query: %q, %v", out, err)
	}
}

// neverReady is a test initializer whose service never listens.
type neverReady struct{ initializers.Generic }

func (neverReady) Spec() backend.Spec {
	return backend.Spec{Ports: []backend.Port{{Port: 9999, Protocol: "tcp"}}}
}

func (neverReady) Ready() wait.Strategy {
	return wait.ForListeningPort(9999).WithTimeout(3 * time.Second).WithPollInterval(200 * time.Millisecond)
}

// failingProvision fails its provisioning and records that it ran.
type failingProvision struct {
	initializers.Generic
	ran *bool
}

func (f failingProvision) Provision(context.Context, *initializers.Instance) error {
	*f.ran = true
	return errors.New("the provisioning step failed on purpose")
}

// dependent depends on "base" and records whether it was provisioned.
type dependent struct {
	initializers.Generic
	provisioned *bool
}

func (dependent) DependsOn() []initializers.Dependency {
	return []initializers.Dependency{{Name: "base"}}
}

func (d dependent) Provision(context.Context, *initializers.Instance) error {
	*d.provisioned = true
	return nil
}

func testRegistry(extra map[string]initializers.Initializer) *initializers.Registry {
	r := initializers.NewRegistry()
	initializers.Builtins(r)
	for typ, in := range extra {
		r.Register(typ, initializers.Factory{New: func(any) (initializers.Initializer, error) { return in, nil }})
	}
	return r
}

func TestSessionFailures(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	dockertest.RequireImage(t, cli, dockertest.DebianImage)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("never ready", func(t *testing.T) {
		fake := fakeServiceImage(t, cli)
		cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.svc]
type = "never"
image = "`+fake+`"
command = "/fakeservice never"
`)
		l, _ := newLauncher(t, cli, cfg)
		l.Initializers = testRegistry(map[string]initializers.Initializer{"never": neverReady{}})
		_, err := l.Launch(ctx)
		se, ok := errors.AsType[*session.Error](err)
		if !ok || se.Sandbox != "svc" || se.Step != "ready" || !errors.Is(err, wait.ErrNotReady) {
			t.Fatalf("want a SessionError for svc at ready wrapping wait.ErrNotReady, got %v", err)
		}
		if !strings.Contains(err.Error(), "starting, but never ready") {
			t.Errorf("error lacks the container's last log lines: %v", err)
		}
	})

	t.Run("provisioning fails", func(t *testing.T) {
		cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.DebianImage+`"
[sandbox.sandboxes.main.extra]
packages = ["surely-not-a-package-sbx"]
`)
		l, _ := newLauncher(t, cli, cfg)
		_, err := l.Launch(ctx)
		se, ok := errors.AsType[*session.Error](err)
		if !ok || se.Sandbox != "main" || se.Step != "provision" {
			t.Fatalf("want a SessionError for main at provision, got %v", err)
		}
		// The test image has python3 without pip: pip's (python's) own
		// words must reach the caller.
		if !strings.Contains(err.Error(), "pip") || !strings.Contains(err.Error(), "exit code") {
			t.Errorf("error lacks pip's output: %v", err)
		}
	})

	t.Run("dependency fails", func(t *testing.T) {
		var ran, provisioned bool
		cfg := nativeConfig(t, `
[sandbox.sandboxes.base]
type = "failing"
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.top]
type = "dependent"
image = "`+dockertest.BusyboxImage+`"
`)
		l, _ := newLauncher(t, cli, cfg)
		l.Initializers = testRegistry(map[string]initializers.Initializer{
			"failing":   failingProvision{ran: &ran},
			"dependent": dependent{provisioned: &provisioned},
		})
		_, err := l.Launch(ctx)
		se, ok := errors.AsType[*session.Error](err)
		if !ok || se.Sandbox != "base" || se.Step != "provision" || !strings.Contains(err.Error(), "on purpose") {
			t.Fatalf("want the dependency's own failure, got %v", err)
		}
		if !ran || provisioned {
			t.Errorf("base provisioned: %v (want true); top provisioned: %v (want false)", ran, provisioned)
		}
	})

	t.Run("resume after a sandbox was removed", func(t *testing.T) {
		cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
[sandbox.sandboxes.worker]
image = "`+dockertest.BusyboxImage+`"
`)
		l, _ := newLauncher(t, cli, cfg)
		s, err := l.Launch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		destroyOnCleanup(t, s)
		w, _ := s.Sandbox("worker")
		nsb, ok := backend.As[interface{ ContainerID() string }](w)
		if !ok {
			t.Fatal("native sandbox without ContainerID")
		}
		if err := cli.ContainerRemove(ctx, nsb.ContainerID(), container.RemoveOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		_, err = (&session.Launcher{Config: cfg}).Resume(ctx, s.ID)
		if !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), `"worker"`) {
			t.Fatalf("resume: want ErrNotFound naming worker, got %v", err)
		}
	})
}

// TestLaunchChecksBeforeMaking: config mistakes fail before anything is
// made (no Docker needed: the backend is never contacted).
func TestLaunchChecksBeforeMaking(t *testing.T) {
	for name, tc := range map[string]struct{ entries, want string }{
		"bad initializer value": {`
[sandbox.sandboxes.neo4j.extra]
password = "short"`, `sandbox.sandboxes.neo4j.extra: password: Neo4j 5 needs at least 8 characters`},
		"missing dependency": {`
[sandbox.sandboxes.joern]`, `sandbox "joern" (type joern) depends on main, which is not in the session`},
		"unknown type": {`
[sandbox.sandboxes.db]
type = "neo4jj"`, `unknown initializer type "neo4jj"`},
		"wrong value type": {`
[sandbox.sandboxes.main.extra]
packages = "numpy"`, `sandbox.sandboxes.main.extra.packages`},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := nativeConfig(t, tc.entries)
			l := &session.Launcher{Config: cfg, Backend: unreachable{}}
			_, err := l.Launch(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, backend.ErrInvalidConfig) {
				t.Errorf("want an invalid-config error containing %q, got %v", tc.want, err)
			}
		})
	}
}

// unreachable is a backend that fails every call: Launch must not get to
// it when the config is wrong.
type unreachable struct{ backend.Backend }

func (unreachable) Name() string { return "unreachable" }

// TestSessionCheckpoint commits a session's sandboxes to images, writes the
// manifest, and launches a new session from it.
func TestSessionCheckpoint(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	cfg := nativeConfig(t, `
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, _ := newLauncher(t, cli, cfg)
	s, err := l.Launch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s)
	main, _ := s.Sandbox("main")
	execOut(t, main, "sh", "-c", "echo cached > /root/state.txt")
	path := filepath.Join(t.TempDir(), "manifest.json")
	m, err := s.Checkpoint(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, ref := range m.Images() {
			cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
		}
	})
	loaded, err := session.LoadManifest(path)
	if err != nil || loaded.Session != s.ID || loaded.Sandboxes["main"].Image == "" || loaded.Sandboxes["main"].Type != "main" {
		t.Fatalf("manifest: %+v, %v", loaded, err)
	}

	l2, _ := newLauncher(t, cli, cfg)
	l2.Manifest = loaded
	s2, err := l2.Launch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, s2)
	main2, _ := s2.Sandbox("main")
	if got := execOut(t, main2, "cat", "/root/state.txt"); got != "cached\n" {
		t.Errorf("launched from the checkpoint: state.txt = %q", got)
	}
	info, err := main2.Info(ctx)
	if err != nil || info.Image != loaded.Sandboxes["main"].Image || info.Session != s2.ID {
		t.Errorf("info: %+v, %v", info, err)
	}
}
