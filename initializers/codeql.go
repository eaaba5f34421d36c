package initializers

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// CodeQLType builds a CodeQL database of the project and extracts its call
// graph, as OpenSage's codeql initializer does.
const CodeQLType = "codeql"

// DefaultScriptTimeout bounds one provisioning script of the codeql, fuzz
// and coverage initializers (OpenSage's 3600 s), and is their default
// initializer_timeout_sec too.
const DefaultScriptTimeout = 3600 * time.Second

// CodeQLResultFiles are the call graph CSVs run_codeql.sh writes (direct
// calls, function pointer accesses, calls through expressions).
var CodeQLResultFiles = []string{"results.csv", "fp_accesses.csv", "expr_calls.csv"}

// CodeQLConfig is [sandbox.sandboxes.codeql.extra].
type CodeQLConfig struct {
	Common
	// CompileCommand builds the project for `codeql database create
	// --command`. Default: the config file's root [build] compile_command,
	// as in OpenSage; one of the two must be set.
	CompileCommand string `toml:"compile_command"`
	// CodeQLTimeout bounds run_codeql.sh. Default 3600 s.
	CodeQLTimeout Seconds `toml:"codeql_timeout_sec"`
	// ResultsDir is where run_codeql.sh writes the CSVs. Default
	// /shared/out/callgraph.
	ResultsDir string `toml:"results_dir"`
	// ImportDir is Neo4j's import folder; the CSVs are copied into its
	// codeql/ subfolder. Default /shared/neo4j/import (the neo4j
	// initializer's import_dir).
	ImportDir string `toml:"import_dir"`
}

// DefaultCompileCommand sets the compile command the config file's root
// [build] table gives; config.Config.DecodeExtra calls it before decoding
// the entry's [extra] table, whose compile_command wins.
func (c *CodeQLConfig) DefaultCompileCommand(cmd string) { c.CompileCommand = cmd }

// CodeQLFactory is the codeql initializer.
func CodeQLFactory() Factory {
	return Factory{
		NewConfig: func() any {
			return &CodeQLConfig{
				Common:        Common{InitializerTimeout: Seconds(DefaultScriptTimeout)},
				CodeQLTimeout: Seconds(DefaultScriptTimeout),
				ResultsDir:    "/shared/out/callgraph",
				ImportDir:     "/shared/neo4j/import",
			}
		},
		New: func(cfg any) (Initializer, error) {
			c := cfg.(*CodeQLConfig)
			if strings.TrimSpace(c.CompileCommand) == "" {
				return nil, invalidf("compile_command: empty: set compile_command in the config file's root [build] table (as OpenSage does) or in this table")
			}
			if c.CodeQLTimeout <= 0 {
				return nil, invalidf("codeql_timeout_sec: want a positive number of seconds (default 3600)")
			}
			for key, dir := range map[string]string{"results_dir": c.ResultsDir, "import_dir": c.ImportDir} {
				if !path.IsAbs(dir) {
					return nil, invalidf("%s %q: want an absolute path inside the sandbox", key, dir)
				}
			}
			return &CodeQLInit{Config: *c}, nil
		},
	}
}

// CodeQLInit is the codeql initializer for one entry. Its image is the
// entry's (default_image, as in OpenSage's template) and it is kept alive
// doing nothing; CodeQL itself comes from the session's sandbox scripts
// (<sandbox_scripts>/codeql/codeql: OpenSage's users unpack the CodeQL
// bundle there).
//
// Provision runs, with codeql_timeout_sec,
//
//	bash <sandbox_scripts>/callgraph/run_codeql.sh "<compile_command>"
//
// which creates the database and writes the call graph CSVs
// (CodeQLResultFiles) to results_dir, then copies each CSV out of
// results_dir into <import_dir>/codeql/, where the neo4j sandbox's LOAD CSV
// can read them. A missing CSV is an error.
//
// Not done: OpenSage then connects to Neo4j's "analysis" database and adds
// CG_CALL and CG_MAYBE_INDIRECT_CALL edges between the CPG's methods from
// the CSVs (its merge_joern_codeql.py). That needs a Bolt client, the CPG
// that OpenSage's joern initializer imports into Neo4j (this joern
// initializer does not), and OpenSage's matching rules; sandboxkit stops at
// staging the CSVs. Because sandboxkit provisions a sandbox only once its
// dependencies are ready, CodeQL runs after neo4j (and joern, when the
// session has one) instead of alongside them. Nothing is published.
type CodeQLInit struct {
	Generic
	Config CodeQLConfig
}

// DependsOn: neo4j (OpenSage asserts one exists) and joern when the
// session has one (OpenSage waits for it before the import).
func (c *CodeQLInit) DependsOn() []Dependency {
	return []Dependency{{Name: Neo4jType}, {Name: JoernType, Optional: true}}
}

