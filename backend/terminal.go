package backend

import (
	"context"
	"errors"
	"io"
	"maps"
	"time"
)

// DefaultShellScript starts bash where the sandbox has it, else sh: what
// a terminal runs when it is given no command (sbx shell, sbx serve's
// WebSocket terminal). Run it with /bin/sh -c.
const DefaultShellScript = "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh"

// TermSize is a terminal's size in character cells.
type TermSize struct {
	Rows, Cols int
}

// TerminalRequest starts a program on a pseudo-terminal in a sandbox.
type TerminalRequest struct {
	// ID names the terminal, for attaching again later; empty: one is
	// chosen.
	ID  string
	Cmd []string
	// Env is added to the sandbox's environment (TERM defaults to xterm).
	Env     map[string]string
	WorkDir string
	User    string
	// Size is the initial size; zero: 24x80.
	Size TermSize
}

// Terminal is a client's view of a program on a pseudo-terminal. Reads
// return its output (on a terminal, stdout and stderr are one stream),
// writes are typed input: raw bytes, so "\x03" is Ctrl-C and "\r" is
// Enter. Read returns io.EOF once the program has ended and all its output
// was read; ExitCode then says how it ended.
type Terminal interface {
	io.ReadWriter
	// ID names the terminal for Terminaler.AttachTerminal.
	ID() string
	// Resize changes the terminal's size (the program gets SIGWINCH).
	Resize(ctx context.Context, size TermSize) error
	// ExitCode is the program's exit status once Read returned io.EOF;
	// ok is false before.
	ExitCode() (code int, ok bool)
	// Kill ends the program (its session is hung up and killed).
	Kill(ctx context.Context) error
	// Close detaches this client. Where the terminal outlives its client
	// (Terminaler.Detachable) the program keeps running; elsewhere it is
	// killed.
	Close() error
}

// TerminalInfo describes a terminal a sandbox keeps.
type TerminalInfo struct {
	ID       string
	Cmd      []string
	Running  bool
	ExitCode int
	// Attached is how many clients are attached now.
	Attached int
	Started  time.Time
	Size     TermSize
}

// Terminaler is implemented by sandboxes that run programs on a
// pseudo-terminal (sbx shell, exec -it, sbx serve's terminal endpoint).
type Terminaler interface {
	Terminal(ctx context.Context, req TerminalRequest) (Terminal, error)
	// Detachable reports whether terminals outlive their client, so that
	// AttachTerminal and Terminals work.
	Detachable() bool
	// AttachTerminal attaches to terminal id again: its output starts with
	// the most recent output the sandbox kept. A size > 0 resizes it.
	// Unknown ids fail with ErrNotFound.
	AttachTerminal(ctx context.Context, id string, size TermSize) (Terminal, error)
	// Terminals lists the sandbox's terminals, running and recently ended.
	Terminals(ctx context.Context) ([]TerminalInfo, error)
}

// ErrNotDetachable: the sandbox's terminals end with their client, so
// there is nothing to attach to.
var ErrNotDetachable = errors.New("terminals here end with their client (detaching needs an agent the sandbox runs itself, as lite sandboxes and native or remotedocker ones running as root have)")

// Check refuses a request without a command.
func (r TerminalRequest) Check() error {
	if len(r.Cmd) == 0 || r.Cmd[0] == "" {
		return InvalidConfigf("terminal: no command")
	}
	return nil
}

// EnvWithTerm returns r.Env with TERM=xterm added unless r.Env sets TERM.
func (r TerminalRequest) EnvWithTerm() map[string]string {
	env := map[string]string{"TERM": "xterm"}
	maps.Copy(env, r.Env)
	return env
}

// SizeOrDefault returns r.Size, or 24x80 where it is not set.
func (r TerminalRequest) SizeOrDefault() TermSize {
	if r.Size.Rows <= 0 || r.Size.Cols <= 0 {
		return TermSize{Rows: 24, Cols: 80}
	}
	return r.Size
}

// TerminalsEndWithClient is embedded by sandboxes whose own terminals end
// with their client (a stream of the backend's): they are not detachable,
// and there are none to list.
type TerminalsEndWithClient struct{}

// Detachable reports false.
func (TerminalsEndWithClient) Detachable() bool { return false }

// AttachTerminal fails with ErrNotDetachable.
func (TerminalsEndWithClient) AttachTerminal(context.Context, string, TermSize) (Terminal, error) {
	return nil, ErrNotDetachable
}

// Terminals lists nothing.
func (TerminalsEndWithClient) Terminals(context.Context) ([]TerminalInfo, error) { return nil, nil }
