package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/termbuf"
)

// Interactive programs: the terminal tools run a program on a
// pseudo-terminal in the sandbox (backend.Terminaler) and let the agent
// type into it and read what it prints, stripped of escape sequences, a
// piece at a time. The WebSocket endpoint (terminal_ws.go) gives the same
// terminals to people, byte for byte.

// Limits of the terminal tools.
const (
	// maxTerminals bounds the terminals one sandbox keeps: running, or
	// ended and not yet reported.
	maxTerminals = 16
	// defaultTerminalQuiet is how long a read waits without new output
	// when it has no wait_for.
	defaultTerminalQuiet = 300 * time.Millisecond
	// defaultTerminalTimeout and maxTerminalTimeout bound one read.
	defaultTerminalTimeout = 30 * time.Second
	maxTerminalTimeout     = 5 * time.Minute
)

// Tool inputs of the terminal tools.
type (
	// TerminalStartInput is terminal_start's arguments.
	TerminalStartInput struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		Command   string `json:"command" jsonschema:"the program to run, with sh -c in the working directory: e.g. python3, bash, node, psql -U postgres, gdb ./prog"`
		Rows      int    `json:"rows,omitempty" jsonschema:"terminal height in lines; default 24"`
		Cols      int    `json:"cols,omitempty" jsonschema:"terminal width in columns; default 80"`
		WaitFor   string `json:"wait_for,omitempty" jsonschema:"RE2 regular expression: return as soon as the output matches it, e.g. '>>> $' for python's prompt; output after the match is kept for the next read"`
		QuietMS   int    `json:"quiet_ms,omitempty" jsonschema:"return after this many milliseconds without new output; default 300 without wait_for, none with it"`
		Timeout   int    `json:"timeout,omitempty" jsonschema:"seconds to wait for output at most; default 30, at most 300"`
	}
	// TerminalSendInput is terminal_send's arguments.
	TerminalSendInput struct {
		SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		TerminalID string `json:"terminal_id" jsonschema:"the terminal_id terminal_start returned"`
		Input      string `json:"input" jsonschema:"the keys to type, exactly: \\n is Enter, \\t Tab, \\u0003 Ctrl-C, \\u0004 Ctrl-D (end of input), \\u001b Escape, \\u001b[A the Up arrow"`
		WaitFor    string `json:"wait_for,omitempty" jsonschema:"RE2 regular expression: return as soon as the output matches it; output after the match is kept for the next read"`
		QuietMS    int    `json:"quiet_ms,omitempty" jsonschema:"return after this many milliseconds without new output; default 300 without wait_for, none with it"`
		Timeout    int    `json:"timeout,omitempty" jsonschema:"seconds to wait for output at most; default 30, at most 300"`
	}
	// TerminalReadInput is terminal_read's arguments.
	TerminalReadInput struct {
		SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		TerminalID string `json:"terminal_id" jsonschema:"the terminal_id terminal_start returned"`
		WaitFor    string `json:"wait_for,omitempty" jsonschema:"RE2 regular expression: return as soon as the output matches it; output after the match is kept for the next read"`
		QuietMS    int    `json:"quiet_ms,omitempty" jsonschema:"return after this many milliseconds without new output; default 300 without wait_for, none with it"`
		Timeout    int    `json:"timeout,omitempty" jsonschema:"seconds to wait for output at most; default 30, at most 300"`
	}
	// TerminalCloseInput is terminal_close's arguments.
	TerminalCloseInput struct {
		SandboxID  string `json:"sandbox_id" jsonschema:"the sandbox_id create_sandbox returned"`
		TerminalID string `json:"terminal_id" jsonschema:"the terminal_id terminal_start returned"`
	}
)

const terminalReadText = "terminal_start, terminal_send and terminal_read return the output that came since the previous of them " +
	"(escape sequences and carriage returns removed): " +
	"up to where wait_for matches, or once no output came for quiet_ms (default 300), or after timeout seconds (default 30), " +
	"or when the program ended (with its exit code); the answer's last line says which."

