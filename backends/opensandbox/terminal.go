package opensandbox

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/pipeterm"
)

// Terminals use execd's bash sessions where execd has them (newer
// versions than the specs here): POST /session makes one, and a WebSocket
// on GET /ws/session/{id}?pty=1 starts bash on a pseudo-terminal and
// carries JSON frames both ways (stdin, resize, output, exit). Bash then
// runs the request's program: the line typed to it prints a marker, changes
// directory, exports the environment and execs the program, and everything
// up to the marker (the prompt and the echo of that line) is dropped, so
// the client sees the program's output only. An execd without sessions
// answers 404, and Terminal fails with errors.ErrUnsupported saying so.

// termMarkerPrefix is what the typed line prints before the program runs;
// it types it as "\163bx-go-" so that its echo never matches.
const termMarkerPrefix = "sbx-go-"

// maxBeforeMarker bounds what is held back while waiting for the marker.
const maxBeforeMarker = 256 << 10

// Terminal runs req on a pseudo-terminal of execd's bash sessions. These
// end with their client (Close deletes the session); the program runs as
// execd's user, so another user is refused.
func (s *Sandbox) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	if err := req.Check(); err != nil {
		return nil, s.opErr("terminal", err)
	}
	env := req.EnvWithTerm()
	for k := range env {
		if !envNameRE().MatchString(k) {
			return nil, s.opErr("terminal", fmt.Errorf("%w: environment variable name %q: want letters, digits and '_'", backend.ErrInvalidConfig, k))
		}
	}
	x, err := s.execd(ctx)
	if err != nil {
		return nil, s.opErr("terminal", s.gone(ctx, err))
	}
	p, err := s.probe(ctx)
	if err != nil {
		return nil, s.opErr("terminal", s.gone(ctx, err))
	}
	cred, err := s.credential(ctx, req.User)
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	if cred.uid != nil && *cred.uid != 0 {
		user := req.User
		if user == "" {
			user = s.user
		}
		return nil, s.opErr("terminal", fmt.Errorf("%w: a terminal as user %q: execd's terminal sessions run bash as execd's own user (root)", errors.ErrUnsupported, user))
	}
	wd := req.WorkDir
	switch {
	case wd == "":
		wd = p.workDir
	case !path.IsAbs(wd):
		wd = path.Join(p.workDir, wd)
	}
	var created struct {
		SessionID string `json:"session_id"`
	}
	if err := x.json(ctx, http.MethodPost, "/session", nil, struct{}{}, &created); err != nil {
		return nil, s.opErr("terminal", noSessions(err))
	}
	if created.SessionID == "" {
		return nil, s.opErr("terminal", fmt.Errorf("%s: POST /session answered no session_id", ServiceExecd))
	}
	id := created.SessionID
	conn, err := s.dialSession(ctx, x, id)
	if err != nil {
		s.deleteSession(x, id)
		return nil, s.opErr("terminal", s.gone(ctx, noSessions(err)))
	}
	t := &sessionTerm{conn: conn, marker: termMarkerPrefix + id}
	size := req.SizeOrDefault()
	if err := t.begin(size, typedLine(id, wd, env, req.Cmd)); err != nil {
		conn.Close()
		s.deleteSession(x, id)
		return nil, s.opErr("terminal", err)
	}
	return pipeterm.Start(id, t.run, pipeterm.Ops{
		Resize: func(_ context.Context, size backend.TermSize) error {
			if size.Rows <= 0 || size.Cols <= 0 {
				return s.opErr("terminal", fmt.Errorf("%w: size %dx%d", backend.ErrInvalidConfig, size.Cols, size.Rows))
			}
			return t.send(map[string]any{"type": "resize", "rows": size.Rows, "cols": size.Cols})
		},
		Kill: func(ctx context.Context) error {
			err := s.deleteSession(x, id)
			if errors.Is(err, backend.ErrNotFound) {
				return nil // ended already
			}
			return err
		},
	}), nil
}

// noSessions explains the answer of an execd that has no bash sessions.
func noSessions(err error) error {
	var ae *APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed) ||
		errors.Is(err, websocket.ErrBadHandshake) {
		return fmt.Errorf("%w: this sandbox's execd has no terminal sessions (POST /session and GET /ws/session/{id}?pty=1; newer OpenSandbox execd versions have them): %w", errors.ErrUnsupported, err)
	}
	return err
}

// dialSession opens the session's WebSocket with execd's headers.
func (s *Sandbox) dialSession(ctx context.Context, x *execd, id string) (*websocket.Conn, error) {
	u := *x.base
	u.Path = x.base.Path + "/ws/session/" + id
	u.RawQuery = "pty=1"
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	d := websocket.Dialer{HandshakeTimeout: s.b.cfg.requestTimeout(), Proxy: http.ProxyFromEnvironment}
	if tr, ok := s.b.c.http.Transport.(*http.Transport); ok && tr.TLSClientConfig != nil {
		d.TLSClientConfig = tr.TLSClientConfig.Clone()
	} else if u.Scheme == "wss" {
		d.TLSClientConfig = &tls.Config{}
	}
	conn, resp, err := d.DialContext(ctx, u.String(), x.headers.Clone())
	if err != nil {
		if resp != nil {
			defer resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
				return nil, apiErrorFrom(ServiceExecd, resp, x.redact)
			}
			return nil, fmt.Errorf("%s: opening the terminal's WebSocket at %s: %w", ServiceExecd, x.where, apiErrorFrom(ServiceExecd, resp, x.redact))
		}
		return nil, x.c.transportError(ServiceExecd, x.where, err)
	}
	return conn, nil
}