// SandboxScripts: OpenSage's call graph script.
func (c *CodeQLInit) SandboxScripts() []string { return []string{"callgraph/run_codeql.sh"} }

// Provision runs run_codeql.sh and stages its CSVs for Neo4j.
func (c *CodeQLInit) Provision(ctx context.Context, in *Instance) error {
	out, err := runStep(ctx, in, step{
		name:    "CodeQL call graph",
		cmd:     []string{"bash", scriptsDir(in) + "/callgraph/run_codeql.sh", c.Config.CompileCommand},
		timeout: time.Duration(c.Config.CodeQLTimeout),
	})
	if err != nil {
		return err
	}
	in.Status("copying the call graph CSVs to " + path.Join(c.Config.ImportDir, "codeql"))
	for _, f := range CodeQLResultFiles {
		src, dst := path.Join(c.Config.ResultsDir, f), path.Join(c.Config.ImportDir, "codeql", f)
		if err := copyInSandbox(ctx, in.Sandbox, src, dst); err != nil {
			return &StepError{Sandbox: in.Name, Step: "copying the CodeQL results", Command: "copy " + src + " to " + dst,
				Err: fmt.Errorf("%w (run_codeql.sh exited 0)", err), Output: lastLines(out, stepTailLines)}
		}
	}
	return nil
}

// copyInSandbox copies file src to dst inside sb, through the host, so it
// works whether or not the two folders are on the same volume.
func copyInSandbox(ctx context.Context, sb backend.Sandbox, src, dst string) error {
	rc, err := sbfiles.ReadFile(ctx, sb, src)
	if err != nil {
		return err
	}
	defer rc.Close()
	return sbfiles.WriteFile(ctx, sb, dst, rc, 0o644)
}

// scriptsDir is where the session's sandbox scripts are inside the sandbox:
// the session's sandbox_scripts folder, else OpenSage's /sandbox_scripts
// (the image, or an entry's volume, may hold them there).
func scriptsDir(in *Instance) string {
	if in.SandboxScripts != "" {
		return strings.TrimSuffix(in.SandboxScripts, "/")
	}
	return "/sandbox_scripts"
}

// --- provisioning commands, shared by codeql, fuzz and coverage ---

// stepTailLines is how many of a failed command's last output lines its
// error carries.
const stepTailLines = 30

// stepTailBytes caps the output kept of one command: only its end matters.
const stepTailBytes = 1 << 20

// step is one command an initializer runs in its sandbox (OpenSage's
// run_command_in_container), with its own timeout.
type step struct {
	name    string // what it does, for errors and progress
	cmd     []string
	env     map[string]string // added to the sandbox's environment
	timeout time.Duration
}

// commandLine is the step's command as a shell would read it, env first.
func (s step) commandLine() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.env)) {
		parts = append(parts, k+"="+shellQuote(s.env[k]))
	}
	for _, a := range s.cmd {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// runStep runs s in the sandbox and returns the end of its output (stdout
// and stderr interleaved). A command that cannot be run, exits non-zero or
// outlives its timeout is a *StepError holding its last output lines.
func runStep(ctx context.Context, in *Instance, s step) (string, error) {
	in.Status(s.name + ": " + s.commandLine())
	var out tailBuffer
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Cmd: s.cmd, Env: s.env, Timeout: s.timeout, Stdout: &out, Stderr: &out})
	text := out.String()
	in.Logger.Debug("provisioning step", "step", s.name, "command", s.commandLine(), "output", lastLines(text, stepTailLines))
	e := &StepError{Sandbox: in.Name, Step: s.name, Command: s.commandLine(), Output: lastLines(text, stepTailLines)}
	switch {
	case err != nil:
		e.Err = err
	case res.TimedOut:
		e.Err = fmt.Errorf("timed out after %s", s.timeout)
	case res.ExitCode != 0:
		e.Err = fmt.Errorf("exit code %d", res.ExitCode)
	default:
		return text, nil
	}
	return text, e
}

// StepError is a provisioning command of an initializer that failed: the
// sandbox, the step, the command and the last lines of its output.
type StepError struct {
	Sandbox string // entry name
	Step    string // "CodeQL call graph", "AFL++ build", ...
	Command string // as a shell would read it
	Err     error  // how it failed: exit code, timeout, or why it could not run
	Output  string // the last lines of its output ("" for none)
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("sandbox %q: %s: %s: %v", e.Sandbox, e.Step, e.Command, e.Err)
	if e.Output == "" {
		return msg
	}
	return msg + "; last lines of its output:\n" + e.Output
}

func (e *StepError) Unwrap() error { return e.Err }

// tailBuffer keeps the last stepTailBytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stepTailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// shellQuote quotes s for sh when it holds anything but plain word
// characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+./:=@%,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