// terminalTools drive interactive programs on pseudo-terminals.
func terminalTools() []toolDef {
	return []toolDef{
		defineTool("terminal_start",
			"Start an interactive program (a REPL such as python3 or node, a shell, a debugger, a database client, "+
				"anything that wants a terminal) on a pseudo-terminal in the sandbox. Returns a terminal_id and the program's first output. "+
				"Type into it with terminal_send, wait for more with terminal_read, end it with terminal_close. "+
				"For commands that need no terminal, use execute. "+terminalReadText+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in TerminalStartInput) (Result, error) {
				return s.terminalStart(ctx, conv, in)
			}),
		defineTool("terminal_send",
			`Type input into a terminal from terminal_start, exactly as given: "\n" is Enter, "\t" Tab, "\u0003" Ctrl-C (interrupts the program), `+
				`"\u0004" Ctrl-D (end of input), "\u001b" Escape, "\u001b[A" the Up arrow. Then return the output that follows, as terminal_read does. `+
				terminalReadText+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in TerminalSendInput) (Result, error) {
				return s.terminalSend(ctx, conv, in)
			}),
		defineTool("terminal_read",
			"Read a terminal's new output without typing. "+terminalReadText+" Once the program's end is reported the terminal is gone."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in TerminalReadInput) (Result, error) {
				return s.terminalRead(ctx, conv, in)
			}),
		defineTool("terminal_close",
			"Kill a terminal's program (and everything it started) and forget the terminal."+sandboxIDHint,
			func(ctx context.Context, s *Server, conv string, in TerminalCloseInput) (Result, error) {
				return s.terminalClose(ctx, conv, in)
			}),
	}
}

// statusError is a tool error with the HTTP status the terminal
// WebSocket endpoint answers it with.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// errNoTerminal: terminal id is not one of the sandbox's.
func errNoTerminal(id, sandbox string) error {
	return &statusError{http.StatusNotFound, toolError("Terminal '%s' not found in sandbox '%s': it was closed, its program ended and that was reported, "+
		"or it was never started there. Call terminal_start to run a program on a new terminal.", id, sandbox)}
}

// terminals are the programs on pseudo-terminals a sandbox runs for this
// server: started by terminal_start or a WebSocket, or attached to by a
// WebSocket. They go with the sandbox: killed when it is removed or the
// server closes.
type terminals struct {
	mu       sync.Mutex
	m        map[string]*terminal // by ID
	reserved int                  // terminals being started
	closed   bool                 // the sandbox is gone: no more terminals
}

// terminal is one of a sandbox's terminals.
type terminal struct {
	id, command string
	// sem is held by the tool call using the terminal, one at a time.
	sem chan struct{}

	// Set once, under terminals.mu: the tools' attachment and its output,
	// stripped (feed) and collected (out). Nil for a WebSocket's terminal
	// no tool has read yet.
	term backend.Terminal
	feed *feed
	out  *termbuf.Buffer
	// sockets is how many WebSockets are attached, and starter the
	// attachment of the one that started t while it is attached (guarded
	// by terminals.mu).
	sockets int
	starter backend.Terminal

	// carry is the incomplete UTF-8 sequence the previous answer ended in
	// (guarded by sem).
	carry []byte
}

func newTerminal(id, command string) *terminal {
	return &terminal{id: id, command: command, sem: make(chan struct{}, 1)}
}

// pump starts collecting h's output for the tools, at most limit bytes
// unread. Called before t is shared, or with terminals.mu held.
func (t *terminal) pump(h backend.Terminal, limit int64) {
	t.term = h
	t.feed = &feed{r: h, changed: make(chan struct{})}
	t.out = termbuf.Pump(t.feed, int(limit))
}

// get returns terminal id, or nil.
func (ts *terminals) get(id string) *terminal {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.m[id]
}

