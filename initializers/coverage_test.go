package initializers_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/session"
)

// standInPython is a stand-in python3 that reports version and imports
// only the modules listed.
func standInPython(version string, modules ...string) string {
	return fmt.Sprintf(`#!/bin/sh
case "$1" in
--version) echo "Python %s" ;;
-c)
	for m in neo4j msgspec; do
		case " %s " in *" $m "*) ;; *) echo "ModuleNotFoundError: No module named '$m'" >&2; exit 1 ;; esac
	done
	echo "deps ok" ;;
*) echo "stand-in python3: unexpected arguments: $*" >&2; exit 2 ;;
esac
`, version, strings.Join(modules, " "))
}

func newCoverage(t *testing.T) initializers.Initializer {
	t.Helper()
	in, err := initializers.CoverageFactory().New(initializers.CoverageFactory().NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestCoverageStandIn: compile_coverage.sh rebuilds /out, and readiness
// passes with Python 3.12, neo4j and msgspec.
func TestCoverageStandIn(t *testing.T) {
	in := newCoverage(t)
	if deps := in.DependsOn(); len(deps) != 0 {
		t.Errorf("coverage depends on nothing: %+v", deps)
	}
	if env := in.Publish("coverage"); len(env) != 0 {
		t.Errorf("coverage publishes nothing: %v", env)
	}
	sb := standIn(t, map[string]string{
		"/out/old_fuzzer":  "old",
		"/usr/bin/python3": standInPython("3.12.3", "neo4j", "msgspec"),
	}, nil)
	var status statusLog
	if err := in.Provision(t.Context(), sessionInstance("coverage", sb, &status)); err != nil {
		t.Fatalf("provision: %v", err)
	}
	if env, _ := readIn(t, sb, "/out/coverage.env"); env != "coverage\nlibfuzzer\n" {
		t.Errorf("/out/coverage.env = %q: compile_coverage.sh did not run", env)
	}
	if _, ok := readIn(t, sb, "/out/old_fuzzer"); ok {
		t.Error("the old /out survived compile_coverage.sh")
	}
	if !strings.Contains(status.String(), "coverage build: bash /sandbox_scripts/ossfuzz/compile_coverage.sh") {
		t.Errorf("progress:\n%s", status.String())
	}
	if err := in.Ready().WaitUntilReady(t.Context(), sb); err != nil {
		t.Errorf("ready: %v", err)
	}
}

// TestCoverageStandInNotReady: the wrong Python, or a missing module,
// fails readiness at once with a message saying which.
func TestCoverageStandInNotReady(t *testing.T) {
	for name, tc := range map[string]struct {
		python string
		want   string
	}{
		"python 3.11":     {standInPython("3.11.9", "neo4j", "msgspec"), `python3 is "Python 3.11.9", want Python 3.12`},
		"python 3.1.2":    {standInPython("3.1.2", "neo4j", "msgspec"), "want Python 3.12"},
		"no msgspec":      {standInPython("3.12.1", "neo4j"), "No module named 'msgspec'"},
		"python3 missing": {"", "python3 --version failed"},
	} {
		t.Run(name, func(t *testing.T) {
			files := map[string]string{}
			if tc.python != "" {
				files["/usr/bin/python3"] = tc.python
			}
			sb := standIn(t, files, nil)
			start := time.Now()
			err := newCoverage(t).Ready().WaitUntilReady(t.Context(), sb)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ready: %v, want an error containing %q", err, tc.want)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("a permanent failure took %s: it should not be retried until the deadline", d)
			}
		})
	}
}

func TestCoverageStandInCompileFails(t *testing.T) {
	sb := standIn(t, map[string]string{}, map[string]string{"STANDIN_FAIL": "clang: error: unsupported option '-fprofile-instr-generate'"})
	err := newCoverage(t).Provision(t.Context(), sessionInstance("coverage", sb, &statusLog{}))
	for _, want := range []string{`sandbox "coverage": coverage build: bash /sandbox_scripts/ossfuzz/compile_coverage.sh: exit code 1`,
		"clang: error: unsupported option"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestOpenSageInitializersRealImages launches codeql, fuzz and coverage on
// OpenSage's real images with OpenSage's real sandbox scripts (CodeQL
// bundle unpacked in them) on Docker: SBX_TEST_REAL_IMAGES=1, with
// SBX_TEST_ARVO_IMAGE (an ARVO/OSS-Fuzz builder image, pulled from its
// registry), SBX_TEST_OPENSAGE_SCRIPTS (src/opensage/sandbox_scripts),
// optionally SBX_TEST_COVERAGE_IMAGE (default <image>_coverage) and
// SBX_TEST_COMPILE_COMMAND (default "compile").
func TestOpenSageInitializersRealImages(t *testing.T) {
	if os.Getenv("SBX_TEST_REAL_IMAGES") != "1" {
		t.Skip("set SBX_TEST_REAL_IMAGES=1, SBX_TEST_ARVO_IMAGE and SBX_TEST_OPENSAGE_SCRIPTS to run codeql, fuzz and coverage on OpenSage's real images")
	}
	image, scripts := os.Getenv("SBX_TEST_ARVO_IMAGE"), os.Getenv("SBX_TEST_OPENSAGE_SCRIPTS")
	if image == "" || scripts == "" {
		t.Fatal("SBX_TEST_REAL_IMAGES=1 needs SBX_TEST_ARVO_IMAGE (e.g. an ARVO -vul image) and SBX_TEST_OPENSAGE_SCRIPTS (OpenSage's sandbox_scripts with the CodeQL bundle in codeql/)")
	}
	coverageImage := cmp.Or(os.Getenv("SBX_TEST_COVERAGE_IMAGE"), image+"_coverage")
	compile := cmp.Or(os.Getenv("SBX_TEST_COMPILE_COMMAND"), "compile")
	dockertest.Client(t)
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	data := fmt.Sprintf(`
[build]
compile_command = %q
[sandbox]
backend = "native"
sandbox_scripts_path = %q
[sandbox.sandboxes.main]
image = %q
[sandbox.sandboxes.neo4j]
[sandbox.sandboxes.codeql]
image = %q
[sandbox.sandboxes.fuzz]
image = %q
[sandbox.sandboxes.coverage]
image = %q
`, compile, scripts, image, image, image, coverageImage)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := config.NewRegistry()
	reg.Register(native.Factory)
	cfg, err := reg.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Hour)
	defer cancel()
	s, err := session.Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := s.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	codeql, _ := s.Sandbox("codeql")
	for _, f := range initializers.CodeQLResultFiles {
		if got, ok := readIn(t, codeql, "/shared/neo4j/import/codeql/"+f); !ok || got == "" {
			t.Errorf("%s was not staged for Neo4j", f)
		}
	}
	fuzz, _ := s.Sandbox("fuzz")
	if _, ok := readIn(t, fuzz, "/out/afl-fuzz"); !ok {
		t.Error("the AFL++ build left no /out/afl-fuzz")
	}
}
