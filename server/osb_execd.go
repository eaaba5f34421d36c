package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// OpenSandbox's execd API (execd-api.yaml) for one sandbox, over the
// backend (through sbxd where it runs): commands with execd's event stream,
// bash sessions, files and directories, metrics, ping, and execd's
// /proxy/{port}/ route to the sandbox's other ports. What differs from
// execd: a foreground command's stream ends with its last event (execd
// holds it open about a second more), a foreground command ends when its
// client goes, and commands run with bash where the image has it, else sh.

// osbShell runs $1 with bash where the sandbox has it, else sh.
const osbShell = `if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; exec sh -c "$1"`

// osbLogCap bounds what a background command's log keeps.
const osbLogCap = 8 << 20

// osbExecdError answers with execd's error shape.
func osbExecdError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, map[string]string{"code": code, "message": fmt.Sprintf(format, args...)})
}

// osbExecd serves execd's path p for conv's sandbox id.
func (s *Server) osbExecd(w http.ResponseWriter, r *http.Request, conv, id, p string) {
	if rest, ok := strings.CutPrefix(p, "/proxy/"); ok {
		s.osbExecdProxy(w, r, conv, id, rest)
		return
	}
	err := s.withBox(r.Context(), conv, id, func(ctx context.Context, b *box) error {
		if b.osbToken != "" {
			sum := sha256.Sum256([]byte(r.Header.Get(osbHeaderToken)))
			if subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(b.osbToken)) != 1 {
				dropBody(w, r)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: invalid or missing header " + osbHeaderToken})
				return nil
			}
		}
		route := r.Method + " " + p
		// Uploads stream to the sandbox; the other bodies are JSON, held
		// while they are decoded and run.
		if route != "POST /files/upload" {
			release, ok := s.admitBody(w, r, MaxJSONBodyBytes, func(w http.ResponseWriter, code int, msg string) {
				osbExecdError(w, code, "REQUEST_REJECTED", "%s", msg)
			})
			if !ok {
				return nil
			}
			defer release()
		}
		// Commands are not confined on a backend without isolation, so
		// neither are the file calls (the tools' confinement would only
		// make them disagree with the commands).
		var sb backend.Sandbox = b.sb
		if b.agent != nil {
			sb = b.agent
		}
		x := &osbExecd{s: s, b: b, sb: sb}
		if r.Method == http.MethodGet && !strings.HasPrefix(p, "/ws/session/") {
			x.serve(ctx, w, r, route, p)
			return nil
		}
		// What changes something, and a session's socket, is audited.
		e := &AuditEntry{Kind: AuditOpenSandbox, Conversation: conv, Sandbox: id, Route: "execd " + route}
		s.auditCall(e, w, r, func(w http.ResponseWriter, r *http.Request) { x.serve(withAudit(ctx, e), w, r, route, p) })
		return nil
	})
	if err != nil {
		s.osbFail(w, err, "RUNTIME_ERROR")
	}
}