// reserve takes a place for a new terminal (give it back with unreserve,
// or fill it with add). At the limit it first forgets WebSocket terminals
// whose program ended unseen.
func (ts *terminals) reserve(ctx context.Context, tr backend.Terminaler, sandbox string) error {
	for pruned := false; ; pruned = true {
		ts.mu.Lock()
		switch {
		case ts.closed:
			ts.mu.Unlock()
			return errGone(sandbox)
		case len(ts.m)+ts.reserved < maxTerminals:
			ts.reserved++
			ts.mu.Unlock()
			return nil
		}
		ids := slices.Sorted(maps.Keys(ts.m))
		ts.mu.Unlock()
		if pruned || !ts.prune(ctx, tr) {
			return &statusError{http.StatusTooManyRequests, toolError("sandbox '%s' already has %d terminals, the most one sandbox keeps (%s): "+
				"close one with terminal_close first", sandbox, maxTerminals, strings.Join(ids, ", "))}
		}
	}
}

// prune forgets the WebSocket terminals nobody is attached to whose
// program has ended, and reports whether it forgot any.
func (ts *terminals) prune(ctx context.Context, tr backend.Terminaler) bool {
	list, err := tr.Terminals(ctx)
	if err != nil {
		return false
	}
	running := map[string]bool{}
	for _, info := range list {
		running[info.ID] = info.Running
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := len(ts.m)
	for id, t := range ts.m {
		if t.term == nil && t.sockets == 0 && !running[id] {
			delete(ts.m, id)
		}
	}
	return len(ts.m) < n
}

func (ts *terminals) unreserve() {
	ts.mu.Lock()
	ts.reserved--
	ts.mu.Unlock()
}

// add fills a reserved place with t; false when the sandbox went
// meanwhile (t's program is then the caller's to kill).
func (ts *terminals) add(t *terminal) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.reserved--
	if ts.closed {
		return false
	}
	if ts.m == nil {
		ts.m = map[string]*terminal{}
	}
	ts.m[t.id] = t
	return true
}

// count is how many terminals the sandbox has.
func (ts *terminals) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.m)
}

// remove forgets t.
func (ts *terminals) remove(t *terminal) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m[t.id] == t {
		delete(ts.m, t.id)
	}
}

// takeAll forgets every terminal and takes no more: the sandbox is going.
func (ts *terminals) takeAll() []*terminal {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	list := make([]*terminal, 0, len(ts.m))
	for _, t := range ts.m {
		list = append(list, t)
	}
	ts.m = nil
	return list
}

// killTerminals kills b's terminals' programs, whoever is attached, and
// takes no new ones. b.attach is held.
func (b *box) killTerminals(ctx context.Context) {
	list := b.terms.takeAll()
	if len(list) == 0 {
		return
	}
	tr := b.terminalerLocked()
	var wg sync.WaitGroup
	for _, t := range list {
		wg.Go(func() { killTerminal(ctx, &b.terms, tr, t) })
	}
	wg.Wait()
}

// dropTerminals forgets b's terminals without killing them: their sandbox
// is gone already.
func (b *box) dropTerminals() {
	for _, t := range b.terms.takeAll() {
		if h := t.handle(&b.terms); h != nil {
			h.Close()
		}
	}
}

// handle is the tools' attachment to t, or nil.
func (t *terminal) handle(ts *terminals) backend.Terminal {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return t.term
}

// killTerminal kills t's program: through the tools' attachment (closed
// once the program's end came through, so a read in progress reports it),
// else through the attachment of the WebSocket that started it, else
// through a new one (a WebSocket's terminal, detached or attached to
// again).
func killTerminal(ctx context.Context, ts *terminals, tr backend.Terminaler, t *terminal) error {
	ts.mu.Lock()
	h, f, starter := t.term, t.feed, t.starter
	ts.mu.Unlock()
	if h == nil && starter != nil {
		// Its WebSocket sees the end and lets go of it.
		if err := starter.Kill(ctx); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
		return nil
	}
	if h != nil {
		err := h.Kill(ctx)
		if err == nil {
			f.waitEnded(ctx, killWait)
		}
		h.Close()
		if err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
		return nil
	}
	if tr == nil || !tr.Detachable() {
		return nil
	}
	h, err := tr.AttachTerminal(ctx, t.id, backend.TermSize{})
	if errors.Is(err, backend.ErrNotFound) {
		return nil // ended and forgotten
	}
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.Kill(ctx); err != nil && !errors.Is(err, backend.ErrNotFound) {
		return err
	}
	return nil
}

