package server

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The audit trail: one JSON line per thing done to a sandbox or the
// server (every tool call, terminal start, OpenSandbox API change and
// admin action), with who asked (the conversation), the sandbox, what ran
// (argv) or was touched (path), the outcome (exit code, HTTP status),
// the duration and the bytes written. It never holds file contents,
// output, request bodies, headers or keys.

// Kinds of audit entries.
const (
	AuditTool        = "tool"        // an MCP or HTTP tool call
	AuditTerminal    = "terminal"    // a terminal opened over the WebSocket route
	AuditOpenSandbox = "opensandbox" // a change through the OpenSandbox API (its execd too)
	AuditAdmin       = "admin"       // an operator's call to /admin
)

// AuditEntry is one line of the audit trail.
type AuditEntry struct {
	Time         time.Time `json:"time"`
	Kind         string    `json:"kind"`
	Conversation string    `json:"conversation,omitempty"`
	Sandbox      string    `json:"sandbox,omitempty"`
	// Tool is a tool's name (kind tool); Route the HTTP route otherwise
	// ("POST /v1/sandboxes", "execd POST /command", ...).
	Tool  string `json:"tool,omitempty"`
	Route string `json:"route,omitempty"`
	// Argv is what ran (a command, a terminal's program); Path the file
	// or folder a call read, wrote or listed.
	Argv []string `json:"argv,omitempty"`
	Path string   `json:"path,omitempty"`
	// ExitCode is a command's, when it ran to the end in the call.
	ExitCode *int `json:"exit_code,omitempty"`
	// Status is the HTTP status answered (routes); IsError says the call
	// failed (tools: the agent was told so).
	Status     int     `json:"status,omitempty"`
	IsError    bool    `json:"is_error,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	// Bytes is what the call sent into the sandbox: a file's size, a
	// request body's length.
	Bytes int64 `json:"bytes,omitempty"`
}

// Defaults of the audit file's rotation.
const (
	DefaultAuditMaxBytes = 64 << 20
	DefaultAuditKeep     = 5
	// auditRing is how many entries are kept in memory for /admin/audit
	// when there is no audit file.
	auditRing = 2000
	// maxAuditAnswer caps the entries one /admin/audit answers with.
	maxAuditAnswer = 10000
)

// auditLog writes the trail to a file (Options.AuditFile), rotated at
// maxBytes into path.1 ... path.keep, and keeps the latest entries in
// memory.
type auditLog struct {
	mu       sync.Mutex
	path     string // "": memory only
	maxBytes int64
	keep     int
	f        *os.File
	size     int64
	ring     []AuditEntry
	next     int // where the ring's next entry goes once full
	failed   bool
	log      func(msg string, args ...any)
}

func newAuditLog(path string, maxBytes int64, keep int, warn func(string, ...any)) (*auditLog, error) {
	a := &auditLog{path: path, maxBytes: maxBytes, keep: keep, log: warn}
	if path == "" {
		return a, nil
	}
	if err := a.open(); err != nil {
		return nil, fmt.Errorf("audit file %s: %w", path, err)
	}
	return a, nil
}

func (a *auditLog) open() error {
	if err := os.MkdirAll(filepath.Dir(a.path), 0o750); err != nil {
		return err
	}
	f, err := os.OpenFile(a.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	a.f, a.size = f, fi.Size()
	return nil
}

// add records e.
func (a *auditLog) add(e AuditEntry) {
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ring) < auditRing {
		a.ring = append(a.ring, e)
	} else {
		a.ring[a.next] = e
		a.next = (a.next + 1) % auditRing
	}
	if a.f == nil {
		return
	}
	if a.size > 0 && a.size+int64(len(line)) > a.maxBytes {
		if err := a.rotate(); err != nil {
			a.warnOnce("rotating the audit file", err)
			return
		}
	}
	n, err := a.f.Write(line)
	a.size += int64(n)
	if err != nil {
		a.warnOnce("writing the audit file", err)
		return
	}
	a.failed = false
}

func (a *auditLog) warnOnce(what string, err error) {
	if !a.failed {
		a.log(what+" failed: entries are kept in memory only until it works again", "file", a.path, "err", err)
	}
	a.failed = true
}

// rotate moves path.k to path.k+1 (dropping the oldest), path to path.1,
// and opens a new path.
func (a *auditLog) rotate() error {
	a.f.Close()
	a.f = nil
	for k := a.keep; k >= 1; k-- {
		from := a.path
		if k > 1 {
			from += "." + strconv.Itoa(k-1)
		}
		if err := os.Rename(from, a.path+"."+strconv.Itoa(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if a.keep < 1 {
		if err := os.Remove(a.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return a.open()
}

func (a *auditLog) close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// auditFilter selects entries for /admin/audit.
type auditFilter struct {
	conversation, sandbox, kind, tool string
	since                             time.Time
	limit                             int
}

func (q auditFilter) match(e AuditEntry) bool {
	return (q.conversation == "" || e.Conversation == q.conversation) &&
		(q.sandbox == "" || e.Sandbox == q.sandbox) &&
		(q.kind == "" || e.Kind == q.kind) &&
		(q.tool == "" || e.Tool == q.tool) &&
		(q.since.IsZero() || !e.Time.Before(q.since))
}

// read returns the latest q.limit entries q matches, oldest first: from
// the files, oldest file first, when there is a file, else from memory.
func (a *auditLog) read(q auditFilter) ([]AuditEntry, error) {
	var out []AuditEntry
	keep := func(e AuditEntry) {
		if !q.match(e) {
			return
		}
		out = append(out, e)
		if len(out) > 2*q.limit {
			out = append(out[:0], out[len(out)-q.limit:]...)
		}
	}
	a.mu.Lock()
	if a.path == "" {
		for i := range a.ring {
			keep(a.ring[(a.next+i)%len(a.ring)])
		}
		a.mu.Unlock()
	} else {
		// Held while reading, so that no rotation renames a file under
		// the reader.
		defer a.mu.Unlock()
		for k := a.keep; k >= 0; k-- {
			p := a.path
			if k > 0 {
				p += "." + strconv.Itoa(k)
			}
			if err := scanAudit(p, keep); err != nil {
				return nil, err
			}
		}
	}
	if len(out) > q.limit {
		out = out[len(out)-q.limit:]
	}
	return out, nil
}

func scanAudit(p string, fn func(AuditEntry)) error {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e AuditEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			fn(e)
		}
	}
	return sc.Err()
}

// serveAudit is GET /admin/audit: the latest entries of the trail, oldest
// first, filtered by the query's conversation, sandbox, kind, tool and
// since (RFC 3339); limit (default 100, at most 10000).
func (s *Server) serveAudit(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := auditFilter{conversation: v.Get("conversation"), sandbox: v.Get("sandbox"), kind: v.Get("kind"), tool: v.Get("tool"), limit: 100}
	if t := v.Get("since"); t != "" {
		since, err := time.Parse(time.RFC3339, t)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since %q: want an RFC 3339 time such as 2026-11-29T15:04:05Z", t))
			return
		}
		q.since = since
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxAuditAnswer {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1 to %d", l, maxAuditAnswer))
			return
		}
		q.limit = n
	}
	entries, err := s.audit.read(q)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "reading the audit trail: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
}

// auditKey holds, in a call's context, the entry being written for it,
// which the code running the call fills in (noteAudit).
type auditKey struct{}

func withAudit(ctx context.Context, e *AuditEntry) context.Context {
	return context.WithValue(ctx, auditKey{}, e)
}

// noteAudit lets fn fill in the entry of the call ctx belongs to, if any.
func noteAudit(ctx context.Context, fn func(*AuditEntry)) {
	if e, ok := ctx.Value(auditKey{}).(*AuditEntry); ok {
		fn(e)
	}
}

// record finishes e (time taken since start) and adds it to the trail.
func (s *Server) record(e *AuditEntry, start time.Time) {
	e.Time = start.UTC()
	e.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	s.audit.add(*e)
}

// toolAuditEntry is the entry of a call of tool with input in: the
// sandbox, path and command it names, and the bytes it writes.
func toolAuditEntry(tool, conv string, in any) *AuditEntry {
	e := &AuditEntry{Kind: AuditTool, Tool: tool, Conversation: conv}
	v := reflect.Indirect(reflect.ValueOf(in))
	if v.Kind() != reflect.Struct {
		return e
	}
	str := func(name string) string {
		f := v.FieldByName(name)
		if f.IsValid() && f.Kind() == reflect.String {
			return f.String()
		}
		return ""
	}
	e.Sandbox, e.Path = str("SandboxID"), str("Path")
	e.Argv = auditArgv(str("Command"))
	// What goes into the sandbox: a new file's content, an edit's text,
	// a terminal's input.
	for _, f := range []string{"Content", "NewString", "Input"} {
		e.Bytes += int64(len(str(f)))
	}
	return e
}

// auditRoute wraps an HTTP handler so that each request it serves is one
// entry of kind (its route, the sandbox of the path's {id}, the status,
// the body's length); the handler may fill in more (noteAudit).
func (s *Server) auditRoute(kind string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := &AuditEntry{Kind: kind}
		if conv, err := ConversationFromHeader(r.Header); err == nil {
			e.Conversation = conv
		}
		s.auditCall(e, w, r, next.ServeHTTP)
	})
}

// auditCall serves r with fn as one entry, e, of the trail: the route,
// the path's {id} as the sandbox (unless e names one), the status and the
// body's length are filled in; fn may fill in more (noteAudit).
func (s *Server) auditCall(e *AuditEntry, w http.ResponseWriter, r *http.Request, fn func(http.ResponseWriter, *http.Request)) {
	start := time.Now()
	e.Route = cmp.Or(e.Route, r.Pattern)
	e.Sandbox = cmp.Or(e.Sandbox, r.PathValue("id"))
	e.Bytes = max(r.ContentLength, 0)
	sw, wrapped := w.(*statusWriter)
	if !wrapped {
		sw = &statusWriter{ResponseWriter: w}
	}
	fn(sw, r.WithContext(withAudit(r.Context(), e)))
	e.Status = sw.code()
	s.record(e, start)
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// code is the status answered: 101 for a WebSocket taken over, 200 when
// the handler wrote nothing.
func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Unwrap lets http.ResponseController reach Flush, Hijack and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack takes the connection over (a WebSocket upgrade): the status is
// then 101.
func (w *statusWriter) Hijack() (c net.Conn, rw *bufio.ReadWriter, err error) {
	c, rw, err = http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.status == 0 {
		w.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// auditArgv is how an entry names a command given as a shell script.
func auditArgv(script string) []string {
	if strings.TrimSpace(script) == "" {
		return nil
	}
	return []string{"sh", "-c", script}
}