// serve answers execd's route (method and path p).
func (x *osbExecd) serve(ctx context.Context, w http.ResponseWriter, r *http.Request, route, p string) {
	switch {
	case route == "GET /ping":
		w.WriteHeader(http.StatusOK)
	case route == "POST /command":
		x.run(ctx, w, r)
	case route == "DELETE /command":
		x.interrupt(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/command/status/"):
		x.status(w, strings.TrimPrefix(p, "/command/status/"))
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/command/") && strings.HasSuffix(p, "/logs"):
		x.logs(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/command/"), "/logs"))
	case route == "GET /files/info":
		x.info(ctx, w, r)
	case route == "GET /files/download":
		x.download(ctx, w, r)
	case route == "POST /files/upload":
		x.upload(ctx, w, r)
	case route == "POST /files/mv":
		x.move(ctx, w, r)
	case route == "POST /files/permissions":
		x.chmod(ctx, w, r)
	case route == "DELETE /files":
		x.removeFiles(ctx, w, r)
	case route == "GET /files/search":
		x.search(ctx, w, r)
	case route == "POST /files/replace":
		x.replace(ctx, w, r)
	case route == "GET /directories/list":
		x.list(ctx, w, r)
	case route == "POST /directories":
		x.mkdirs(ctx, w, r)
	case route == "DELETE /directories":
		x.removeDirs(ctx, w, r)
	case route == "POST /session":
		x.createSession(w, r)
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/session/") && strings.HasSuffix(p, "/run"):
		x.runInSession(ctx, w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/session/"), "/run"))
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/session/"):
		x.deleteSession(w, strings.TrimPrefix(p, "/session/"))
	case r.Method == http.MethodGet && strings.HasPrefix(p, "/ws/session/"):
		x.sessionSocket(ctx, w, r, strings.TrimPrefix(p, "/ws/session/"))
	case route == "GET /metrics":
		x.metrics(ctx, w)
	case route == "GET /metrics/watch":
		x.watchMetrics(ctx, w)
	case p == "/code" || strings.HasPrefix(p, "/code/"):
		osbExecdError(w, http.StatusNotImplemented, "NOT_SUPPORTED", "sandboxkit's execd has no code interpreter (Jupyter contexts): run code with POST /command (python3 -c ...) or a session")
	default:
		osbExecdError(w, http.StatusNotFound, "NOT_FOUND", "execd has no %s", route)
	}
}

// osbExecdProxy is execd's /proxy/{port}/{path...}: HTTP to a port of
// the sandbox, as execd forwards it to localhost:PORT inside. Deployments
// that cannot map a port hand out that route as the port's endpoint, so a
// client given one works here too. As the server's own route to a port
// (/port/...), it needs no execd access token: the route header that
// brought the request here stands for the key.
func (s *Server) osbExecdProxy(w http.ResponseWriter, r *http.Request, conv, id, rest string) {
	portText, sub, _ := strings.Cut(rest, "/")
	port, err := strconv.Atoi(portText)
	if err != nil || port < 1 || port > 65535 {
		dropBody(w, r)
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid port %q in /proxy/{port}/: want 1 to 65535", portText)
		return
	}
	s.osbPort(w, r, conv, id, port, "/"+sub)
}

// osbExecd is one request's view of a sandbox's execd.
type osbExecd struct {
	s  *Server
	b  *box
	sb backend.Sandbox
}

// osbCommand is a command execd runs.
type osbCommand struct {
	id, content string
	started     time.Time
	cancel      context.CancelFunc

	mu       sync.Mutex
	running  bool
	exitCode *int
	errMsg   string
	finished time.Time
	log      *lineLog // background commands: the output
}

// osbCommands are a sandbox's commands, by ID.
type osbCommands struct {
	mu sync.Mutex
	m  map[string]*osbCommand
}

func (c *osbCommands) add(cmd *osbCommand) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*osbCommand{}
	}
	// Forget commands that ended long ago.
	for id, old := range c.m {
		old.mu.Lock()
		stale := !old.running && time.Since(old.finished) > time.Hour
		old.mu.Unlock()
		if stale {
			delete(c.m, id)
		}
	}
	c.m[cmd.id] = cmd
}

func (c *osbCommands) get(id string) *osbCommand {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

// stopAll ends every command (the sandbox goes).
func (c *osbCommands) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cmd := range c.m {
		cmd.cancel()
	}
}

type osbRunRequest struct {
	Command    string            `json:"command"`
	Cwd        string            `json:"cwd"`
	Background bool              `json:"background"`
	Timeout    int64             `json:"timeout"`
	UID        *int              `json:"uid"`
	GID        *int              `json:"gid"`
	Envs       map[string]string `json:"envs"`
}

func newCommandID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// eventSender writes execd's events: one JSON object and a blank line
// each, flushed. It is safe for concurrent use.
type eventSender struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

func (e *eventSender) send(ev map[string]any) {
	ev["timestamp"] = time.Now().UnixMilli()
	data, _ := json.Marshal(ev)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.Write(append(data, '\n', '\n'))
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// lineEvents turns a stream into execd's line events: "\n" and "\r" end a
// line and are dropped ("\r\n" is one end), an empty line is sent as "\n",
// and a partial last line goes out at Flush.
type lineEvents struct {
	typ    string
	emit   func(typ, line string)
	buf    []byte
	lastCR bool
}

func (l *lineEvents) Write(p []byte) (int, error) {
	for _, c := range p {
		if c == '\n' || c == '\r' {
			switch {
			case len(l.buf) > 0:
				l.emit(l.typ, string(l.buf))
				l.buf = l.buf[:0]
			case c == '\n' && l.lastCR:
			default:
				l.emit(l.typ, "\n")
			}
			l.lastCR = c == '\r'
			continue
		}
		l.lastCR = false
		l.buf = append(l.buf, c)
		if len(l.buf) >= 64<<10 {
			l.emit(l.typ, string(l.buf))
			l.buf = l.buf[:0]
		}
	}
	return len(p), nil
}

func (l *lineEvents) Flush() {
	if len(l.buf) > 0 {
		l.emit(l.typ, string(l.buf))
		l.buf = l.buf[:0]
	}
}

// lineLog keeps a background command's output (both streams), a line
// and its "\n" at a time; execd's log cursor is a byte offset in it.
type lineLog struct {
	mu   sync.Mutex
	data []byte
}

func (l *lineLog) add(_, line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	line = strings.TrimSuffix(line, "\n") + "\n"
	if len(l.data)+len(line) > osbLogCap {
		return
	}
	l.data = append(l.data, line...)
}

// user is execd's uid and gid as an ExecRequest.User.
func (q osbRunRequest) user() string {
	switch {
	case q.UID == nil:
		return ""
	case q.GID == nil:
		return strconv.Itoa(*q.UID)
	}
	return strconv.Itoa(*q.UID) + ":" + strconv.Itoa(*q.GID)
}

func (x *osbExecd) run(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var q osbRunRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxJSONBodyBytes)).Decode(&q); err != nil || q.Command == "" {
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format (a command is required). %v", err)
		return
	}
	if q.UID == nil && q.GID != nil {
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "gid requires uid")
		return
	}
	if q.Timeout < 0 {
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "timeout must not be negative")
		return
	}
	x.stream(ctx, w, q.Command, q.Background, backend.ExecRequest{
		Cmd:     []string{"sh", "-c", osbShell, "sh", q.Command},
		WorkDir: q.Cwd, User: q.user(), Env: q.Envs,
		Timeout: time.Duration(q.Timeout) * time.Millisecond,
	})
}

