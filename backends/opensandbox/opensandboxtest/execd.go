package opensandboxtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const headerExecdToken = "X-EXECD-ACCESS-TOKEN"

// Error codes execd uses.
const (
	codeFileNotFound    = "FILE_NOT_FOUND"
	codeInvalidRequest  = "INVALID_REQUEST_BODY"
	codeMissingQuery    = "MISSING_QUERY"
	codeRuntimeError    = "RUNTIME_ERROR"
	codeInvalidFile     = "INVALID_FILE"
	codeInvalidFileMD   = "INVALID_FILE_METADATA"
	codeContextNotFound = "CONTEXT_NOT_FOUND"
)

// execdRoutes is one sandbox's execd.
func (sb *sandbox) execdRoutes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			sb.srv.count("execd " + pattern)
			if sb.srv.opts.Intercept != nil && sb.srv.opts.Intercept(w, r) {
				return
			}
			if !sb.admit(w, r, !strings.HasPrefix(r.URL.Path, "/proxy/")) {
				return
			}
			h(w, r)
		})
	}
	handle("GET /ping", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	handle("POST /command", sb.runCommand)
	handle("DELETE /command", sb.interruptCommand)
	handle("GET /command/status/{id}", sb.commandStatus)
	handle("GET /files/info", sb.filesInfo)
	handle("GET /files/download", sb.download)
	handle("POST /files/upload", sb.upload)
	handle("POST /files/mv", sb.rename)
	handle("POST /files/permissions", sb.chmod)
	handle("DELETE /files", sb.removeFiles)
	handle("GET /files/search", sb.search)
	handle("GET /directories/list", sb.listDir)
	handle("POST /directories", sb.makeDirs)
	handle("DELETE /directories", sb.removeDirs)
	handle("POST /session", sb.createSession)
	handle("DELETE /session/{id}", sb.deleteSession)
	handle("GET /ws/session/{id}", sb.sessionWebSocket)
	for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
		handle(m+" /proxy/{port}/{path...}", sb.proxyPort)
	}
	return mux
}

// admit checks what every execd request must satisfy (the access token
// when needToken), and holds requests while the sandbox is paused (its
// processes, execd included, are frozen).
func (sb *sandbox) admit(w http.ResponseWriter, r *http.Request, needToken bool) bool {
	if r.Header.Get(headerAPIKey) != "" {
		sb.srv.violation("%s %s reached execd of %s with the API key", r.Method, r.URL.Path, sb.id)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "the OpenSandbox API key must not be sent to a sandbox"})
		return false
	}
	if r.Header.Get(routeHeader) != sb.id {
		sb.srv.violation("%s %s reached execd of %s without the endpoint's %s header", r.Method, r.URL.Path, sb.id, routeHeader)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "missing the endpoint headers"})
		return false
	}
	for {
		sb.srv.mu.Lock()
		state, ready, changed := sb.state, sb.readyAt, sb.stateCh
		sb.srv.mu.Unlock()
		switch state {
		case "Pausing", "Paused", "Resuming":
			select {
			case <-changed:
				continue
			case <-sb.gone:
			case <-r.Context().Done():
			}
			http.Error(w, "sandbox is gone", http.StatusServiceUnavailable)
			return false
		case "Running":
			if time.Now().Before(ready) {
				http.Error(w, "execd is starting", http.StatusServiceUnavailable)
				return false
			}
		default:
			http.Error(w, "execd is not running (sandbox "+state+")", http.StatusServiceUnavailable)
			return false
		}
		break
	}
	if needToken && sb.token != "" && r.Header.Get(headerExecdToken) != sb.token {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"})
		return false
	}
	return true
}

func writeExecdError(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, code, msg)
}

// command is a command execd runs.
type command struct {
	id        string
	content   string
	pid       int
	startedAt time.Time

	mu         sync.Mutex
	running    bool
	exitCode   *int
	errMsg     string
	finishedAt time.Time
}

type runBody struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd"`
	Background bool              `json:"background"`
	Timeout    int64             `json:"timeout"`
	UID        *int              `json:"uid"`
	GID        *int              `json:"gid"`
	Envs       map[string]string `json:"envs"`
}

