package initializers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// FuzzType builds the project's fuzz targets with AFL++, as OpenSage's fuzz
// initializer does.
const FuzzType = "fuzz"

// Files the fuzz initializer reads and the folder it restores, inside the
// sandbox (OpenSage's paths: ARVO and OSS-Fuzz images).
const (
	ArvoScript   = "/bin/arvo"
	RunPoCScript = "/usr/local/bin/run_poc"
	FuzzOutDir   = "/out"
)

// FuzzVars are the variables compile_aflpp.sh is run with.
var FuzzVars = []string{"SANITIZER", "FUZZING_LANGUAGE", "ARCHITECTURE"}

// fuzzReadTimeout bounds reading the settings (OpenSage's 1200 s) and
// restoring /out.
const fuzzReadTimeout = 1200 * time.Second

// FuzzConfig is [sandbox.sandboxes.fuzz.extra].
type FuzzConfig struct {
	Common
	// CompileTimeout bounds compile_aflpp.sh. Default 3600 s.
	CompileTimeout Seconds `toml:"compile_timeout_sec"`
}

// FuzzFactory is the fuzz initializer.
func FuzzFactory() Factory {
	return Factory{
		NewConfig: func() any {
			return &FuzzConfig{
				Common:         Common{InitializerTimeout: Seconds(DefaultScriptTimeout)},
				CompileTimeout: Seconds(DefaultScriptTimeout),
			}
		},
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*FuzzConfig)
			if c.CompileTimeout <= 0 {
				return nil, invalidf("compile_timeout_sec: want a positive number of seconds (default 3600)")
			}
			return &FuzzInit{Config: *c}, nil
		},
	}
}

// FuzzInit is the fuzz initializer for one entry. Its image is the entry's
// (an OSS-Fuzz builder image of the project, e.g. ARVO's; OpenSage's example
// uses default_image) and it is kept alive doing nothing.
//
// Provision waits for main, then finds SANITIZER, FUZZING_LANGUAGE and
// ARCHITECTURE: from the `export NAME=value` lines of /bin/arvo, or, when
// the sandbox has no /bin/arvo, from the sandbox's environment, with the
// fuzz target read from /usr/local/bin/run_poc. A variable found nowhere is
// an error naming it. It then runs, with compile_timeout_sec,
//
//	SANITIZER=... FUZZING_LANGUAGE=... ARCHITECTURE=... bash <sandbox_scripts>/ossfuzz/compile_aflpp.sh
//
// (the script moves /out to /out.bak, clones and builds AFL++, and runs the
// project's build into a fresh /out). When the script fails, /out is
// restored from /out.bak. Nothing is published.
//
// Differences from OpenSage: its fallback runs `echo $NAME` in the main
// sandbox and reads main's run_poc, but an initializer here reaches only
// its own sandbox, so the fuzz sandbox's environment and run_poc are read
// (in OpenSage's setups both sandboxes run the same image); an empty
// variable is an error there as well, where OpenSage would pass it on
// empty. The restore runs only when /out.bak exists, where OpenSage's
// `rm -rf /out && mv /out.bak /out` would delete /out when the script
// failed before moving it aside. The fuzz target (FUZZ_TARGET) is only
// logged: OpenSage finds it and does not use it either.
type FuzzInit struct {
	Generic
	Config FuzzConfig
}

// DependsOn: main (OpenSage asserts one exists and waits for it).
func (f *FuzzInit) DependsOn() []Dependency { return []Dependency{{Name: MainType}} }

// SandboxScripts: OpenSage's AFL++ build script.
func (f *FuzzInit) SandboxScripts() []string { return []string{"ossfuzz/compile_aflpp.sh"} }

// Provision reads the build settings and builds the fuzz targets with
// AFL++, restoring /out when that fails.
func (f *FuzzInit) Provision(ctx context.Context, in *Instance) error {
	s, err := readFuzzSettings(ctx, in)
	if err != nil {
		return err
	}
	in.Logger.Info("fuzz settings", "from", s.from, "env", s.env, "fuzz_target", s.target)
	_, err = runStep(ctx, in, step{
		name:    "AFL++ build",
		cmd:     []string{"bash", scriptsDir(in) + "/ossfuzz/compile_aflpp.sh"},
		env:     s.env,
		timeout: time.Duration(f.Config.CompileTimeout),
	})
	if err == nil {
		return nil
	}
	return errors.Join(err, restoreOut(ctx, in))
}