// killWait bounds waiting for a killed program's output to end.
const killWait = 5 * time.Second

// terminalerLocked is b's Terminaler (its agent's, else its sandbox's),
// or nil; b.attach is held.
func (b *box) terminalerLocked() backend.Terminaler {
	var sb backend.Sandbox
	switch {
	case b.agent != nil:
		sb = b.agent
	case b.sb != nil:
		sb = b.sb
	default:
		return nil
	}
	tr, _ := backend.As[backend.Terminaler](sb)
	return tr
}

// terminaler returns b's Terminaler, or a tool error saying why there is
// none.
func (s *Server) terminaler(b *box) (backend.Terminaler, error) {
	b.attach.Lock()
	tr := b.terminalerLocked()
	b.attach.Unlock()
	if tr == nil {
		return nil, errNoTerminals(b.id, s.opts.Backend.Name())
	}
	return tr, nil
}

// errNoTerminals: the sandbox cannot run programs on a terminal.
func errNoTerminals(sandbox, backendName string) error {
	return &statusError{http.StatusNotImplemented, toolError("sandbox '%s' cannot run programs on a terminal: terminals need the sandbox agent (sbxd), "+
		"which is not running there (the server runs without it, or it failed to start), and the %s backend has no terminal of its own. "+
		"Use execute for commands that need no terminal.", sandbox, backendName)}
}

// startTerminal starts command (with sh -c) on a new terminal of b, for
// the tools (forTools: its output is collected for terminal_read) or for
// a WebSocket (counted as attached).
func (s *Server) startTerminal(ctx context.Context, b *box, tr backend.Terminaler, command string, size backend.TermSize, forTools bool) (*terminal, backend.Terminal, error) {
	if err := b.terms.reserve(ctx, tr, b.id); err != nil {
		return nil, nil, err
	}
	h, err := tr.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"sh", "-c", command}, Size: size})
	if err != nil {
		b.terms.unreserve()
		if errors.Is(err, errors.ErrUnsupported) {
			return nil, nil, errNoTerminals(b.id, s.opts.Backend.Name())
		}
		return nil, nil, fmt.Errorf("starting a terminal: %w", err)
	}
	t := newTerminal(h.ID(), command)
	api := "websocket"
	if forTools {
		api = "tool"
	}
	s.metrics.terminals.WithLabelValues(api).Inc()
	noteAudit(ctx, func(e *AuditEntry) { e.Argv = auditArgv(command) })
	if forTools {
		t.pump(h, s.opts.OutputLimit)
	} else {
		t.sockets, t.starter = 1, h
	}
	if !b.terms.add(t) {
		killCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		h.Kill(killCtx)
		h.Close()
		return nil, nil, errGone(b.id)
	}
	return t, h, nil
}

// toolTerminal finds terminal id of b for a tool call and holds it for
// the call (release when done). A WebSocket's terminal gets an attachment
// of the tools' own.
func (s *Server) toolTerminal(ctx context.Context, b *box, tr backend.Terminaler, id string) (*terminal, func(), error) {
	if id == "" {
		return nil, nil, toolError("terminal_id is empty: pass the terminal_id terminal_start returned")
	}
	t := b.terms.get(id)
	if t == nil {
		return nil, nil, errNoTerminal(id, b.id)
	}
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release := func() { <-t.sem }
	b.terms.mu.Lock()
	h, still := t.term, b.terms.m[id] == t
	b.terms.mu.Unlock()
	if !still {
		release()
		return nil, nil, errNoTerminal(id, b.id)
	}
	if h != nil {
		return t, release, nil
	}
	if !tr.Detachable() {
		release()
		return nil, nil, toolError("terminal '%s' belongs to a WebSocket client, and this sandbox's terminals cannot be shared "+
			"(they end with their client); start one of your own with terminal_start", id)
	}
	h, err := tr.AttachTerminal(ctx, id, backend.TermSize{})
	if err != nil {
		release()
		if errors.Is(err, backend.ErrNotFound) {
			b.terms.remove(t)
			return nil, nil, errNoTerminal(id, b.id)
		}
		return nil, nil, fmt.Errorf("attaching to terminal %s: %w", id, err)
	}
	b.terms.mu.Lock()
	still = b.terms.m[id] == t
	if still {
		t.pump(h, s.opts.OutputLimit)
	}
	b.terms.mu.Unlock()
	if !still {
		h.Close()
		release()
		return nil, nil, errNoTerminal(id, b.id)
	}
	return t, release, nil
}

