package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// The terminal WebSocket (GET /sandboxes/{id}/terminal) gives a person, or
// a program that wants raw bytes, a terminal of a sandbox: a new one, or
// one the terminal tools or an earlier WebSocket started.
//
// Query parameters:
//
//	terminal      attach to this terminal of the sandbox (its recent output
//	              is replayed first); without it a new terminal starts
//	command       what a new terminal runs, with sh -c; default bash where
//	              the sandbox has it, else sh
//	rows, cols    the terminal's size (default 24x80; attaching: resize)
//	conversation  the conversation, for clients that cannot send the
//	              X-Conversation-Id header (browsers)
//
// Messages: binary messages are the terminal's bytes both ways (the
// client's are typed input). The client's text messages are JSON control
// messages: {"type":"resize","rows":R,"cols":C}. The server's text
// messages are JSON: {"type":"started","terminal_id":ID} first;
// {"type":"exit","exit_code":N} last, when the program ended, followed by
// a normal close (1000); {"type":"error","message":TEXT} for a control
// message it could not act on, or, followed by a close with 1011, when the
// terminal was lost. When the server shuts down, or the sandbox reaches
// its maximum lifetime, it closes with 1001 (going away). When the client
// goes, the terminal is detached (it keeps running and can be attached to
// again) where the sandbox's terminals outlive their client, and its
// program is killed elsewhere. While a WebSocket is connected its sandbox
// is in use: it does not expire for being idle.

// Timing of a terminal WebSocket.
const (
	wsPingEvery  = 30 * time.Second
	wsPongWait   = 75 * time.Second // a client that answers no ping for this long is gone
	wsWriteWait  = 10 * time.Second
	wsCloseWait  = 5 * time.Second // for the client's answer to a close
	wsReadLimit  = 1 << 20         // bytes of one client message
	wsOutputSize = 32 << 10        // bytes of terminal output read at a time
)

// terminalUpgrader keeps gorilla's default origin check: a browser page of
// another origin is refused, so a page cannot use a key the browser holds
// for this server (see sameOrigin, which checks it before a terminal
// starts).
var terminalUpgrader = websocket.Upgrader{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 4 << 10, WriteBufferSize: wsOutputSize + 1<<10}

// sameOrigin is the check of gorilla's default CheckOrigin: no Origin
// header (not a browser), or one whose host is the request's.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// conversationOf returns the conversation of a terminal WebSocket: the
// X-Conversation-Id header, else the conversation query parameter (a
// browser cannot set headers on a WebSocket), checked alike.
func conversationOf(r *http.Request) (string, error) {
	conv, err := ConversationFromHeader(r.Header)
	if err != nil {
		return "", err
	}
	q := r.URL.Query().Get("conversation")
	switch {
	case q == "":
		if conv == "" {
			return "", fmt.Errorf("missing %s header (or conversation query parameter): name the conversation that owns the sandbox", HeaderConversation)
		}
		return conv, nil
	case !validConversation(q):
		return "", fmt.Errorf("conversation %q: want 1 to 200 letters, digits or ._:@/+=-", q)
	case conv != "" && conv != "conv:"+q:
		return "", fmt.Errorf("the %s header and the conversation query parameter name different conversations: send one", HeaderConversation)
	}
	return "conv:" + q, nil
}

// terminalQuery is what a terminal WebSocket asks for.
type terminalQuery struct {
	terminal, command string
	size              backend.TermSize
}

func parseTerminalQuery(q url.Values) (terminalQuery, error) {
	tq := terminalQuery{terminal: q.Get("terminal"), command: q.Get("command")}
	if tq.terminal != "" && tq.command != "" {
		return tq, errors.New("give terminal (to attach to a terminal) or command (to start one), not both")
	}
	if q.Has("command") && strings.TrimSpace(tq.command) == "" {
		return tq, errors.New("command is empty: leave it out for a shell")
	}
	var dims [2]int
	for i, name := range []string{"rows", "cols"} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 0xffff {
			return tq, fmt.Errorf("%s=%q: want a number from 1 to 65535", name, v)
		}
		dims[i] = n
	}
	tq.size = backend.TermSize{Rows: dims[0], Cols: dims[1]}
	return tq, nil
}

// serveTerminal answers GET /sandboxes/{id}/terminal (see the top of
// this file).
func (s *Server) serveTerminal(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	conv, err := conversationOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.terminalSocket(w, r, id, func(ctx context.Context, fn func(context.Context, *box) error) error {
		return s.withBox(ctx, conv, id, fn)
	})
}

