package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

func (a *app) runCmd() *cobra.Command {
	var (
		image, entry string
		timeout      time.Duration
		keep, stdin  bool
		useTTY       bool
		tty          ttyOptions
	)
	cmd := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run a command in a new sandbox and remove it afterwards",
		Long: `Run makes a sandbox from a config entry, runs CMD in it with its output
streamed to this terminal, removes the sandbox and exits with CMD's exit code,
like docker run --rm.

A timeout kills everything CMD started and exits 124. Ctrl-C kills CMD,
removes the sandbox and exits 130.`,
		Example: `  sbx run -- echo hello
  sbx run --timeout 10s --image python:3.12 -- python -c 'print(1)'
  tar c src | sbx run -i -- sh -c 'tar x && make -C src'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(cmd, "missing command (sbx run -- CMD...)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTimeout(cmd, timeout); err != nil {
				return err
			}
			if useTTY && timeout > 0 {
				return usageError(cmd, "--timeout does not combine with -t")
			}
			return a.runSandbox(cmd.Context(), runOptions{
				entry: entry, image: image, timeout: timeout, keep: keep, stdin: stdin,
				argv: args, tty: useTTY, ttyOpts: tty,
			})
		},
	}
	// Everything after the first argument belongs to CMD.
	cmd.Flags().SetInterspersed(false)
	f := cmd.Flags()
	f.StringVar(&image, "image", "", "image to use instead of the entry's")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long and exit 124 (default: no timeout)")
	f.BoolVar(&keep, "keep", false, "keep the sandbox and print its ID on stderr")
	f.StringVar(&entry, "sandbox", "", `config entry to make the sandbox from (default "main", or the only entry)`)
	f.BoolVarP(&stdin, "interactive", "i", false, "connect stdin to the command")
	ttyFlags(cmd, &useTTY, &tty)
	return cmd
}

type runOptions struct {
	entry, image string
	timeout      time.Duration
	keep, stdin  bool
	argv         []string
	tty          bool
	ttyOpts      ttyOptions
}

func (a *app) runSandbox(ctx context.Context, o runOptions) error {
	open := a.open
	if o.entry == "" {
		open = a.openLaunching
	}
	cfg, b, err := open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()

	name, err := defaultEntry(cfg, o.entry)
	if err != nil {
		return err
	}
	self := ""
	if !o.keep {
		// Owned by this process: if sbx dies before removing it, sbx gc
		// does. A kept sandbox is meant to outlive sbx.
		self = owner.Self()
	}
	if e, _ := cfg.Entry(name); e != nil && e.Pool != nil && o.image == "" {
		return a.runPooled(ctx, cfg, b, name, self, o)
	}
	spec, err := cfg.Spec(name)
	if err != nil {
		return err
	}
	if o.image != "" {
		spec.Image = o.image
	}
	spec.Owner = self
	if r, ok := backend.AsBackend[backend.OneShotRunner](b); ok && !o.keep && !o.tty {
		if req := a.runRequest(o); r.CanRunOnce(spec, req) {
			// The command is the sandbox's first process: no agent starts
			// for one command.
			res, err := showingProgress(a, spec, func(spec backend.Spec) (backend.ExecResult, error) { return r.RunOnce(ctx, spec, req) })
			return a.exitStatus(ctx, res, err, o.timeout)
		}
	}
	// The engine removes it once it is killed (where the backend can
	// arrange that), so sbx exits without waiting for the removal.
	spec.AutoRemove = !o.keep
	sb, err := a.create(ctx, b, spec)
	if err != nil {
		return err
	}
	a.logger.Debug("sandbox created", "id", sb.ID(), "entry", name)
	if o.keep {
		defer fmt.Fprintln(a.stderr, sb.ID())
	} else {
		defer func() {
			if err := discard(ctx, sb); err != nil {
				a.printError(fmt.Errorf("removing sandbox %s: %w", sb.ID(), err))
			}
		}()
	}
	return a.runIn(ctx, sb, o)
}

// runPooled is sbx run for an entry with a pool: a ready sandbox is claimed
// when a keeper has one, else one is made as the pool's keeper makes them.
func (a *app) runPooled(ctx context.Context, cfg *config.Config, b backend.Backend, name, self string, o runOptions) error {
	p, err := (&session.Launcher{Config: cfg, Logger: a.logger}).NewPool(b, name, nil)
	if err != nil {
		return err
	}
	c, err := p.Acquire(ctx, session.Binding{Owner: self})
	if err != nil {
		return err
	}
	a.logger.Debug("sandbox claimed", "id", c.ID(), "entry", name, "warm", c.Warm, "pool", p.Key())
	if o.keep {
		defer fmt.Fprintln(a.stderr, c.ID())
	} else {
		defer func() {
			c.Release()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if err := p.Close(cctx); err != nil {
				a.printError(fmt.Errorf("removing sandbox %s: %w", c.ID(), err))
			}
		}()
	}
	return a.runIn(ctx, c, o)
}

// runIn runs sbx run's command in sb: on a terminal with -t (detaching
// only with --keep: otherwise the sandbox goes when sbx does), else as a
// plain command.
func (a *app) runIn(ctx context.Context, sb backend.Sandbox, o runOptions) error {
	if o.tty {
		if !o.keep {
			o.ttyOpts.detachKeys = ""
		}
		o.ttyOpts.ref = sb.ID()
		return a.interactive(ctx, sb, backend.TerminalRequest{Cmd: o.argv}, "", o.ttyOpts)
	}
	return a.execute(ctx, sb, o.argv, o.timeout, o.stdin)
}

// execute runs argv in sb with the terminal's streams and turns its end into
// sbx's exit code.
// The command goes through the agent the sandbox serves itself when it has
// one (a connect instead of the backend's exec: lite's runc exec costs
// ~50 ms); sbx starts no agent for one command.
func (a *app) execute(ctx context.Context, sb backend.Sandbox, argv []string, timeout time.Duration, stdin bool) error {
	req := a.runRequest(runOptions{argv: argv, timeout: timeout, stdin: stdin})
	if _, ok := backend.As[backend.AgentDialer](sb); ok {
		c, err := sbxd.Wrap(ctx, sb, sbxd.WithDialOnly(), sbxd.WithLogger(a.logger))
		if err != nil {
			return &exitCode{stoppedStatus(ctx)}
		}
		defer c.Close()
		if info, err := c.Agent(ctx); err == nil {
			a.logger.Debug("the command goes through the sandbox's own agent", "sandbox", sb.ID(), "agent_pid", info.PID)
		}
		sb = c
	}
	res, err := sb.Exec(ctx, req)
	return a.exitStatus(ctx, res, err, timeout)
}

// runRequest is the request of sbx run's (or exec's) command: the
// terminal's streams, stdin only when asked for.
func (a *app) runRequest(o runOptions) backend.ExecRequest {
	req := backend.ExecRequest{Cmd: o.argv, Stdout: a.stdout, Stderr: a.stderr, Timeout: o.timeout}
	if o.stdin {
		req.Stdin = a.stdin
	}
	return req
}

// exitStatus turns a command's end into sbx's exit code: the command's,
// 124 after a timeout, 130 or 143 when sbx was stopped.
func (a *app) exitStatus(ctx context.Context, res backend.ExecResult, err error, timeout time.Duration) error {
	switch {
	case err != nil && ctx.Err() != nil:
		return &exitCode{stoppedStatus(ctx)}
	case err != nil:
		return err
	case res.TimedOut:
		a.printError(fmt.Errorf("command timed out after %s", timeout))
		return &exitCode{backend.TimeoutExitCode}
	case res.ExitCode != 0:
		return &exitCode{res.ExitCode}
	}
	return nil
}

// defaultEntry picks the config entry sbx run uses: the one named, else
// "main", else the only one.
func defaultEntry(cfg *config.Config, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	names := cfg.SandboxNames()
	switch {
	case slices.Contains(names, "main"):
		return "main", nil
	case len(names) == 1:
		return names[0], nil
	case len(names) == 0:
		return "", cfg.NothingToLaunch()
	}
	return "", fmt.Errorf(`config has no "main" sandbox; pick one with --sandbox (entries: %s)`, strings.Join(names, ", "))
}