// readParams say how long a read waits.
type readParams struct {
	waitFor string
	until   *regexp.Regexp // nil: no wait_for
	quiet   time.Duration  // 0: none
	timeout time.Duration
}

func newReadParams(waitFor string, quietMS, timeout int) (readParams, error) {
	p := readParams{waitFor: waitFor, timeout: defaultTerminalTimeout}
	switch {
	case quietMS < 0:
		return p, toolError("quiet_ms must not be negative (got %d)", quietMS)
	case timeout < 0:
		return p, toolError("timeout must not be negative (got %d)", timeout)
	}
	if waitFor != "" {
		re, err := regexp.Compile(waitFor)
		if err != nil {
			return p, toolError("wait_for %q is not a valid regular expression (RE2 syntax): %v", waitFor, err)
		}
		p.until = re
	}
	switch {
	case quietMS > 0:
		p.quiet = time.Duration(quietMS) * time.Millisecond
	case waitFor == "":
		p.quiet = defaultTerminalQuiet
	}
	if timeout > 0 {
		p.timeout = min(time.Duration(timeout)*time.Second, maxTerminalTimeout)
	}
	return p, nil
}

// terminalSize checks a size the tools or the WebSocket were given (0:
// the default).
func terminalSize(rows, cols int) (backend.TermSize, error) {
	if rows < 0 || cols < 0 || rows > 0xffff || cols > 0xffff {
		return backend.TermSize{}, toolError("terminal size rows=%d cols=%d is out of range: give 1 to 65535 each, or leave them out for 24x80", rows, cols)
	}
	return backend.TermSize{Rows: rows, Cols: cols}, nil
}

func (s *Server) terminalStart(ctx context.Context, conv string, in TerminalStartInput) (Result, error) {
	if strings.TrimSpace(in.Command) == "" {
		return Result{}, toolError("command is empty: name the program to run, e.g. python3 or bash")
	}
	size, err := terminalSize(in.Rows, in.Cols)
	if err != nil {
		return Result{}, err
	}
	rp, err := newReadParams(in.WaitFor, in.QuietMS, in.Timeout)
	if err != nil {
		return Result{}, err
	}
	var res Result
	err = s.withBox(ctx, conv, in.SandboxID, func(ctx context.Context, b *box) error {
		tr, err := s.terminaler(b)
		if err != nil {
			return err
		}
		t, _, err := s.startTerminal(ctx, b, tr, in.Command, size, true)
		if err != nil {
			return err
		}
		t.sem <- struct{}{}
		defer func() { <-t.sem }()
		res = Result{Output: fmt.Sprintf("Started terminal %s running %q. Pass terminal_id=%s to terminal_send, terminal_read and terminal_close.\n",
			t.id, in.Command, t.id) + s.readTerminal(ctx, b, t, rp, 0), TerminalID: t.id}
		return nil
	})
	return res, err
}

func (s *Server) terminalSend(ctx context.Context, conv string, in TerminalSendInput) (Result, error) {
	if in.Input == "" {
		return Result{}, toolError("input is empty: give the keys to type (\"\\n\" is Enter); to wait for output without typing, call terminal_read")
	}
	rp, err := newReadParams(in.WaitFor, in.QuietMS, in.Timeout)
	if err != nil {
		return Result{}, err
	}
	var out string
	err = s.withBox(ctx, conv, in.SandboxID, func(ctx context.Context, b *box) error {
		tr, err := s.terminaler(b)
		if err != nil {
			return err
		}
		t, release, err := s.toolTerminal(ctx, b, tr, in.TerminalID)
		if err != nil {
			return err
		}
		defer release()
		seq, ended := t.feed.state()
		switch {
		case ended:
			out = "The program has ended: the input was not typed.\n"
		default:
			if _, err := io.WriteString(t.term, in.Input); err != nil {
				out = fmt.Sprintf("Typing failed (%v): the program may have ended.\n", err)
			}
		}
		out += s.readTerminal(ctx, b, t, rp, seq)
		return nil
	})
	return Result{Output: out, TerminalID: in.TerminalID}, err
}

