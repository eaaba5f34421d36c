package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
)

// Exit codes sbx itself chooses; run and exec otherwise return the
// command's own.
const (
	exitError       = 1
	exitInterrupted = 130 // 128 + SIGINT, as shells report it
	exitBrokenPipe  = 141 // 128 + SIGPIPE: stdout's reader went away
)

// stoppedStatus is sbx's exit status when ctx was cancelled: 128 + the
// signal's number, 141 when stdout's reader went away.
func stoppedStatus(ctx context.Context) int {
	cause := context.Cause(ctx)
	if s, ok := errors.AsType[interrupted](cause); ok {
		return s.exitStatus()
	}
	if _, ok := errors.AsType[outputGone](cause); ok {
		return exitBrokenPipe
	}
	return exitInterrupted
}

// outputGone is the cancel cause when writing to stdout failed.
type outputGone struct{ err error }

func (e outputGone) Error() string { return "standard output closed: " + e.err.Error() }

// stopOnWriteError passes writes through and stops the command on the first
// failed one.
type stopOnWriteError struct {
	w    io.Writer
	stop context.CancelCauseFunc
}

func (s *stopOnWriteError) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.stop(outputGone{err})
	}
	return n, err
}

// cleanupTimeout bounds removing a sandbox after the command ended, also
// when sbx was interrupted.
const cleanupTimeout = 30 * time.Second

// run is sbx without the process around it: tests call it in-process. It
// returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	// A reader of stdout that went away (sbx exec ID -- yes | head -1)
	// stops sbx like Ctrl-C: the command must not keep running unread.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	stdout = &stopOnWriteError{w: stdout, stop: stop}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	if ee, ok := errors.AsType[*exitCode](err); ok {
		return ee.code
	}
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "sbx: interrupted (%v)\n", context.Cause(ctx))
		return stoppedStatus(ctx)
	}
	a.printError(err)
	return exitError
}

// exitCode ends sbx with a code, having printed whatever had to be said.
type exitCode struct{ code int }

func (e *exitCode) Error() string { return fmt.Sprintf("exit code %d", e.code) }