// runCommand streams a command's events as execd does.
func (sb *sandbox) runCommand(w http.ResponseWriter, r *http.Request) {
	var body runBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Command == "" {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	if body.Background {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, "opensandboxtest does not run background commands")
		return
	}
	if body.UID == nil && body.GID != nil {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, "gid requires uid")
		return
	}
	cwd := body.Cwd
	if cwd == "" {
		cwd = sb.dir // the image's WORKDIR, as far as execd knows
	} else if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("working directory does not exist: %s", cwd))
		return
	}
	send := eventStream(w)
	defer func() {
		// execd keeps the stream open for a moment after the last event.
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
		case <-sb.gone:
		}
	}()

	id := newID()
	logDir := filepath.Join(sb.srv.root, ".execd-logs")
	if sb.srv.opts.KeepCommandLogs {
		logDir = "/tmp"
	}
	os.MkdirAll(logDir, 0o700)
	outPath, errPath := filepath.Join(logDir, id+".stdout"), filepath.Join(logDir, id+".stderr")
	if !sb.srv.opts.KeepCommandLogs {
		defer os.Remove(outPath)
		defer os.Remove(errPath)
	}
	stdout, err1 := os.Create(outPath)
	stderr, err2 := os.Create(errPath)
	if err := errors.Join(err1, err2); err != nil {
		sendStartError(send, id, err)
		return
	}
	cmd := sb.command(body, cwd)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	err := cmd.Start()
	stdout.Close()
	stderr.Close()
	if err != nil {
		sendStartError(send, id, err)
		return
	}
	c := &command{id: id, content: body.Command, pid: cmd.Process.Pid, startedAt: start, running: true}
	sb.srv.mu.Lock()
	sb.commands[id] = c
	sb.srv.mu.Unlock()
	send(map[string]any{"type": "init", "text": id})

	// execd's timeout is exec.CommandContext's: it kills bash alone.
	if body.Timeout > 0 {
		t := time.AfterFunc(time.Duration(body.Timeout)*time.Millisecond, func() { cmd.Process.Kill() })
		defer t.Stop()
	}
	waitErr := sb.streamOutput(cmd, send, outPath, errPath)
	c.ended(waitErr, start, send)
}