func (s *Server) terminalRead(ctx context.Context, conv string, in TerminalReadInput) (Result, error) {
	rp, err := newReadParams(in.WaitFor, in.QuietMS, in.Timeout)
	if err != nil {
		return Result{}, err
	}
	var out string
	err = s.withBox(ctx, conv, in.SandboxID, func(ctx context.Context, b *box) error {
		tr, err := s.terminaler(b)
		if err != nil {
			return err
		}
		t, release, err := s.toolTerminal(ctx, b, tr, in.TerminalID)
		if err != nil {
			return err
		}
		defer release()
		seq, _ := t.feed.state()
		out = s.readTerminal(ctx, b, t, rp, seq)
		return nil
	})
	return Result{Output: out, TerminalID: in.TerminalID}, err
}

func (s *Server) terminalClose(ctx context.Context, conv string, in TerminalCloseInput) (Result, error) {
	if in.TerminalID == "" {
		return Result{}, toolError("terminal_id is empty: pass the terminal_id terminal_start returned")
	}
	var out string
	err := s.withBox(ctx, conv, in.SandboxID, func(ctx context.Context, b *box) error {
		tr, err := s.terminaler(b)
		if err != nil {
			return err
		}
		// No waiting for a read in progress: it sees the end.
		t := b.terms.get(in.TerminalID)
		if t == nil {
			return errNoTerminal(in.TerminalID, b.id)
		}
		if h := t.handle(&b.terms); h != nil {
			if code, ok := h.ExitCode(); ok {
				out = fmt.Sprintf("Closed terminal %s: its program had already ended with exit code %d.", t.id, code)
			}
		}
		if err := killTerminal(ctx, &b.terms, tr, t); err != nil {
			return fmt.Errorf("killing the program of terminal %s: %w", t.id, err)
		}
		b.terms.remove(t)
		if h := t.handle(&b.terms); h != nil {
			h.Close() // a read's, attached meanwhile
		}
		if out == "" {
			out = fmt.Sprintf("Closed terminal %s: its program was killed.", t.id)
		}
		return nil
	})
	return Result{Output: out, TerminalID: in.TerminalID}, err
}

// readTerminal waits for t's output as rp says and returns the answer.
// seq is the feed's count from before the call typed anything: quiet
// counts from the first output after it. The caller holds t.sem.
func (s *Server) readTerminal(ctx context.Context, b *box, t *terminal, rp readParams, seq uint64) string {
	ctx, cancel := context.WithTimeout(ctx, rp.timeout)
	defer cancel()
	quiet := rp.quiet
	if quiet > 0 {
		// The buffer measures quiet from the last output, which may be
		// long before this call: first wait for output (or quiet).
		t.feed.waitAfter(ctx, seq, quiet)
	}
	if _, ended := t.feed.state(); ended {
		quiet = 0 // the buffer sees the end in a moment
	}
	r := t.out.Read(ctx, rp.until, quiet)
	timedOut := !r.Matched && !r.Ended && ctx.Err() != nil
	return s.terminalAnswer(b, t, r, rp, timedOut)
}

