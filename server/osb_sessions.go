package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/execdws"
)

// execd's bash sessions: POST /session makes one; POST /session/{id}/run
// runs a command in it with execd's event stream, keeping what bash keeps
// between commands (variables, exported or not, functions, the working
// directory) in state files in the sandbox (osbSessionScript); and, in
// newer execd versions than the specs here, GET /ws/session/{id}?pty=1 starts
// bash on a pseudo-terminal (the sandbox's Terminaler: sbxd's, else the
// backend's) and carries JSON frames: stdin, resize, signal and ping in;
// connected, stdout, replay (with ?since=OFFSET), exit, error and pong
// out. The session outlives its connection; its output is kept for
// replays (the last osbReplayCap bytes). One connection at a time (409).

const osbReplayCap = 1 << 20

// osbSession is one bash session.
type osbSession struct {
	id, cwd string

	mu        sync.Mutex
	term      backend.Terminal
	out       []byte // the last osbReplayCap bytes of output
	dropped   int64  // bytes dropped from the front of out
	sink      func([]byte)
	connected bool
	done      chan struct{} // closed when bash ended
	code      int

	runMu sync.Mutex  // held by the session's running command
	ran   atomic.Bool // a command ran: the state has the directory
}

// osbSessions are a sandbox's sessions.
type osbSessions struct {
	mu sync.Mutex
	m  map[string]*osbSession
}

func (ss *osbSessions) get(id string) *osbSession {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.m[id]
}

// killAll ends every session (the sandbox goes).
func (ss *osbSessions) killAll() {
	ss.mu.Lock()
	list := ss.m
	ss.m = nil
	ss.mu.Unlock()
	for _, se := range list {
		se.kill()
	}
}

func (se *osbSession) kill() {
	se.mu.Lock()
	t := se.term
	se.mu.Unlock()
	if t != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Kill(ctx)
		cancel()
		t.Close()
	}
}

func (x *osbExecd) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Cwd string `json:"cwd"`
	}
	if r.ContentLength != 0 && !decodeBody(w, r, &body) {
		return
	}
	se := &osbSession{id: "session-" + newCommandID()[:16], cwd: body.Cwd}
	ss := &x.b.osbSess
	ss.mu.Lock()
	if ss.m == nil {
		ss.m = map[string]*osbSession{}
	}
	ss.m[se.id] = se
	ss.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"session_id": se.id})
}

// osbSessionScript runs command $2 in session state $1 (a path prefix in
// the sandbox): it restores the variables, functions and working directory
// the session's last command left, starts in $3 when given, and saves them
// again however the command ends (an exit included). Under sh (no bash in
// the image) only exported variables and the directory are kept.
const osbSessionScript = `__s=$1 __c=$2 __d=$3
shift 3
if [ -f "$__s.vars" ]; then . "$__s.vars" 2>/dev/null; fi
if [ -f "$__s.cwd" ]; then cd "$(cat "$__s.cwd")" 2>/dev/null; fi
if [ -n "$__d" ]; then cd "$__d" || exit 1; fi
__save() {
	if [ -n "$BASH_VERSION" ]; then
		{ declare -p | grep -Ev '^declare -[a-zA-Z-]*r|^declare -[a-zA-Z-]* (BASH[A-Z_]*|EUID|PPID|UID|SHLVL|PWD|OLDPWD|_|FUNCNAME|PIPESTATUS|GROUPS|DIRSTACK|HIST[A-Z]*|RANDOM|SRANDOM|SECONDS|LINENO|EPOCH[A-Z]*|COMP_WORDBREAKS|SHELLOPTS|BASHOPTS|__[a-z]+)='; declare -f | sed '/^__save ()/,/^}/d'; } >"$__s.vars.tmp" 2>/dev/null
	else
		export -p >"$__s.vars.tmp" 2>/dev/null
	fi
	mv -f "$__s.vars.tmp" "$__s.vars" 2>/dev/null
	pwd >"$__s.cwd" 2>/dev/null
}
trap '__rc=$?; __save; exit $__rc' EXIT
eval "$__c"`

// runInSession runs a command in session id with execd's event stream.
func (x *osbExecd) runInSession(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) {
	se := x.b.osbSess.get(id)
	if se == nil {
		osbExecdError(w, http.StatusNotFound, "CONTEXT_NOT_FOUND", "session not found: %s", id)
		return
	}
	var q struct {
		Command string `json:"command"`
		Cwd     string `json:"cwd"`
		Timeout int64  `json:"timeout"`
	}
	if !decodeBody(w, r, &q) {
		return
	}
	if q.Command == "" || q.Timeout < 0 {
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "a command is required, and a timeout (milliseconds) must not be negative")
		return
	}
	// One command at a time per session, as in one bash.
	se.runMu.Lock()
	defer se.runMu.Unlock()
	dir := q.Cwd
	if dir == "" && !se.ran.Load() {
		dir = se.cwd
	}
	se.ran.Store(true)
	x.stream(ctx, w, q.Command, false, backend.ExecRequest{
		Cmd: []string{"sh", "-c", `if command -v bash >/dev/null 2>&1; then exec bash -c "$0" sh "$@"; fi; exec sh -c "$0" sh "$@"`,
			osbSessionScript, se.statePath(), q.Command, dir},
		Timeout: time.Duration(q.Timeout) * time.Millisecond,
	})
}