// eventStream starts an answer of server-sent events on w and returns the
// function that sends one.
func eventStream(w http.ResponseWriter) func(map[string]any) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return func(ev map[string]any) {
		ev["timestamp"] = time.Now().UnixMilli()
		data, _ := json.Marshal(ev)
		w.Write(append(data, '\n', '\n'))
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// ended records that c ended (waitErr is Wait's error) and sends the last
// event: an error for a non-zero exit, else execution_complete.
func (c *command) ended(waitErr error, start time.Time, send func(map[string]any)) {
	code := 0
	if waitErr != nil {
		code = 1
		if ee, ok := waitErr.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	c.mu.Lock()
	c.running, c.exitCode, c.finishedAt = false, &code, time.Now()
	if waitErr != nil {
		c.errMsg = waitErr.Error()
	}
	c.mu.Unlock()
	if waitErr != nil {
		send(map[string]any{"type": "error", "error": map[string]any{
			"ename": "CommandExecError", "evalue": strconv.Itoa(code), "traceback": []string{waitErr.Error()},
		}})
		return
	}
	send(map[string]any{"type": "execution_complete", "execution_time": time.Since(start).Milliseconds()})
}

// sendStartError sends the events of a command that did not start.
func sendStartError(send func(map[string]any), id string, err error) {
	send(map[string]any{"type": "init", "text": id})
	send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": err.Error(), "traceback": []string{err.Error()}}})
}

// command is the bash running body's command in cwd, in a process group of
// its own, as body's uid and gid (by default the uid's group).
func (sb *sandbox) command(body runBody, cwd string) *exec.Cmd {
	cmd := exec.Command("bash", "-c", body.Command)
	cmd.Dir = cwd
	cmd.Env = sb.processEnv(body.Envs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if body.UID != nil {
		cred := &syscall.Credential{Uid: uint32(*body.UID), Gid: uint32(*body.UID)}
		if body.GID != nil {
			cred.Gid = uint32(*body.GID)
		} else if u, err := user.LookupId(strconv.Itoa(*body.UID)); err == nil {
			if g, err := strconv.Atoi(u.Gid); err == nil {
				cred.Gid = uint32(g)
			}
		}
		cmd.SysProcAttr.Credential = cred
	}
	return cmd
}

// streamOutput sends the lines the started cmd writes to its output files
// as events, with a ping now and then, until it exits (or the sandbox is
// removed), and returns Wait's error.
func (sb *sandbox) streamOutput(cmd *exec.Cmd, send func(map[string]any), outPath, errPath string) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	outTail := &tailer{path: outPath}
	errTail := &tailer{path: errPath}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	ping := time.NewTicker(3 * time.Second)
	defer ping.Stop()
	emit := func(final bool) {
		for _, line := range outTail.read(final) {
			send(map[string]any{"type": "stdout", "text": line})
		}
		for _, line := range errTail.read(final) {
			send(map[string]any{"type": "stderr", "text": line})
		}
	}
	var waitErr error
loop:
	for {
		select {
		case waitErr = <-done:
			break loop
		case <-tick.C:
			emit(false)
		case <-ping.C:
			send(map[string]any{"type": "ping"})
		case <-sb.gone:
			waitErr = <-done
			break loop
		}
	}
	emit(true)
	return waitErr
}

// tailer reads what a command appended to an output file and splits it into
// lines as execd's tailer does: "\n" and "\r" end lines and are dropped, an
// empty line is sent as "\n", and a partial last line waits until the
// command ends.
type tailer struct {
	path   string
	off    int64
	buf    bytes.Buffer
	lastCR bool
}

func (t *tailer) read(final bool) []string {
	f, err := os.Open(t.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	data := make([]byte, 0, 4096)
	chunk := make([]byte, 64<<10)
	for {
		n, err := f.ReadAt(chunk, t.off)
		data = append(data, chunk[:n]...)
		t.off += int64(n)
		if err != nil || n == 0 {
			break
		}
	}
	var lines []string
	for _, b := range data {
		if b == '\n' || b == '\r' {
			switch {
			case t.buf.Len() > 0:
				lines = append(lines, t.buf.String())
				t.buf.Reset()
			case b == '\n' && t.lastCR:
			default:
				lines = append(lines, "\n")
			}
			t.lastCR = b == '\r'
			continue
		}
		t.lastCR = false
		t.buf.WriteByte(b)
	}
	if final && t.buf.Len() > 0 {
		lines = append(lines, t.buf.String())
		t.buf.Reset()
	}
	return lines
}

// interruptCommand signals a command's process group: SIGTERM, then SIGKILL
// if it is still there after 3 s.
func (sb *sandbox) interruptCommand(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		writeExecdError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'id'")
		return
	}
	sb.srv.mu.Lock()
	c := sb.commands[id]
	sb.srv.mu.Unlock()
	if c == nil {
		writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, "error interrupting: no such session")
		return
	}
	if err := syscall.Kill(-c.pid, syscall.SIGTERM); err == nil {
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if syscall.Kill(-c.pid, 0) != nil {
				w.WriteHeader(http.StatusOK)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		syscall.Kill(-c.pid, syscall.SIGKILL)
	}
	w.WriteHeader(http.StatusOK)
}

func (sb *sandbox) commandStatus(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb.srv.mu.Lock()
	c := sb.commands[id]
	sb.srv.mu.Unlock()
	if c == nil {
		writeExecdError(w, http.StatusNotFound, "COMMAND_NOT_FOUND", "command not found: "+id)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := map[string]any{"id": c.id, "content": c.content, "running": c.running, "started_at": c.startedAt.UTC().Format(time.RFC3339)}
	if c.exitCode != nil {
		st["exit_code"] = *c.exitCode
		st["finished_at"] = c.finishedAt.UTC().Format(time.RFC3339)
	}
	if c.errMsg != "" {
		st["error"] = c.errMsg
	}
	writeJSON(w, http.StatusOK, st)
}

// proxyPort forwards an HTTP request to a port of the sandbox (which
// shares this host's network), as execd's /proxy/{port}/ route does.
func (sb *sandbox) proxyPort(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, "invalid port "+r.PathValue("port"))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(port)
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+r.PathValue("path"), ""
			pr.Out.Host = pr.Out.URL.Host
			pr.Out.Header.Del(routeHeader)
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeExecdError(w, http.StatusBadGateway, codeRuntimeError, fmt.Sprintf("proxying to port %d: %v", port, err))
		},
	}
	rp.ServeHTTP(w, r)
}
