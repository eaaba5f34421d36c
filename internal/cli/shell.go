package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// defaultShell starts bash where the image has it, else sh.
var defaultShell = []string{"/bin/sh", "-c", backend.DefaultShellScript}

// defaultDetachKeys are docker's: Ctrl-P then Ctrl-Q.
const defaultDetachKeys = "ctrl-p,ctrl-q"

func (a *app) shellCmd() *cobra.Command {
	var (
		o         ttyOptions
		attach    string
		list      bool
		user, dir string
	)
	cmd := &cobra.Command{
		Use:   "shell [flags] ID|NAME [-- CMD [ARG...]]",
		Short: "Open an interactive terminal in a sandbox",
		Long: `Shell runs a shell (bash where the image has it, else sh), or CMD, on a
pseudo-terminal in a sandbox and connects it to this terminal, like
docker exec -it: raw mode, Ctrl-C goes to the program, window resizes follow,
and sbx exits with the program's exit code.

The detach keys (default Ctrl-P Ctrl-Q) leave the program running; sbx prints
the terminal's ID, and --attach ID connects to it again, replaying its most
recent output first. Detached terminals live as long as the sandbox's agent:
the one a sandbox starts itself (lite; native and remotedocker sandboxes
running as root) outlives sbx. If sbx is killed or its terminal closes, the
program is killed.`,
		Example: `  sbx shell main
  sbx shell 3f9c2a -- python3
  sbx shell --list main
  sbx shell --attach 5d1e0c7a main`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(cmd, "missing sandbox ID or name")
			}
			if attach != "" && len(args) > 1 {
				return usageError(cmd, "--attach takes no command")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			_, b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			sb, err := resolve(ctx, b, args[0])
			if err != nil {
				return err
			}
			if list {
				return a.listTerminals(ctx, sb)
			}
			argv := splitCommand(args[1:])
			if len(argv) == 0 {
				argv = defaultShell
			}
			o.ref = args[0]
			return a.interactive(ctx, sb, backend.TerminalRequest{Cmd: argv, User: user, WorkDir: dir}, attach, o)
		},
	}
	cmd.Flags().SetInterspersed(false)
	f := cmd.Flags()
	f.StringVar(&attach, "attach", "", "connect to a detached terminal of the sandbox (see --list)")
	f.BoolVar(&list, "list", false, "list the sandbox's terminals")
	f.StringVarP(&user, "user", "u", "", "run as this user (name, uid, name:group)")
	f.StringVarP(&dir, "workdir", "w", "", "working directory in the sandbox")
	f.StringVar(&o.detachKeys, "detach-keys", defaultDetachKeys, "key sequence that detaches, leaving the program running (empty: none)")
	return cmd
}

// ttyFlags adds -t and --detach-keys.
func ttyFlags(cmd *cobra.Command, use *bool, o *ttyOptions) {
	cmd.Flags().BoolVarP(use, "tty", "t", false, "run the command on a terminal connected to this one (raw mode, Ctrl-C and resizes reach it; see sbx shell)")
	cmd.Flags().StringVar(&o.detachKeys, "detach-keys", defaultDetachKeys, "with -t: key sequence that detaches, leaving the command running (empty: none)")
}

// ttyOptions are the flags of the commands that connect a terminal.
type ttyOptions struct {
	detachKeys string
	// ref is how the user named the sandbox, for the attach hint.
	ref string
}

// terminaler returns sb's terminals: through the agent the sandbox serves
// itself when it has one, else through an agent started for this sbx, else
// the backend's own terminal. outlives says whether a terminal outlives
// this sbx (only the sandbox's own agent keeps it).
func (a *app) terminaler(ctx context.Context, sb backend.Sandbox) (tr backend.Terminaler, outlives bool, done func(), err error) {
	opts := []sbxd.Option{sbxd.WithLogger(a.logger)}
	if _, ok := backend.As[backend.AgentDialer](sb); ok {
		opts = append(opts, sbxd.WithDialOnly())
	}
	c, err := sbxd.Wrap(ctx, sb, opts...)
	if err != nil {
		return nil, false, nil, err
	}
	info, err := c.Agent(ctx)
	return c, err == nil && info.Dialled, func() { c.Close() }, nil
}