// terminalSocket serves a terminal WebSocket of sandbox id, which
// withBox runs fn on (the caller has checked who may).
func (s *Server) terminalSocket(w http.ResponseWriter, r *http.Request, id string, withBox func(context.Context, func(context.Context, *box) error) error) {
	tq, err := parseTerminalQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, http.StatusUpgradeRequired, "GET /sandboxes/{id}/terminal is a WebSocket: connect with a WebSocket client")
		return
	}
	if !sameOrigin(r) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("origin %q is not this server's: a browser page of another origin cannot open terminals", r.Header.Get("Origin")))
		return
	}
	upgraded := false
	err = withBox(r.Context(), func(ctx context.Context, b *box) error {
		tr, err := s.terminaler(b)
		if err != nil {
			return err
		}
		var t *terminal
		var h backend.Terminal
		if tq.terminal != "" {
			t, h, err = s.attachSocket(ctx, b, tr, tq.terminal, tq.size)
		} else {
			t, h, err = s.startTerminal(ctx, b, tr, cmp.Or(tq.command, backend.DefaultShellScript), tq.size, false)
		}
		if err != nil {
			return err
		}
		conn, err := terminalUpgrader.Upgrade(w, r, nil)
		upgraded = true // answered, either way
		if err != nil {
			s.releaseSocket(ctx, b, tr, t, h, false)
			return nil
		}
		s.runSocket(ctx, b, tr, conn, t, h)
		return nil
	})
	if err != nil && !upgraded {
		code, msg := terminalHTTPError(err, id)
		if code >= http.StatusInternalServerError {
			s.opts.Logger.Warn("terminal WebSocket failed", "sandbox", id, "err", err)
		}
		writeError(w, code, msg)
	}
}

// terminalHTTPError is the status and message a terminal WebSocket that
// failed before it was upgraded is answered with.
func terminalHTTPError(err error, sandbox string) (int, string) {
	code := http.StatusInternalServerError
	if se, ok := errors.AsType[*statusError](err); ok {
		code = se.status
	}
	te, ok := errors.AsType[*fileops.ToolError](err)
	if !ok {
		return code, err.Error()
	}
	msg := strings.TrimPrefix(te.Error(), "Error: ")
	switch {
	case errors.Is(err, errShutdown):
		code = http.StatusServiceUnavailable
	case errors.Is(err, errNoConversation):
		code = http.StatusBadRequest
	case errors.Is(err, errSandboxGone):
		code = http.StatusNotFound
	case code == http.StatusInternalServerError:
		code = http.StatusBadRequest
	}
	return code, msg
}

// attachSocket attaches a WebSocket to terminal id of b, which need not be
// one this server knows (an earlier run's, where terminals outlive their
// client).
func (s *Server) attachSocket(ctx context.Context, b *box, tr backend.Terminaler, id string, size backend.TermSize) (*terminal, backend.Terminal, error) {
	if !tr.Detachable() {
		return nil, nil, &statusError{http.StatusConflict, toolError("terminal '%s' cannot be attached to: sandbox '%s''s terminals end with their client; "+
			"start a new one (leave terminal= out)", id, b.id)}
	}
	b.terms.mu.Lock()
	t := b.terms.m[id]
	if t != nil {
		t.sockets++
	}
	b.terms.mu.Unlock()
	if t == nil {
		if err := b.terms.reserve(ctx, tr, b.id); err != nil {
			return nil, nil, err
		}
	}
	h, err := tr.AttachTerminal(ctx, id, size)
	if err != nil {
		if t != nil {
			b.terms.mu.Lock()
			t.sockets--
			b.terms.mu.Unlock()
		} else {
			b.terms.unreserve()
		}
		if errors.Is(err, backend.ErrNotFound) {
			return nil, nil, errNoTerminal(id, b.id)
		}
		return nil, nil, fmt.Errorf("attaching to terminal %s: %w", id, err)
	}
	if t == nil {
		t = newTerminal(id, "")
		t.sockets = 1
		if !b.terms.add(t) {
			h.Close()
			return nil, nil, errGone(b.id)
		}
	}
	return t, h, nil
}

// releaseSocket ends a WebSocket's attachment h to t: detached where
// terminals outlive their client, else its program is killed. A terminal
// whose program ended is forgotten unless the tools still have to report
// it.
func (s *Server) releaseSocket(ctx context.Context, b *box, tr backend.Terminaler, t *terminal, h backend.Terminal, ended bool) {
	if !ended && !tr.Detachable() {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		if err := h.Kill(kctx); err != nil {
			s.opts.Logger.Warn("killing a terminal whose WebSocket went", "sandbox", b.id, "terminal", t.id, "err", err)
		}
		cancel()
		ended = true
	}
	h.Close()
	b.terms.mu.Lock()
	defer b.terms.mu.Unlock()
	t.sockets--
	if t.starter == h {
		t.starter = nil
	}
	if ended && t.term == nil && t.sockets == 0 && b.terms.m[t.id] == t {
		delete(b.terms.m, t.id)
	}
}

// socket writes to a WebSocket from several goroutines.
type socket struct {
	conn    *websocket.Conn
	mu      sync.Mutex
	closing atomic.Bool // a close message went out
}

