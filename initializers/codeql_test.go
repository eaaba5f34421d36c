package initializers_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/internal/harness"
	"github.com/sandboxkit/sandboxkit/internal/rootfs"
)

// The codeql, fuzz and coverage tests run against stand-in sandboxes: lite
// (runc) containers of a busybox root file system with the stand-in scripts
// of testdata/sandbox_scripts mounted at /sandbox_scripts, in place of
// OpenSage's images, CodeQL bundle and OSS-Fuzz builds, which this machine
// cannot pull or run. See TestOpenSageInitializersRealImages for the real
// ones.

// standIn returns a running stand-in sandbox with files (path -> content,
// all mode 0755) added to its root file system and env in its
// environment. Its bash is busybox sh.
func standIn(t *testing.T, files, env map[string]string) backend.Sandbox {
	t.Helper()
	harness.RequireLite(t)
	dir, err := rootfs.Busybox()
	if err != nil {
		t.Fatalf("building the stand-in root file system: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	files["/bin/bash"] = "#!/bin/sh\nexec /bin/sh \"$@\"\n"
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	scripts, err := filepath.Abs("testdata/sandbox_scripts")
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: a subtest's name may hold a comma, which overlayfs
	// options cannot.
	base, err := os.MkdirTemp("", "sbx-standin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	b, err := lite.New(lite.Config{Runtime: "runc", StateDir: filepath.Join(base, "state"),
		ImageDir: filepath.Join(base, "images"), RuntimeRoot: filepath.Join(base, "runtime")})
	if err != nil {
		t.Fatalf("opening the lite backend for a stand-in sandbox: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	sb, err := b.Create(t.Context(), backend.Spec{
		Name: "standin", Image: "dir:" + dir, Env: env, TTL: 30 * time.Minute,
		Volumes: []backend.Volume{{Type: backend.VolumeBind, Source: scripts, Target: "/sandbox_scripts", ReadOnly: true}},
	})
	if err != nil {
		t.Fatalf("creating the stand-in sandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

// statusLog records an Instance's Status calls.
type statusLog struct {
	mu    sync.Mutex
	lines []string
}

func (s *statusLog) add(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, line)
}

func (s *statusLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// sessionInstance is the Instance a session gives the sandbox named name.
func sessionInstance(name string, sb backend.Sandbox, status *statusLog) *initializers.Instance {
	return &initializers.Instance{Name: name, Type: name, Session: "test", Sandbox: sb,
		Shared: "/shared", SandboxScripts: "/sandbox_scripts",
		Logger: slog.New(slog.DiscardHandler), Status: status.add}
}

// readIn returns a file of sb ("" and false when it does not exist).
func readIn(t *testing.T, sb backend.Sandbox, name string) (string, bool) {
	t.Helper()
	rc, err := sbfiles.ReadFile(t.Context(), sb, name)
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return string(b), true
}

func newCodeQL(t *testing.T, mutate func(*initializers.CodeQLConfig)) (initializers.Initializer, error) {
	t.Helper()
	return newFrom(t, initializers.CodeQLFactory(), mutate)
}

func TestCodeQLConfig(t *testing.T) {
	in, err := newCodeQL(t, func(c *initializers.CodeQLConfig) { c.DefaultCompileCommand("make -j8") })
	if err != nil {
		t.Fatal(err)
	}
	deps := in.DependsOn()
	if len(deps) != 2 || deps[0] != (initializers.Dependency{Name: "neo4j"}) || deps[1] != (initializers.Dependency{Name: "joern", Optional: true}) {
		t.Errorf("codeql needs neo4j and waits for joern when there is one: %+v", deps)
	}
	if env := in.Publish("codeql"); len(env) != 0 {
		t.Errorf("codeql publishes nothing (as in OpenSage): %v", env)
	}
	if got := initializers.TimeoutOf(initializers.CodeQLFactory().NewConfig()); got != time.Hour {
		t.Errorf("default initializer_timeout_sec: %s, want OpenSage's 3600 s", got)
	}
	for name, tc := range map[string]struct {
		mutate func(*initializers.CodeQLConfig)
		want   string
	}{
		"no compile command": {func(*initializers.CodeQLConfig) {}, "compile_command: empty: set compile_command in the config file's root [build] table"},
		"zero timeout": {func(c *initializers.CodeQLConfig) {
			c.CompileCommand, c.CodeQLTimeout = "make", 0
		}, "codeql_timeout_sec"},
		"relative results_dir": {func(c *initializers.CodeQLConfig) {
			c.CompileCommand, c.ResultsDir = "make", "out/callgraph"
		}, `results_dir "out/callgraph"`},
	} {
		if _, err := newCodeQL(t, tc.mutate); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("%s: %v, want an invalid-config error containing %q", name, err, tc.want)
		}
	}
}

// TestCodeQLStandIn runs the codeql initializer in a stand-in sandbox
// whose run_codeql.sh runs the compile command and writes the CSVs.
func TestCodeQLStandIn(t *testing.T) {
	const compile = `echo "building with $0" > /tmp/standin/built && echo 'it''s built'`
	in, err := newCodeQL(t, func(c *initializers.CodeQLConfig) { c.CompileCommand = compile })
	if err != nil {
		t.Fatal(err)
	}
	sb := standIn(t, map[string]string{}, nil)
	var status statusLog
	if err := in.Provision(t.Context(), sessionInstance("codeql", sb, &status)); err != nil {
		t.Fatalf("provision: %v\nprogress:\n%s", err, status.String())
	}
	if args, _ := readIn(t, sb, "/tmp/standin/run_codeql.args"); args != "1\n"+compile+"\n" {
		t.Errorf("run_codeql.sh got %q, want the compile command as its one argument", args)
	}
	if built, _ := readIn(t, sb, "/tmp/standin/built"); built != "building with sh\n" {
		t.Errorf("the compile command did not run: %q", built)
	}
	for _, f := range initializers.CodeQLResultFiles {
		src, _ := readIn(t, sb, "/shared/out/callgraph/"+f)
		dst, ok := readIn(t, sb, "/shared/neo4j/import/codeql/"+f)
		if !ok || dst != src || !strings.HasPrefix(dst, "main,") && !strings.Contains(dst, "\nmain,") {
			t.Errorf("%s: copied %q (exists %v), want the script's %q", f, dst, ok, src)
		}
	}
	if !strings.Contains(status.String(), "bash /sandbox_scripts/callgraph/run_codeql.sh '") {
		t.Errorf("progress does not show the command run:\n%s", status.String())
	}
}

func TestCodeQLStandInFailures(t *testing.T) {
	t.Run("build fails", func(t *testing.T) {
		in, err := newCodeQL(t, func(c *initializers.CodeQLConfig) {
			c.CompileCommand = "echo 'cc: error: foo.c: no such file' >&2; exit 3"
		})
		if err != nil {
			t.Fatal(err)
		}
		sb := standIn(t, map[string]string{}, nil)
		err = in.Provision(t.Context(), sessionInstance("codeql", sb, &statusLog{}))
		var se *initializers.StepError
		if !errors.As(err, &se) || se.Sandbox != "codeql" || se.Step != "CodeQL call graph" {
			t.Fatalf("want a *StepError of sandbox codeql, step CodeQL call graph: %v", err)
		}
		for _, want := range []string{`sandbox "codeql"`, "run_codeql.sh", "exit code 1", "cc: error: foo.c: no such file", "A fatal error occurred"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q:\n%v", want, err)
			}
		}
		if _, ok := readIn(t, sb, "/shared/neo4j/import/codeql/results.csv"); ok {
			t.Error("CSVs were copied after a failed run")
		}
	})
	t.Run("a CSV missing", func(t *testing.T) {
		in, err := newCodeQL(t, func(c *initializers.CodeQLConfig) { c.CompileCommand = "true" })
		if err != nil {
			t.Fatal(err)
		}
		sb := standIn(t, map[string]string{}, map[string]string{"STANDIN_NO_CSV": "fp_accesses.csv"})
		err = in.Provision(t.Context(), sessionInstance("codeql", sb, &statusLog{}))
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "/shared/out/callgraph/fp_accesses.csv") ||
			!strings.Contains(err.Error(), "call graph written to") {
			t.Errorf("want a not-exist error naming fp_accesses.csv with the script's output, got %v", err)
		}
	})
}