// terminalAnswer is what the agent reads of a read's result. A program's
// end is reported once: the terminal is forgotten after.
func (s *Server) terminalAnswer(b *box, t *terminal, r termbuf.Result, rp readParams, timedOut bool) string {
	var sb strings.Builder
	if r.Dropped > 0 {
		fmt.Fprintf(&sb, "[... %d bytes of earlier output dropped: more came than one answer holds (%d bytes) ...]\n", r.Dropped, s.opts.OutputLimit)
	}
	out := append(t.carry, r.Output...)
	t.carry = nil
	if !r.Ended {
		out, t.carry = splitPartialRune(out)
	}
	text := strings.ToValidUTF8(string(out), "\uFFFD")
	sb.WriteString(text)
	switch {
	case text != "" && !strings.HasSuffix(text, "\n"):
		sb.WriteByte('\n')
	case text == "" && r.Dropped == 0:
		sb.WriteString("(no new output)\n")
	}
	const running = "the program is still running: terminal_send types into it, terminal_read waits for more"
	switch {
	case r.Matched:
		fmt.Fprintf(&sb, "[terminal %s: wait_for matched; output after the match is kept for the next read]", t.id)
	case r.Ended:
		b.terms.remove(t)
		t.term.Close()
		code, ok := t.term.ExitCode()
		switch {
		case errors.Is(r.Err, io.EOF) && ok:
			fmt.Fprintf(&sb, "[terminal %s: the program ended with exit code %d; the terminal is closed]", t.id, code)
		case errors.Is(r.Err, io.EOF):
			fmt.Fprintf(&sb, "[terminal %s: the program ended; the terminal is closed]", t.id)
		default:
			fmt.Fprintf(&sb, "[terminal %s: the connection to the program was lost (%v); the terminal is closed]", t.id, r.Err)
		}
	case timedOut && rp.until != nil:
		fmt.Fprintf(&sb, "[terminal %s: timed out after %s before wait_for %q matched; %s]", t.id, rp.timeout, rp.waitFor, running)
	case timedOut:
		fmt.Fprintf(&sb, "[terminal %s: timed out after %s with output still coming; %s]", t.id, rp.timeout, running)
	case rp.until != nil:
		fmt.Fprintf(&sb, "[terminal %s: no output for %d ms and wait_for did not match; %s]", t.id, rp.quiet.Milliseconds(), running)
	default:
		fmt.Fprintf(&sb, "[terminal %s: no output for %d ms; %s]", t.id, rp.quiet.Milliseconds(), running)
	}
	return sb.String()
}

// splitPartialRune splits an incomplete UTF-8 sequence off the end of b
// (it is completed by the next output).
func splitPartialRune(b []byte) (whole, partial []byte) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		c := b[i]
		if c < 0x80 {
			break // ASCII: complete
		}
		if c >= 0xc0 { // a leading byte
			if !utf8.FullRune(b[i:]) {
				return b[:i], slices.Clone(b[i:])
			}
			break
		}
	}
	return b, nil
}

// feed is a terminal's output, stripped, on its way into a
// termbuf.Buffer. It tells readers when output has reached the buffer, so
// a read can wait for the output its input causes before it counts a
// quiet period.
type feed struct {
	r     io.Reader
	strip termbuf.Stripper // used by the buffer's reader only

	mu      sync.Mutex
	seq     uint64 // pieces of output the buffer has taken in
	handed  bool   // the last Read returned output
	ended   bool   // the stream ended
	changed chan struct{}
}

// Read is called by the buffer's reader alone: a call means the buffer
// holds what the previous one returned.
func (f *feed) Read(p []byte) (int, error) {
	f.mu.Lock()
	if f.handed {
		f.handed = false
		f.seq++
		f.notify()
	}
	f.mu.Unlock()
	for {
		n, err := f.r.Read(p)
		out := f.strip.Append(p[:0], p[:n])
		if len(out) == 0 && err == nil {
			continue // nothing but control
		}
		f.mu.Lock()
		f.handed = len(out) > 0
		if err != nil {
			f.ended = true
			f.notify()
		}
		f.mu.Unlock()
		return len(out), err
	}
}

// notify wakes waitAfter; f.mu is held.
func (f *feed) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// state returns how many pieces of output reached the buffer and whether
// the stream ended.
func (f *feed) state() (seq uint64, ended bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq, f.ended
}

// waitEnded waits until the stream ended, d passed or ctx ended.
func (f *feed) waitEnded(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		f.mu.Lock()
		ended, changed := f.ended, f.changed
		f.mu.Unlock()
		if ended {
			return
		}
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// waitAfter waits until output after piece seq reached the buffer, the
// stream ended, d passed or ctx ended.
func (f *feed) waitAfter(ctx context.Context, seq uint64, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if f.seq != seq || f.ended {
			f.mu.Unlock()
			return
		}
		changed := f.changed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
