package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/pty"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// Terminals: programs on a pseudo-terminal the agent opens. A terminal
// belongs to the agent, not to the stream that started it: a client that
// goes away detaches (the program keeps running), and any client of the
// same agent can attach again and gets the most recent output first. Its
// output is kept in a ring of TerminalScrollback bytes; input goes to the
// terminal as typed, so the terminal's line discipline turns Ctrl-C into
// SIGINT for the foreground process group, and a resize sends SIGWINCH.
// A terminal whose program ended stays listed with its exit code for
// terminalKeep, then is forgotten. Terminals end with the agent: closing
// the agent closes their masters, which hangs up their sessions.

// TerminalScrollback is how many bytes of a terminal's most recent output
// the agent keeps for clients that attach later.
const TerminalScrollback = 256 << 10

// terminalKeep is how long an ended terminal stays listed.
const terminalKeep = 10 * time.Minute

// terminal is one program on a pseudo-terminal.
type terminal struct {
	id      string
	argv    []string
	master  *os.File
	pid     int
	started time.Time

	mu       sync.Mutex
	buf      []byte // the last TerminalScrollback bytes of output
	end      int64  // bytes of output in all; buf holds [end-len(buf), end)
	changed  chan struct{}
	exited   bool
	code     int
	ended    time.Time
	attached int
	rows     int
	cols     int
}

type terminalTable struct {
	mu    sync.Mutex
	terms map[string]*terminal
}

func (t *terminalTable) get(id string) *terminal {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.terms[id]
}