// osbPingEvery is how often a command's stream carries a ping event while
// the command is quiet, as execd's does (proxies keep it open).
var osbPingEvery = 10 * time.Second

// stream runs req as command content and streams execd's events: in the
// background, only the init event (the output goes to the command's log).
func (x *osbExecd) stream(ctx context.Context, w http.ResponseWriter, content string, background bool, req backend.ExecRequest) {
	noteAudit(ctx, func(e *AuditEntry) { e.Argv = auditArgv(content) })
	// A foreground command ends with its stream; a background one with
	// an interrupt, its timeout or its sandbox.
	parent := ctx
	if background {
		parent = x.s.life
	}
	cctx, cancel := context.WithCancel(parent)
	cmd := &osbCommand{id: newCommandID(), content: content, started: time.Now(), cancel: cancel, running: true}
	x.b.osb.add(cmd)
	ev := &eventSender{w: w}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	ev.send(map[string]any{"type": "init", "text": cmd.id})
	if background {
		cmd.log = &lineLog{}
		out, errs := &lineEvents{typ: "stdout", emit: cmd.log.add}, &lineEvents{typ: "stderr", emit: cmd.log.add}
		req.Stdout, req.Stderr = out, errs
		x.s.bg.Go(func() {
			defer cancel()
			res, err := x.sb.Exec(cctx, req)
			out.Flush()
			errs.Flush()
			cmd.end(res, err, cctx.Err())
		})
		return
	}
	defer cancel()
	emit := func(typ, line string) { ev.send(map[string]any{"type": typ, "text": line}) }
	out, errs := &lineEvents{typ: "stdout", emit: emit}, &lineEvents{typ: "stderr", emit: emit}
	req.Stdout, req.Stderr = out, errs
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		t := time.NewTicker(osbPingEvery)
		defer t.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case <-t.C:
				ev.send(map[string]any{"type": "ping", "text": "pong"})
			}
		}
	}()
	res, err := x.sb.Exec(cctx, req)
	interrupted := cctx.Err()
	cancel()
	<-pinged
	out.Flush()
	errs.Flush()
	code, msg := cmd.end(res, err, interrupted)
	x.s.metrics.execTime.WithLabelValues("opensandbox").Observe(time.Since(cmd.started).Seconds())
	noteAudit(ctx, func(e *AuditEntry) { e.ExitCode, e.IsError = &code, err != nil })
	switch {
	case res.TimedOut:
		ev.send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": "-1", "traceback": []string{"signal: killed"}}})
	case err != nil || code != 0:
		ev.send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": strconv.Itoa(code), "traceback": []string{msg}}})
	default:
		ev.send(map[string]any{"type": "execution_complete", "execution_time": time.Since(cmd.started).Milliseconds()})
	}
}