func (c *socket) write(typ int, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
	return c.conn.WriteMessage(typ, data)
}

// wsMessage is a text message of the terminal WebSocket, either way.
type wsMessage struct {
	Type       string `json:"type"`
	TerminalID string `json:"terminal_id,omitempty"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	Message    string `json:"message,omitempty"`
	Rows       int    `json:"rows,omitempty"`
	Cols       int    `json:"cols,omitempty"`
}

func (c *socket) send(m wsMessage) error {
	b, _ := json.Marshal(m)
	return c.write(websocket.TextMessage, b)
}

// close sends a close message and gives the client wsCloseWait to answer.
func (c *socket) close(code int, text string) {
	c.closing.Store(true)
	c.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(wsWriteWait))
	c.conn.SetReadDeadline(time.Now().Add(wsCloseWait))
}

// runSocket connects conn and terminal t (attachment h) until the program
// ends, the client goes or ctx ends, then releases h (releaseSocket).
func (s *Server) runSocket(ctx context.Context, b *box, tr backend.Terminaler, conn *websocket.Conn, t *terminal, h backend.Terminal) {
	defer conn.Close()
	if !b.hardDeadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.hardDeadline.Sub(s.now()))
		defer cancel()
	}
	sock := &socket{conn: conn}
	var ended, leaving atomic.Bool
	conn.SetReadLimit(wsReadLimit)
	conn.SetReadDeadline(time.Now().Add(wsPongWait))
	conn.SetPongHandler(func(string) error {
		if !sock.closing.Load() {
			conn.SetReadDeadline(time.Now().Add(wsPongWait))
		}
		return nil
	})
	if sock.send(wsMessage{Type: "started", TerminalID: t.id}) != nil {
		s.releaseSocket(ctx, b, tr, t, h, false)
		return
	}

	// Output, then the exit status.
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		buf := make([]byte, wsOutputSize)
		for {
			n, err := h.Read(buf)
			if n > 0 && sock.write(websocket.BinaryMessage, buf[:n]) != nil {
				conn.Close() // the client is gone: the reader sees it
				return
			}
			switch {
			case err == nil:
				continue
			case leaving.Load():
				return
			case errors.Is(err, io.EOF):
				code, _ := h.ExitCode()
				ended.Store(true)
				sock.send(wsMessage{Type: "exit", ExitCode: &code})
				sock.close(websocket.CloseNormalClosure, fmt.Sprintf("exit code %d", code))
			default:
				sock.send(wsMessage{Type: "error", Message: fmt.Sprintf("terminal %s was lost: %v", t.id, err)})
				sock.close(websocket.CloseInternalServerErr, "terminal lost")
			}
			return
		}
	}()
	// Pings, so a client that vanished is noticed; the server's end or the
	// sandbox's hard limit close the socket.
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		tick := time.NewTicker(wsPingEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(wsWriteWait)) != nil {
					return
				}
			case <-ctx.Done():
				reason := "the sandbox reached its maximum lifetime"
				if s.life.Err() != nil {
					reason = "the sandbox server is shutting down"
				}
				sock.close(websocket.CloseGoingAway, reason)
				return
			case <-outDone:
				return
			}
		}
	}()

	// Input and control messages until the client goes or closes.
	for {
		typ, data, err := conn.ReadMessage()
		if err != nil {
			break
		}
		switch typ {
		case websocket.BinaryMessage:
			if len(data) > 0 && !ended.Load() {
				h.Write(data) // a program that ended is reported by the output side
			}
		case websocket.TextMessage:
			if msg := s.control(ctx, h, data); msg != "" {
				sock.send(wsMessage{Type: "error", Message: msg})
			}
		}
	}
	// The output side stops at the program's end, or when h is released.
	leaving.Store(true)
	s.releaseSocket(ctx, b, tr, t, h, ended.Load())
	conn.Close()
	<-outDone
	<-pingDone
}

// control acts on a client's control message, returning what was wrong
// with it ("" when nothing was).
func (s *Server) control(ctx context.Context, h backend.Terminal, data []byte) string {
	var m wsMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Sprintf("text messages are JSON control messages such as {\"type\":\"resize\",\"rows\":24,\"cols\":80} (send input as binary messages): %v", err)
	}
	switch m.Type {
	case "resize":
		if m.Rows < 1 || m.Cols < 1 || m.Rows > 0xffff || m.Cols > 0xffff {
			return fmt.Sprintf("resize to rows=%d cols=%d: want 1 to 65535 each", m.Rows, m.Cols)
		}
		if err := h.Resize(ctx, backend.TermSize{Rows: m.Rows, Cols: m.Cols}); err != nil {
			return fmt.Sprintf("resize: %v", err)
		}
		return ""
	}
	return fmt.Sprintf("unknown control message type %q: want resize", m.Type)
}