// startTerminal starts req on a new pseudo-terminal. A program that cannot
// start is reported as exec reports it (a message, written to complaint,
// and 127 or 126), with no terminal left.
func (s *Server) startTerminal(req sbxdwire.TerminalRequest, complaint io.Writer) (*terminal, *sbxdwire.ExecResult, error) {
	cmd, err := s.command(req.Argv, req.Env, req.Dir, req.User, req.ID)
	if err != nil {
		return nil, nil, err
	}
	master, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer tty.Close()
	rows, cols := cmp0(req.Rows, 24), cmp0(req.Cols, 80)
	if err := pty.SetSize(master, rows, cols); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("sizing the terminal: %w", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own with the terminal as its controlling terminal
	// (so no Setpgid: the session leader leads its group too).
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0
	if !slicesHasEnv(cmd.Env, "TERM") {
		cmd.Env = append(cmd.Env, "TERM=xterm")
	}
	if err := StartCommand(cmd); err != nil {
		master.Close()
		res := startFailure(req.Argv[0], err, complaint)
		return nil, &res, nil
	}
	t := &terminal{id: req.ID, argv: req.Argv, master: master, pid: cmd.Process.Pid, started: time.Now(),
		changed: make(chan struct{}), rows: rows, cols: cols}
	s.terms.mu.Lock()
	if s.terms.terms == nil {
		s.terms.terms = map[string]*terminal{}
	}
	s.terms.terms[t.id] = t
	s.terms.mu.Unlock()
	read := make(chan struct{})
	go func() {
		defer close(read)
		t.copyOutput()
	}()
	go func() {
		err := WaitCommand(cmd)
		// The program's last output is read before it is reported ended;
		// children still holding the terminal get waitDelay.
		select {
		case <-read:
		case <-time.After(waitDelay):
		}
		code := exitStatus(cmd.ProcessState)
		if cmd.ProcessState == nil {
			code = -1
			s.log.Warn("waiting for a terminal's program", "id", t.id, "err", err)
		}
		master.Close()
		t.finish(code)
		time.AfterFunc(terminalKeep, func() {
			s.terms.mu.Lock()
			if s.terms.terms[t.id] == t {
				delete(s.terms.terms, t.id)
			}
			s.terms.mu.Unlock()
		})
	}()
	return t, nil, nil
}

func cmp0(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func slicesHasEnv(env []string, key string) bool {
	return slices.ContainsFunc(env, func(kv string) bool {
		return len(kv) > len(key) && kv[:len(key)] == key && kv[len(key)] == '='
	})
}

// copyOutput moves the program's output into the ring until the terminal
// hangs up (EIO once no process holds it) or the master is closed.
func (t *terminal) copyOutput() {
	p := make([]byte, 32<<10)
	for {
		n, err := t.master.Read(p)
		if n > 0 {
			t.mu.Lock()
			t.buf = append(t.buf, p[:n]...)
			if over := len(t.buf) - TerminalScrollback; over > 0 {
				t.buf = append(t.buf[:0], t.buf[over:]...)
			}
			t.end += int64(n)
			t.notify()
			t.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// notify wakes the attached clients; t.mu is held.
func (t *terminal) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *terminal) finish(code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exited, t.code, t.ended = true, code, time.Now()
	t.notify()
}

func (t *terminal) done() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.exited
}

func (t *terminal) status() sbxdwire.TerminalStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return sbxdwire.TerminalStatus{ID: t.id, Argv: t.argv, PID: t.pid, Running: !t.exited, ExitCode: t.code,
		Attached: t.attached, Started: t.started, Ended: t.ended, Rows: t.rows, Cols: t.cols}
}

// since returns the output from cursor on (from the oldest byte kept when
// cursor is older), the cursor after it, whether the program ended, and a
// channel that is closed when there is more.
func (t *terminal) since(cursor int64) (out []byte, next int64, exited bool, code int, more <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	start := t.end - int64(len(t.buf))
	cursor = max(cursor, start)
	return slices.Clone(t.buf[cursor-start:]), t.end, t.exited, t.code, t.changed
}

func (t *terminal) resize(rows, cols int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.exited {
		return nil
	}
	if err := pty.SetSize(t.master, rows, cols); err != nil {
		return err
	}
	t.rows, t.cols = rows, cols
	return nil
}

func (s *Server) handleTerminalStart(w http.ResponseWriter, r *http.Request) {
	req, err := sbxdwire.DecodeTerminalRequest(r.Header.Get(sbxdwire.HdrTerminal), true)
	if err != nil {
		writeError(w, "terminal", "", errors.Join(sbxdwire.ErrInvalid, err))
		return
	}
	if s.terms.get(req.ID) != nil {
		writeError(w, "terminal", "", fmt.Errorf("%w: terminal id %q is in use", sbxdwire.ErrInvalid, req.ID))
		return
	}
	var complaint strings.Builder
	t, failed, err := s.startTerminal(req, &complaint)
	switch {
	case err != nil:
		writeError(w, "terminal", "", err)
		return
	case failed != nil:
		// As exec reports it: the complaint as output, then the status.
		w.Header().Set("Trailer", sbxdwire.HdrResult)
		w.Header().Set("Content-Type", "application/vnd.sbxd.frames")
		sink := sbxdwire.NewFrameSink(w, nil, func(error) {})
		sink.WriteFrame(sbxdwire.FrameStdout, []byte(complaint.String()))
		b, _ := json.Marshal(failed)
		w.Header().Set(sbxdwire.HdrResult, string(b))
		return
	}
	s.attach(w, r, t, 0)
}

func (s *Server) handleTerminalAttach(w http.ResponseWriter, r *http.Request) {
	t := s.terms.get(r.PathValue("id"))
	if t == nil {
		writeError(w, "terminal", "", fmt.Errorf("terminal %q: %w", r.PathValue("id"), os.ErrNotExist))
		return
	}
	req, err := sbxdwire.DecodeTerminalRequest(r.Header.Get(sbxdwire.HdrTerminal), false)
	if err != nil {
		writeError(w, "terminal", "", errors.Join(sbxdwire.ErrInvalid, err))
		return
	}
	if req.Rows > 0 && req.Cols > 0 {
		t.resize(req.Rows, req.Cols)
	}
	s.attach(w, r, t, -1)
}

// attach streams t's output from cursor (-1: the oldest byte kept) as
// frames and copies the request body to its input, until the program ends
// (the trailer then carries its exit code) or the client goes (the program
// keeps running).
func (s *Server) attach(w http.ResponseWriter, r *http.Request, t *terminal, cursor int64) {
	rc := http.NewResponseController(w)
	rc.EnableFullDuplex()
	w.Header().Set("Trailer", sbxdwire.HdrResult)
	w.Header().Set("Content-Type", "application/vnd.sbxd.frames")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	t.mu.Lock()
	t.attached++
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.attached--
		t.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		// Input as it comes; the end of the body is not an end of input
		// for a terminal (Ctrl-D is a byte like any other).
		io.Copy(t.master, r.Body)
	}()
	sink := sbxdwire.NewFrameSink(w, rc.Flush, func(error) { cancel() })
	if cursor < 0 {
		cursor = 0
	}
	for {
		out, next, exited, code, more := t.since(cursor)
		cursor = next
		if len(out) > 0 && sink.WriteFrame(sbxdwire.FrameStdout, out) != nil {
			return
		}
		if exited {
			b, _ := json.Marshal(sbxdwire.ExecResult{ExitCode: code})
			w.Header().Set(sbxdwire.HdrResult, string(b))
			return
		}
		select {
		case <-more:
		case <-ctx.Done():
			return // detached
		}
	}
}

func (s *Server) handleTerminalResize(w http.ResponseWriter, r *http.Request) {
	t := s.terms.get(r.PathValue("id"))
	if t == nil {
		writeError(w, "terminal", "", fmt.Errorf("terminal %q: %w", r.PathValue("id"), os.ErrNotExist))
		return
	}
	var req sbxdwire.ResizeRequest
	if !readJSON(w, r, "terminal", &req) {
		return
	}
	if req.Rows <= 0 || req.Cols <= 0 || req.Rows > 0xffff || req.Cols > 0xffff {
		writeError(w, "terminal", "", fmt.Errorf("%w: size %dx%d out of range", sbxdwire.ErrInvalid, req.Cols, req.Rows))
		return
	}
	if err := t.resize(req.Rows, req.Cols); err != nil {
		writeError(w, "terminal", "", err)
		return
	}
	writeJSON(w, struct{}{})
}

// handleTerminalKill ends a terminal's program: its session gets SIGHUP (as
// when a terminal window closes), and whatever is left of the tree is
// killed.
func (s *Server) handleTerminalKill(w http.ResponseWriter, r *http.Request) {
	t := s.terms.get(r.PathValue("id"))
	if t == nil {
		writeError(w, "terminal", "", fmt.Errorf("terminal %q: %w", r.PathValue("id"), os.ErrNotExist))
		return
	}
	if !t.done() {
		_ = syscall.Kill(-t.pid, syscall.SIGHUP)
		killTree(t.pid, t.id)
	}
	writeJSON(w, struct{}{})
}

func (s *Server) handleTerminalList(w http.ResponseWriter, r *http.Request) {
	s.terms.mu.Lock()
	list := make([]sbxdwire.TerminalStatus, 0, len(s.terms.terms))
	for _, t := range s.terms.terms {
		list = append(list, t.status())
	}
	s.terms.mu.Unlock()
	slices.SortFunc(list, func(a, b sbxdwire.TerminalStatus) int { return a.Started.Compare(b.Started) })
	writeJSON(w, list)
}