func (a *app) listTerminals(ctx context.Context, sb backend.Sandbox) error {
	tr, outlives, done, err := a.terminaler(ctx, sb)
	if err != nil {
		return err
	}
	defer done()
	if !outlives {
		return fmt.Errorf("sandbox %s keeps no terminals: %w", sb.ID(), backend.ErrNotDetachable)
	}
	list, err := tr.Terminals(ctx)
	if err != nil {
		return err
	}
	if a.json {
		return printJSON(a.stdout, list)
	}
	w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TERMINAL\tSTATE\tATTACHED\tSTARTED\tCOMMAND")
	for _, t := range list {
		state := "running"
		if !t.Running {
			state = fmt.Sprintf("exited (%d)", t.ExitCode)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", t.ID, state, t.Attached, t.Started.Format(time.DateTime), strings.Join(t.Cmd, " "))
	}
	return w.Flush()
}

// interactive connects this terminal to a program on a terminal in sb (a
// new one, or terminal attach) until the program ends, the detach keys
// are typed, or sbx is stopped (which kills the program).
func (a *app) interactive(ctx context.Context, sb backend.Sandbox, req backend.TerminalRequest, attach string, o ttyOptions) error {
	in, ok := a.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return errors.New("the input is not a terminal: -t and sbx shell need one (drop -t to pipe input)")
	}
	keys, err := parseDetachKeys(o.detachKeys)
	if err != nil {
		return err
	}
	size := func() backend.TermSize {
		for _, f := range []any{a.stdout, in} {
			if f, ok := f.(*os.File); ok {
				if w, h, err := term.GetSize(int(f.Fd())); err == nil {
					return backend.TermSize{Rows: h, Cols: w}
				}
			}
		}
		return backend.TermSize{}
	}
	tr, outlives, done, err := a.terminaler(ctx, sb)
	if err != nil {
		return err
	}
	defer done()
	if !outlives {
		if attach != "" {
			return fmt.Errorf("sandbox %s keeps no terminals: %w", sb.ID(), backend.ErrNotDetachable)
		}
		// A detached terminal would end with this sbx: no detaching.
		keys = nil
	}
	var t backend.Terminal
	if attach != "" {
		t, err = tr.AttachTerminal(ctx, attach, size())
	} else {
		req.Size = size()
		t, err = tr.Terminal(ctx, req)
	}
	if err != nil {
		return err
	}
	defer t.Close()
	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		t.Kill(context.WithoutCancel(ctx))
		return fmt.Errorf("raw mode: %w", err)
	}
	defer term.Restore(int(in.Fd()), old)

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	detached := make(chan struct{})
	go func() {
		copyInput(t, in, keys, func() { close(detached) })
	}()
	output := make(chan error, 1)
	go func() {
		_, err := io.Copy(a.stdout, t)
		output <- err
	}()
	for {
		select {
		case <-winch:
			if s := size(); s.Rows > 0 {
				t.Resize(ctx, s)
			}
		case err := <-output:
			term.Restore(int(in.Fd()), old)
			if code, ok := t.ExitCode(); ok {
				if code != 0 {
					return &exitCode{code}
				}
				return nil
			}
			if err == nil {
				err = errors.New("the terminal's output ended without an exit status")
			}
			return err
		case <-detached:
			term.Restore(int(in.Fd()), old)
			fmt.Fprintf(a.stderr, "\ndetached from terminal %s (sbx shell --attach %s %s)\n", t.ID(), t.ID(), o.ref)
			return nil
		case <-ctx.Done():
			// The caller went away (Ctrl-C reaches the program as a key
			// in raw mode, so this is a signal from elsewhere): nothing
			// is left running.
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			t.Kill(kctx)
			cancel()
			return &exitCode{stoppedStatus(ctx)}
		}
	}
}

// copyInput sends what is typed to t until the detach keys come (then
// detach is called) or the input ends. A prefix of the detach keys is held
// back until the next key shows whether it completes them.
func copyInput(t backend.Terminal, in io.Reader, keys []byte, detach func()) {
	buf := make([]byte, 4096)
	var held, out []byte
	for {
		n, err := in.Read(buf)
		out = out[:0]
		for _, b := range buf[:n] {
			held = append(held, b)
			for len(held) > 0 && !bytes.HasPrefix(keys, held) {
				out = append(out, held[0])
				held = held[1:]
			}
			if len(keys) > 0 && len(held) == len(keys) {
				t.Write(out)
				detach()
				return
			}
		}
		if len(out) > 0 {
			if _, werr := t.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// parseDetachKeys reads docker's --detach-keys syntax: a comma-separated
// list of single characters and ctrl-X (X a letter or one of @[\]^_).
func parseDetachKeys(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	var keys []byte
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		switch {
		case len(k) == 1:
			keys = append(keys, k[0])
		case len(k) == 6 && strings.HasPrefix(strings.ToLower(k), "ctrl-"):
			c := k[5]
			switch {
			case c >= 'a' && c <= 'z':
				keys = append(keys, c-'a'+1)
			case c >= '@' && c <= '_':
				keys = append(keys, c-'@')
			default:
				return nil, fmt.Errorf("--detach-keys: %q: want ctrl-<letter> or one of ctrl-@ ctrl-[ ctrl-\\ ctrl-] ctrl-^ ctrl-_", k)
			}
		default:
			return nil, fmt.Errorf("--detach-keys: %q: want one character or ctrl-<key>, comma-separated (e.g. ctrl-p,ctrl-q)", k)
		}
	}
	return keys, nil
}
