package initializers

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// CoverageType builds the project with coverage instrumentation, as
// OpenSage's coverage initializer does.
const CoverageType = "coverage"

// CoverageConfig is [sandbox.sandboxes.coverage.extra].
type CoverageConfig struct {
	Common
	// CompileTimeout bounds compile_coverage.sh. Default 3600 s.
	CompileTimeout Seconds `toml:"compile_timeout_sec"`
}

// CoverageFactory is the coverage initializer.
func CoverageFactory() Factory {
	return Factory{
		NewConfig: func() any {
			return &CoverageConfig{
				Common:         Common{InitializerTimeout: Seconds(DefaultScriptTimeout)},
				CompileTimeout: Seconds(DefaultScriptTimeout),
			}
		},
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*CoverageConfig)
			if c.CompileTimeout <= 0 {
				return nil, invalidf("compile_timeout_sec: want a positive number of seconds (default 3600)")
			}
			return &CoverageInit{Config: *c}, nil
		},
	}
}

// CoverageInit is the coverage initializer for one entry. Its image is the
// entry's: OpenSage's template builds <default_image>_coverage, the
// project's OSS-Fuzz image plus /app/.venv with Python 3.12, neo4j and
// msgspec (for its coverage upload tools); it is kept alive doing nothing.
// It depends on no other sandbox.
//
// Provision runs, with compile_timeout_sec,
//
//	bash <sandbox_scripts>/ossfuzz/compile_coverage.sh
//
// (the script rebuilds /out with clang's source-based coverage; there is
// no backup). Ready checks, once provisioned, that `python3 --version` says
// 3.12 and that python3 imports neo4j and msgspec; either failing fails at
// once, since waiting cannot change it. Nothing is published.
type CoverageInit struct {
	Generic
	Config CoverageConfig
}

// SandboxScripts: OpenSage's coverage build script.
func (c *CoverageInit) SandboxScripts() []string { return []string{"ossfuzz/compile_coverage.sh"} }

// Provision runs compile_coverage.sh.
func (c *CoverageInit) Provision(ctx context.Context, in *Instance) error {
	_, err := runStep(ctx, in, step{
		name:    "coverage build",
		cmd:     []string{"bash", scriptsDir(in) + "/ossfuzz/compile_coverage.sh"},
		timeout: time.Duration(c.Config.CompileTimeout),
	})
	return err
}

// python312 matches `python3 --version` of a Python 3.12.
var python312 = regexp.MustCompile(`\bPython 3\.12(\.|\s|$)`)

// Ready: python3 is 3.12 and imports neo4j and msgspec.
func (c *CoverageInit) Ready() wait.Strategy {
	return wait.ForFunc("python3 3.12 with neo4j and msgspec", checkCoveragePython).
		WithTimeout(2 * time.Minute).WithPollInterval(time.Second)
}

func checkCoveragePython(ctx context.Context, sb backend.Sandbox) error {
	run := func(argv ...string) (string, bool, error) {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: argv, Timeout: time.Minute})
		if err != nil {
			return "", false, err
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr)), res.ExitCode == 0, nil
	}
	version, ok, err := run("python3", "--version")
	switch {
	case err != nil:
		return err
	case !ok:
		return wait.Permanent(fmt.Errorf("python3 --version failed: %s (the coverage image needs Python 3.12)", lastLines(version, 5)))
	case !python312.MatchString(version):
		return wait.Permanent(fmt.Errorf("python3 is %q, want Python 3.12 (OpenSage's coverage image has it in /app/.venv)", version))
	}
	out, ok, err := run("python3", "-c", "import neo4j, msgspec; print('deps ok')")
	switch {
	case err != nil:
		return err
	case !ok:
		return wait.Permanent(fmt.Errorf("python3 cannot import neo4j and msgspec (the coverage image installs both):\n%s", lastLines(out, 10)))
	}
	return nil
}