// deleteSession ends a session (its bash, or the program it became).
func (s *Sandbox) deleteSession(x *execd, id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.b.cfg.requestTimeout())
	defer cancel()
	return x.json(ctx, http.MethodDelete, "/session/"+id, nil, nil, nil)
}

// typedLine is what is typed to the session's bash: print the marker,
// then run the program in dir with env, ending bash with its status.
// Everything is ANSI-C quoted, so no control character reaches the line
// editor as a key.
func typedLine(id, dir string, env map[string]string, argv []string) string {
	var b strings.Builder
	b.WriteString(` printf '\163bx-go-%s\n' ` + ansiQuote(id) + `; cd -- ` + ansiQuote(dir))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString(" && export " + k + "=" + ansiQuote(env[k]))
	}
	b.WriteString(" && exec")
	for _, a := range argv {
		b.WriteString(" " + ansiQuote(a))
	}
	b.WriteString("; exit $?\r")
	return b.String()
}

// ansiQuote quotes s as bash's $'...', with every byte outside printable
// ASCII as an escape.
func ansiQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// sessionTerm is one client of a session's WebSocket.
type sessionTerm struct {
	conn    *websocket.Conn
	marker  string // what the typed line prints before the program runs
	writeMu sync.Mutex
}

// begin sends the terminal's size and the line that starts its program;
// either failing fails the terminal (the caller once checked a shadowed
// err and let both failures pass).
func (t *sessionTerm) begin(size backend.TermSize, line string) error {
	if err := t.send(map[string]any{"type": "resize", "rows": size.Rows, "cols": size.Cols}); err != nil {
		return err
	}
	return t.send(map[string]any{"type": "stdin", "data": line})
}

func (t *sessionTerm) send(frame map[string]any) error {
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	t.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := t.conn.WriteJSON(frame); err != nil {
		return fmt.Errorf("%s: terminal: %w", ServiceExecd, err)
	}
	return nil
}

// serverFrame is a frame execd sends.
type serverFrame struct {
	Type     string `json:"type"`
	Data     string `json:"data"`
	ExitCode *int   `json:"exit_code"`
	Error    string `json:"error"`
	Code     string `json:"code"`
}

// run is the terminal's stream: typed input goes out as stdin frames, the
// program's output (after the marker) comes back, until the exit frame.
func (t *sessionTerm) run(ctx context.Context, stdin io.Reader, stdout io.Writer) (int, error) {
	defer t.conn.Close()
	stop := context.AfterFunc(ctx, func() { t.conn.Close() })
	defer stop()
	out := &markerFilter{w: stdout, marker: []byte(t.marker), seen: make(chan struct{})}
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		// Input waits for the marker: typed while bash's line editor
		// still has the terminal in its own mode, a carriage return is
		// not turned into the newline the program's line discipline
		// ends a line with.
		select {
		case <-out.seen:
		case <-ended:
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := stdin.Read(buf)
			if n > 0 && t.send(map[string]any{"type": "stdin", "data": string(buf[:n])}) != nil {
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		_, msg, err := t.conn.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return -1, fmt.Errorf("%s: terminal: the stream ended without the program's exit status: %w", ServiceExecd, err)
		}
		var f serverFrame
		if err := json.Unmarshal(msg, &f); err != nil {
			return -1, fmt.Errorf("%s: terminal: unreadable frame %.100q: %w", ServiceExecd, msg, err)
		}
		switch f.Type {
		case "stdout", "stderr", "replay":
			if _, err := out.Write([]byte(f.Data)); err != nil {
				return -1, err
			}
		case "exit":
			if f.ExitCode == nil {
				return -1, fmt.Errorf("%s: terminal: an exit frame without exit_code", ServiceExecd)
			}
			code := *f.ExitCode
			if code < 0 {
				code = 137 // killed: as a shell reports SIGKILL
			}
			return code, nil
		case "error":
			return -1, fmt.Errorf("%s: terminal: %s (%s)", ServiceExecd, f.Error, f.Code)
		}
	}
}

// markerFilter drops output up to and including the marker line the typed
// line prints, then passes everything on.
type markerFilter struct {
	w      io.Writer
	marker []byte
	seen   chan struct{} // closed once the marker went by
	held   []byte
	passed bool
}

func (m *markerFilter) Write(p []byte) (int, error) {
	if m.passed {
		return m.w.Write(p)
	}
	m.held = append(m.held, p...)
	i := bytes.Index(m.held, m.marker)
	if i < 0 {
		if len(m.held) > maxBeforeMarker {
			// No marker in sight: show what there is rather than nothing.
			m.pass()
			_, err := m.w.Write(m.held)
			m.held = nil
			return len(p), err
		}
		return len(p), nil
	}
	end := bytes.IndexByte(m.held[i:], '\n')
	if end < 0 {
		return len(p), nil
	}
	rest := m.held[i+end+1:]
	m.held = nil
	m.pass()
	if len(rest) > 0 {
		if _, err := m.w.Write(rest); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

func (m *markerFilter) pass() {
	m.passed = true
	close(m.seen)
}

var _ backend.Terminaler = (*Sandbox)(nil)