// fuzzSettings is what compile_aflpp.sh is run with, and where it came
// from.
type fuzzSettings struct {
	env    map[string]string // FuzzVars
	target string            // FUZZ_TARGET ("": none found)
	from   string
}

// readFuzzSettings reads /bin/arvo, or the sandbox's environment and
// run_poc when there is no /bin/arvo.
func readFuzzSettings(ctx context.Context, in *Instance) (fuzzSettings, error) {
	const stepName = "reading the fuzz settings"
	ctx, cancel := context.WithTimeout(ctx, fuzzReadTimeout)
	defer cancel()
	in.Status(stepName)
	arvo, arvoErr := readSandboxFile(ctx, in.Sandbox, ArvoScript)
	if arvoErr == nil {
		s, err := parseArvo(arvo)
		if err != nil {
			return s, &StepError{Sandbox: in.Name, Step: stepName, Command: "read " + ArvoScript, Err: err}
		}
		return s, nil
	}
	in.Logger.Info("no ARVO script: reading the fuzz settings from the environment", "err", arvoErr)
	// Not runStep: its error would quote the environment, secrets and all.
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: []string{"env"}, Timeout: fuzzReadTimeout})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit code %d: %s", res.ExitCode, lastLines(string(res.Stderr), stepTailLines))
	}
	if err != nil {
		return fuzzSettings{}, &StepError{Sandbox: in.Name, Step: stepName, Command: "env", Err: err}
	}
	s := fuzzSettings{env: map[string]string{}, from: "the sandbox's environment (no " + ArvoScript + ")"}
	for line := range strings.Lines(string(res.Stdout)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			for _, name := range FuzzVars {
				if k == name {
					s.env[k] = strings.TrimSpace(v)
				}
			}
		}
	}
	for _, name := range FuzzVars {
		if s.env[name] == "" {
			return s, &StepError{Sandbox: in.Name, Step: stepName, Command: "env",
				Err: fmt.Errorf("%s is not set: there is no %s (%v) and the sandbox's environment has no %s (set it in the entry's environment, or use an ARVO image)",
					name, ArvoScript, arvoErr, name)}
		}
	}
	runPoC, err := readSandboxFile(ctx, in.Sandbox, RunPoCScript)
	if err != nil {
		return s, &StepError{Sandbox: in.Name, Step: stepName, Command: "read " + RunPoCScript,
			Err: fmt.Errorf("%w (without %s the fuzz target is read there, as OpenSage does)", err, ArvoScript)}
	}
	s.target = fuzzTarget(runPoC)
	return s, nil
}

// readSandboxFile returns a small file of the sandbox.
func readSandboxFile(ctx context.Context, sb backend.Sandbox, name string) (string, error) {
	rc, err := sbfiles.ReadFile(ctx, sb, name)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	return string(b), err
}

// parseArvo reads FuzzVars from an ARVO script's `export NAME=value` lines
// (the last one of a name wins; surrounding double quotes are dropped) and
// the fuzz target from its first run line.
func parseArvo(script string) (fuzzSettings, error) {
	s := fuzzSettings{env: map[string]string{}, target: fuzzTarget(script), from: ArvoScript}
	for line := range strings.Lines(script) {
		line = strings.TrimRight(line, "\r\n")
		for _, name := range FuzzVars {
			if v, ok := strings.CutPrefix(line, "export "+name+"="); ok {
				s.env[name] = strings.Trim(strings.TrimSpace(v), `"`)
			}
		}
	}
	for _, name := range FuzzVars {
		if _, ok := s.env[name]; !ok {
			return s, fmt.Errorf("%s has no \"export %s=\" line", ArvoScript, name)
		}
	}
	return s, nil
}

// fuzzTargetRE is a run line of ARVO's and OSS-Fuzz's scripts:
// "  /out/<target> /tmp/poc".
var fuzzTargetRE = regexp.MustCompile(`^\s+/out/(\S+)\s+/tmp/poc`)

// fuzzTarget returns the target of the first run line ("" for none).
func fuzzTarget(script string) string {
	for line := range strings.Lines(script) {
		if m := fuzzTargetRE.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}