// end records how the command ended: its exit code and a message. An
// interrupted command (interrupted is its context's error) ends with -1,
// as on execd.
func (c *osbCommand) end(res backend.ExecResult, err, interrupted error) (int, string) {
	code, msg := res.ExitCode, ""
	switch {
	case interrupted != nil:
		code, msg = -1, "interrupted"
	case err != nil:
		code, msg = 137, err.Error()
	case res.TimedOut:
		msg = "signal: killed (timeout)"
	case code != 0:
		msg = "exit status " + strconv.Itoa(code)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running, c.exitCode, c.errMsg, c.finished = false, &code, msg, time.Now()
	return code, msg
}

func (x *osbExecd) interrupt(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	if id == "" {
		osbExecdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter 'id'")
		return
	}
	cmd := x.b.osb.get(id)
	if cmd == nil {
		osbExecdError(w, http.StatusNotFound, "COMMAND_NOT_FOUND", "command not found: %s", id)
		return
	}
	cmd.cancel()
	w.WriteHeader(http.StatusOK)
}

func (x *osbExecd) status(w http.ResponseWriter, id string) {
	cmd := x.b.osb.get(id)
	if cmd == nil {
		osbExecdError(w, http.StatusNotFound, "COMMAND_NOT_FOUND", "command not found: %s", id)
		return
	}
	cmd.mu.Lock()
	defer cmd.mu.Unlock()
	st := map[string]any{"id": cmd.id, "content": cmd.content, "running": cmd.running, "started_at": cmd.started.UTC().Format(time.RFC3339Nano)}
	if cmd.exitCode != nil {
		st["exit_code"] = *cmd.exitCode
		st["finished_at"] = cmd.finished.UTC().Format(time.RFC3339Nano)
	}
	if cmd.errMsg != "" {
		st["error"] = cmd.errMsg
	}
	writeJSON(w, http.StatusOK, st)
}

// logs returns a background command's output after cursor (a byte offset:
// what was already read), and the next cursor in EXECD-COMMANDS-TAIL-CURSOR.
func (x *osbExecd) logs(w http.ResponseWriter, r *http.Request, id string) {
	cmd := x.b.osb.get(id)
	if cmd == nil || cmd.log == nil {
		osbExecdError(w, http.StatusNotFound, "COMMAND_NOT_FOUND", "no background command %s", id)
		return
	}
	from := 0
	if v := r.URL.Query().Get("cursor"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "cursor must be a non-negative integer")
			return
		}
		from = n
	}
	cmd.log.mu.Lock()
	tail := bytes.Clone(cmd.log.data[min(from, len(cmd.log.data)):])
	next := len(cmd.log.data)
	cmd.log.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("EXECD-COMMANDS-TAIL-CURSOR", strconv.Itoa(next))
	w.WriteHeader(http.StatusOK)
	w.Write(tail)
}

// metrics reports what the sandbox's /proc says (execd's Metrics).
func (x *osbExecd) metrics(ctx context.Context, w http.ResponseWriter) {
	m, err := x.readMetrics(ctx)
	if err != nil {
		osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "reading metrics: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// watchMetrics streams the metrics every second, one JSON object and a
// blank line each (as the command events), until the client goes.
func (x *osbExecd) watchMetrics(ctx context.Context, w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		m, err := x.readMetrics(ctx)
		if err != nil {
			m = map[string]any{"error": err.Error(), "timestamp": time.Now().UnixMilli()}
		}
		data, _ := json.Marshal(m)
		if _, err := w.Write(append(data, '\n', '\n')); err != nil {
			return
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readMetrics reads the sandbox's CPU count and memory.
func (x *osbExecd) readMetrics(ctx context.Context) (map[string]any, error) {
	res, err := x.sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", `n=$(nproc 2>/dev/null || echo 1); echo "$n"; cat /proc/meminfo 2>/dev/null | head -3; cat /proc/loadavg 2>/dev/null`}, Timeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	m := map[string]any{"timestamp": time.Now().UnixMilli()}
	lines := strings.Split(string(res.Stdout), "\n")
	if len(lines) > 0 {
		if n, err := strconv.Atoi(strings.TrimSpace(lines[0])); err == nil {
			m["cpu_count"] = n
		}
	}
	var total, avail float64
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "MemTotal:":
				total = kb / 1024
			case "MemAvailable:":
				avail = kb / 1024
			}
		}
	}
	if total > 0 {
		m["mem_total_mib"], m["mem_used_mib"] = total, total-avail
	}
	return m, nil
}

var _ io.Writer = (*lineEvents)(nil)
