package opensandboxtest

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/gorilla/websocket"

	"github.com/sandboxkit/sandboxkit/internal/execdws"
	"github.com/sandboxkit/sandboxkit/internal/pty"
)

// Newer execd versions keep bash sessions (POST /session, DELETE
// /session/{id}) that a WebSocket steers (GET /ws/session/{id}): with
// ?pty=1 bash runs on a pseudo-terminal. Frames are JSON both ways:
//
//	client: {"type":"stdin","data"}, {"type":"resize","cols","rows"},
//	        {"type":"signal","signal":"SIGINT"}, {"type":"ping"}
//	server: {"type":"connected","session_id","mode"}, {"type":"stdout","data"},
//	        {"type":"replay","data","offset"} (with ?since=N, before
//	        "connected"), {"type":"exit","exit_code"}, {"type":"error","error","code"},
//	        {"type":"pong"}
//
// This stand-in runs PTY mode only (pipe mode answers an error frame), and
// keeps all of a session's output for replay.

// ptySession is a bash session of execd.
type ptySession struct {
	id  string
	cwd string

	mu        sync.Mutex
	cmd       *exec.Cmd
	master    *os.File
	output    []byte // everything bash wrote, for ?since= replays
	sink      func([]byte)
	connected bool
	done      chan struct{} // closed when bash ended
	exitCode  int
}

const sessionReplayCap = 1 << 20

// sessionsOff answers as an execd without bash sessions does.
func (sb *sandbox) sessionsOff(w http.ResponseWriter) bool {
	if sb.srv.opts.NoTerminalSessions {
		http.NotFound(w, nil)
		return true
	}
	return false
}

func (sb *sandbox) createSession(w http.ResponseWriter, r *http.Request) {
	if sb.sessionsOff(w) {
		return
	}
	var body struct {
		Cwd string `json:"cwd"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, "error parsing request: "+err.Error())
			return
		}
	}
	s := &ptySession{id: "session-" + newID()[:8], cwd: body.Cwd}
	sb.srv.mu.Lock()
	if sb.sessions == nil {
		sb.sessions = map[string]*ptySession{}
	}
	sb.sessions[s.id] = s
	sb.srv.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]string{"session_id": s.id})
}

func (sb *sandbox) session(id string) *ptySession {
	sb.srv.mu.Lock()
	defer sb.srv.mu.Unlock()
	return sb.sessions[id]
}

func (sb *sandbox) deleteSession(w http.ResponseWriter, r *http.Request) {
	if sb.sessionsOff(w) {
		return
	}
	id := r.PathValue("id")
	sb.srv.mu.Lock()
	s := sb.sessions[id]
	delete(sb.sessions, id)
	sb.srv.mu.Unlock()
	if s == nil {
		writeExecdError(w, http.StatusNotFound, codeContextNotFound, "session not found: "+id)
		return
	}
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	w.WriteHeader(http.StatusOK)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// sessionWebSocket steers a session, as execd's SessionWebSocket does.
func (sb *sandbox) sessionWebSocket(w http.ResponseWriter, r *http.Request) {
	if sb.sessionsOff(w) {
		return
	}
	s := sb.session(r.PathValue("id"))
	if s == nil {
		writeExecdError(w, http.StatusNotFound, codeContextNotFound, "session not found")
		return
	}
	s.mu.Lock()
	if s.connected {
		s.mu.Unlock()
		writeExecdError(w, http.StatusConflict, codeRuntimeError, "session already connected")
		return
	}
	s.connected = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.connected, s.sink = false, nil
		s.mu.Unlock()
	}()
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	conn := execdws.New(ws)
	defer conn.Close()
	if r.URL.Query().Get("pty") != "1" {
		conn.Error("opensandboxtest runs PTY sessions only (?pty=1)", "START_FAILED")
		return
	}
	if err := sb.startSession(s); err != nil {
		conn.Error("failed to start bash: "+err.Error(), "START_FAILED")
		return
	}
	// The live sink first, then the replay: nothing falls between them.
	s.mu.Lock()
	var replay []byte
	if since, err := strconv.Atoi(r.URL.Query().Get("since")); err == nil && since >= 0 && since < len(s.output) {
		replay = append(replay, s.output[since:]...)
	}
	offset := len(s.output)
	s.sink = func(p []byte) { conn.Output(p) }
	master, done := s.master, s.done
	s.mu.Unlock()
	if len(replay) > 0 {
		conn.Send(map[string]any{"type": "replay", "data": string(replay), "offset": offset})
	}
	conn.Send(map[string]any{"type": "connected", "session_id": s.id, "mode": "pty"})
	go func() {
		select {
		case <-done:
		case <-r.Context().Done():
			return
		}
		s.mu.Lock()
		code := s.exitCode
		s.mu.Unlock()
		conn.Exit(code)
	}()
	signals := map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGHUP": syscall.SIGHUP}
	conn.Serve(execdws.Handlers{
		Stdin:  func(p []byte) error { _, err := master.Write(p); return err },
		Resize: func(rows, cols int) error { return pty.SetSize(master, rows, cols) },
		Signal: func(name string) {
			if sig, ok := signals[name]; ok {
				s.mu.Lock()
				syscall.Kill(-s.cmd.Process.Pid, sig)
				s.mu.Unlock()
			}
		},
	})
}

// startSession starts the session's bash on a 24x80 terminal unless it
// runs already, as execd's StartPTY does.
func (sb *sandbox) startSession(s *ptySession) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	master, tty, err := pty.Open()
	if err != nil {
		return err
	}
	defer tty.Close()
	pty.SetSize(master, 24, 80)
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir = sb.dir
	if s.cwd != "" {
		cmd.Dir = sb.abs(s.cwd)
	}
	cmd.Env = append(sb.processEnv(nil), "TERM=xterm-256color", "COLUMNS=80", "LINES=24")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		master.Close()
		return err
	}
	s.cmd, s.master, s.done = cmd, master, make(chan struct{})
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				s.mu.Lock()
				if len(s.output)+n <= sessionReplayCap {
					s.output = append(s.output, buf[:n]...)
				}
				sink := s.sink
				s.mu.Unlock()
				if sink != nil {
					sink(append([]byte(nil), buf[:n]...))
				}
			}
			if err != nil {
				break
			}
		}
		cmd.Wait()
		s.mu.Lock()
		s.exitCode = cmd.ProcessState.ExitCode()
		s.mu.Unlock()
		master.Close()
		close(s.done)
	}()
	return nil
}