// app holds the global flags and the streams of one sbx invocation.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	configPath  string
	backendName string
	json        bool
	logLevel    string
	progress    string

	logger *slog.Logger
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sbx",
		Short: "Run commands and agent tools in sandboxes",
		Long: `sbx makes sandboxes from a sandboxkit config and runs commands in them.

The config is --config, else $SBX_CONFIG, else ./sandbox.toml, else a built-in
default with one "main" sandbox on the local backend.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if _, err := newProgress(a.progress, io.Discard); err != nil {
				return err
			}
			return a.setupLogger()
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.configPath, "config", "", "config file (default $SBX_CONFIG, else ./sandbox.toml, else the built-in default)")
	pf.StringVar(&a.backendName, "backend", "", "backend to use instead of the config's [sandbox] backend")
	pf.BoolVar(&a.json, "json", false, "print JSON instead of tables")
	pf.StringVar(&a.logLevel, "log-level", "warn", "log level on stderr: debug, info, warn or error")
	pf.StringVar(&a.progress, "progress", progressAuto, "image pull and build progress on stderr: auto (bars on a terminal, else plain lines), tty, plain or none")

	root.AddCommand(
		a.runCmd(),
		a.upCmd(),
		a.downCmd(),
		a.statusCmd(),
		a.lsCmd(),
		a.execCmd(),
		a.shellCmd(),
		a.cpCmd(),
		a.rmCmd(),
		a.snapshotCmd(),
		a.egressCmd(),
		a.secretCmd(),
		a.forkCmd(),
		a.restoreCmd(),
		a.moveCmd(),
		a.gcCmd(),
		a.poolCmd(),
		a.configCmd(),
		a.toolsCmd(),
		a.withBenchExec(a.benchCmd()),
		a.serveCmd(),
		a.mcpCmd(),
	)
	return root
}

func (a *app) setupLogger() error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(a.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", a.logLevel)
	}
	a.logger = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))
	return nil
}

// printError writes err as "sbx: ..." lines on stderr.
func (a *app) printError(err error) {
	for line := range strings.SplitSeq(strings.TrimRight(err.Error(), "\n"), "\n") {
		fmt.Fprintf(a.stderr, "sbx: %s\n", line)
	}
}

// loadConfig loads the config named by --config (or found by the usual
// search), applies --backend and prints the config's warnings. A config
// that uses a backend this build does not link is handed over to sbx-full
// (runFull) before anything is printed.
func (a *app) loadConfig(path string) (*config.Config, error) {
	cfg, err := registry().LoadConfig(path)
	if err != nil {
		return nil, handOverElsewhere(err)
	}
	if a.backendName != "" {
		if err := cfg.SetBackend(a.backendName); err != nil {
			return nil, fmt.Errorf("--backend: %w", handOverElsewhere(err))
		}
	}
	if cfg.Sandbox.Backend == "" {
		cfg.Sandbox.Backend = config.DefaultBackend
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	// Checked here too, not only by Open, so config check (which opens
	// nothing) reports it.
	if cfg.Sandbox.Backend != config.AutoBackend {
		if _, err := registry().Lookup(cfg.Sandbox.Backend); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// open loads the config and opens its backend. The caller closes the
// backend.
func (a *app) open(ctx context.Context) (*config.Config, backend.Backend, error) {
	cfg, err := a.loadConfig(a.configPath)
	if err != nil {
		return nil, nil, err
	}
	return a.openLoaded(ctx, cfg)
}

// openLaunching is open for a command that launches the config's entries
// (sbx run or sbx up naming none): a config with no sandbox entries (valid,
// for sbx config check) fails before any backend is opened.
func (a *app) openLaunching(ctx context.Context) (*config.Config, backend.Backend, error) {
	cfg, err := a.loadConfig(a.configPath)
	if err != nil {
		return nil, nil, err
	}
	if err := cfg.NothingToLaunch(); err != nil {
		return nil, nil, err
	}
	return a.openLoaded(ctx, cfg)
}

// openLoaded opens the backend of the loaded config cfg.
func (a *app) openLoaded(ctx context.Context, cfg *config.Config) (*config.Config, backend.Backend, error) {
	b, err := cfg.Open(ctx, a.logger)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Chosen != "" {
		fmt.Fprintf(a.stderr, "backend auto: using %s\n", cfg.Chosen)
		if slices.Contains(cfg.Warnings, config.LocalNotice) {
			fmt.Fprintf(a.stderr, "warning: %s\n", config.LocalNotice)
		}
	}
	return cfg, b, nil
}

// resolve finds a sandbox by ID, or by entry name when exactly one live
// sandbox has that name.
func resolve(ctx context.Context, b backend.Backend, ref string) (backend.Sandbox, error) {
	sb, err := b.Get(ctx, ref)
	if err == nil {
		return sb, nil
	}
	if !errors.Is(err, backend.ErrNotFound) && !errors.Is(err, backend.ErrInvalidConfig) {
		return nil, err
	}
	infos, lerr := b.List(ctx, backend.Filter{Name: ref})
	if lerr != nil {
		return nil, lerr
	}
	now := time.Now()
	var ids []string
	for _, info := range infos {
		if !info.Expired(now) && info.State != backend.StateExited {
			ids = append(ids, info.ID)
		}
	}
	switch len(ids) {
	case 0:
		return nil, fmt.Errorf("no sandbox with ID or name %q (see sbx ls): %w", ref, backend.ErrNotFound)
	case 1:
		return b.Get(ctx, ids[0])
	}
	return nil, fmt.Errorf("name %q matches %d sandboxes (%s): pass an ID", ref, len(ids), strings.Join(ids, ", "))
}

// create makes a sandbox from spec, showing its image pulls and builds on
// stderr as --progress says.
func (a *app) create(ctx context.Context, b backend.Backend, spec backend.Spec) (backend.Sandbox, error) {
	return showingProgress(a, spec, func(spec backend.Spec) (backend.Sandbox, error) { return b.Create(ctx, spec) })
}

// showingProgress calls f with spec set to show its image pulls and
// builds on stderr as --progress says.
func showingProgress[T any](a *app, spec backend.Spec, f func(backend.Spec) (T, error)) (T, error) {
	sink, err := newProgress(a.progress, a.stderr)
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(withProgress(spec, sink))
	sink.close()
	return v, err
}

// destroy removes sb even when ctx was cancelled (by Ctrl-C), within
// cleanupTimeout.
func destroy(ctx context.Context, sb backend.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return sb.Destroy(ctx)
}

// discard removes sb as destroy does, or has its platform remove it
// (backend.Discarder) without waiting for the removal.
func discard(ctx context.Context, sb backend.Sandbox) error {
	d, ok := backend.As[backend.Discarder](sb)
	if !ok {
		return destroy(ctx, sb)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return d.Discard(ctx)
}

// splitCommand returns the command after a sandbox reference, dropping the
// "--" that separates them (flag parsing stops at the reference, so the
// "--" reaches the arguments).
func splitCommand(args []string) []string {
	if len(args) > 0 && args[0] == "--" {
		return args[1:]
	}
	return args
}

// usageError reports a mistake in the command line.
func usageError(cmd *cobra.Command, format string, args ...any) error {
	return fmt.Errorf("%s: %s (see %s --help)", cmd.CommandPath(), fmt.Sprintf(format, args...), cmd.CommandPath())
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError(cmd, "want %s, got %d argument(s)", what, len(args))
		}
		return nil
	}
}

// checkTimeout refuses a negative --timeout, which would otherwise mean no
// timeout at all without a word.
func checkTimeout(cmd *cobra.Command, d time.Duration) error {
	if d < 0 {
		return usageError(cmd, "--timeout %s: a timeout must not be negative (0 means none)", d)
	}
	return nil
}