// statePath is where the session keeps its state in the sandbox.
func (se *osbSession) statePath() string { return "/tmp/.sandboxkit-" + se.id }

func (x *osbExecd) deleteSession(w http.ResponseWriter, id string) {
	ss := &x.b.osbSess
	ss.mu.Lock()
	se := ss.m[id]
	delete(ss.m, id)
	ss.mu.Unlock()
	if se == nil {
		osbExecdError(w, http.StatusNotFound, "CONTEXT_NOT_FOUND", "session not found: %s", id)
		return
	}
	se.kill()
	if se.ran.Load() {
		ctx, cancel := context.WithTimeout(x.s.life, 10*time.Second)
		x.sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"rm", "-f", se.statePath() + ".vars", se.statePath() + ".cwd"}})
		cancel()
	}
	w.WriteHeader(http.StatusOK)
}

// start runs bash on a terminal for the session unless it runs already.
func (se *osbSession) start(ctx context.Context, tr backend.Terminaler) error {
	se.mu.Lock()
	defer se.mu.Unlock()
	if se.term != nil {
		return nil
	}
	t, err := tr.Terminal(ctx, backend.TerminalRequest{
		Cmd:     []string{"sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash --noprofile --norc; fi; exec sh"},
		WorkDir: se.cwd, Env: map[string]string{"TERM": "xterm-256color"},
		Size: backend.TermSize{Rows: 24, Cols: 80},
	})
	if err != nil {
		return err
	}
	se.term, se.done = t, make(chan struct{})
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := t.Read(buf)
			if n > 0 {
				chunk := append([]byte(nil), buf[:n]...)
				se.mu.Lock()
				se.out = append(se.out, chunk...)
				if over := len(se.out) - osbReplayCap; over > 0 {
					se.out = append([]byte(nil), se.out[over:]...)
					se.dropped += int64(over)
				}
				sink := se.sink
				se.mu.Unlock()
				if sink != nil {
					sink(chunk)
				}
			}
			if err != nil {
				break
			}
		}
		code, ok := t.ExitCode()
		if !ok {
			code = -1
		}
		se.mu.Lock()
		se.code = code
		se.mu.Unlock()
		close(se.done)
	}()
	return nil
}

var osbUpgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// sessionSocket steers session id over a WebSocket until it ends or the
// client goes.
func (x *osbExecd) sessionSocket(ctx context.Context, w http.ResponseWriter, r *http.Request, id string) {
	se := x.b.osbSess.get(id)
	if se == nil {
		osbExecdError(w, http.StatusNotFound, "CONTEXT_NOT_FOUND", "session not found")
		return
	}
	se.mu.Lock()
	if se.connected {
		se.mu.Unlock()
		osbExecdError(w, http.StatusConflict, "RUNTIME_ERROR", "session already connected")
		return
	}
	se.connected = true
	se.mu.Unlock()
	defer func() {
		se.mu.Lock()
		se.connected, se.sink = false, nil
		se.mu.Unlock()
	}()
	ws, err := osbUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := execdws.New(ws)
	defer conn.Close()
	if r.URL.Query().Get("pty") != "1" {
		conn.Error("sandboxkit runs sessions on a terminal only: connect with ?pty=1", "START_FAILED")
		return
	}
	tr, ok := backend.As[backend.Terminaler](x.sb)
	if !ok {
		conn.Error("this sandbox cannot run programs on a terminal (no sbxd agent, and the backend has no terminals)", "START_FAILED")
		return
	}
	if err := se.start(x.s.life, tr); err != nil {
		conn.Error("failed to start bash: "+err.Error(), "START_FAILED")
		return
	}
	// The live sink first, then the replay: nothing falls between them.
	se.mu.Lock()
	var replay []byte
	if since, err := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64); err == nil && since >= 0 {
		from := max(since-se.dropped, 0)
		if from < int64(len(se.out)) {
			replay = append(replay, se.out[from:]...)
		}
	}
	offset := se.dropped + int64(len(se.out))
	se.sink = func(p []byte) { conn.Output(p) }
	term, done := se.term, se.done
	se.mu.Unlock()
	if len(replay) > 0 {
		conn.Send(map[string]any{"type": "replay", "data": string(replay), "offset": offset})
	}
	conn.Send(map[string]any{"type": "connected", "session_id": se.id, "mode": "pty"})
	go func() {
		select {
		case <-done:
		case <-ctx.Done():
			conn.Close()
			return
		}
		se.mu.Lock()
		code := se.code
		se.mu.Unlock()
		conn.Exit(code)
	}()
	conn.Serve(execdws.Handlers{
		Stdin: func(p []byte) error { _, err := term.Write(p); return err },
		Resize: func(rows, cols int) error {
			return term.Resize(ctx, backend.TermSize{Rows: rows, Cols: cols})
		},
		// The terminal's own keys for the common signals; anything else
		// ends the session.
		Signal: func(name string) {
			switch name {
			case "SIGINT":
				term.Write([]byte{0x03})
			case "SIGQUIT":
				term.Write([]byte{0x1c})
			case "SIGTSTP":
				term.Write([]byte{0x1a})
			default:
				term.Kill(ctx)
			}
		},
	})
}
