package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/internal/termbuf"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// wsMsg is a text message of the terminal WebSocket.
type wsMsg struct {
	Type       string `json:"type"`
	TerminalID string `json:"terminal_id"`
	ExitCode   *int   `json:"exit_code"`
	Message    string `json:"message"`
}

// wsTerm is a client of the terminal WebSocket.
type wsTerm struct {
	t       *testing.T
	ctx     context.Context
	conn    *websocket.Conn
	started wsMsg
	out     *termbuf.Buffer // the terminal's bytes
	texts   chan wsMsg      // the server's text messages after started
	closed  chan struct{}   // the connection ended
	// closeCode is the code of the server's close message (after closed).
	closeCode int
}

// wsURL is the terminal endpoint of sandbox id on the server at base.
func wsURL(base, id string, query url.Values) string {
	return "ws" + strings.TrimPrefix(base, "http") + "/sandboxes/" + url.PathEscape(id) + "/terminal?" + query.Encode()
}

// dialTerm connects to the terminal endpoint; the handshake's answer is
// returned when it failed.
func dialTerm(t *testing.T, base, id string, query url.Values, header http.Header) (*wsTerm, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	conn, resp, err := websocket.DefaultDialer.DialContext(ctx, wsURL(base, id, query), header)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { conn.Close() })
	w := &wsTerm{t: t, ctx: ctx, conn: conn, texts: make(chan wsMsg, 16), closed: make(chan struct{})}
	typ, data, err := conn.ReadMessage()
	require.NoError(t, err, "the first message")
	require.Equal(t, websocket.TextMessage, typ, "the first message is text: %q", data)
	require.NoError(t, json.Unmarshal(data, &w.started))
	require.Equal(t, "started", w.started.Type, "%s", data)
	require.NotEmpty(t, w.started.TerminalID)
	pr, pw := io.Pipe()
	w.out = termbuf.Pump(pr, 1<<20)
	go func() {
		defer close(w.closed)
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
					w.closeCode = ce.Code
				}
				pw.Close()
				return
			}
			switch typ {
			case websocket.BinaryMessage:
				pw.Write(data)
			case websocket.TextMessage:
				var m wsMsg
				if err := json.Unmarshal(data, &m); err != nil {
					m = wsMsg{Type: "bad JSON: " + string(data)}
				}
				w.texts <- m
			}
		}
	}()
	return w, resp, nil
}

// mustDial connects to the terminal endpoint, which must accept.
func mustDial(t *testing.T, base, id string, query url.Values, header http.Header) *wsTerm {
	t.Helper()
	w, resp, err := dialTerm(t, base, id, query, header)
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = resp.Status + ": " + string(b)
		}
		t.Fatalf("dialing the terminal: %v %s", err, body)
	}
	return w
}

// refused dials the terminal endpoint, which must refuse with status
// code, and returns the body of the answer.
func refused(t *testing.T, base, id string, query url.Values, header http.Header, code int) string {
	t.Helper()
	_, resp, err := dialTerm(t, base, id, query, header)
	require.Error(t, err)
	require.NotNil(t, resp, "%v", err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, code, resp.StatusCode, "%s", body)
	return string(body)
}

// typeIn sends keys as a binary message.
func (w *wsTerm) typeIn(keys string) {
	w.t.Helper()
	require.NoError(w.t, w.conn.WriteMessage(websocket.BinaryMessage, []byte(keys)))
}

// expect types keys and waits for want in the output.
func (w *wsTerm) expect(keys, want string) {
	w.t.Helper()
	if keys != "" {
		w.typeIn(keys)
	}
	if got, ok := w.out.WaitFor(w.ctx, want); !ok {
		w.t.Fatalf("typed %q: no %q in the output; got %q", keys, want, got)
	}
}

// text waits for the server's next text message.
func (w *wsTerm) text() wsMsg {
	w.t.Helper()
	select {
	case m := <-w.texts:
		return m
	case <-w.ctx.Done():
		w.t.Fatal("no text message from the server")
	}
	return wsMsg{}
}

func (w *wsTerm) control(v any) {
	w.t.Helper()
	b, err := json.Marshal(v)
	require.NoError(w.t, err)
	require.NoError(w.t, w.conn.WriteMessage(websocket.TextMessage, b))
}

// leave closes the connection as a client does.
func (w *wsTerm) leave() {
	w.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	<-w.closed
	w.conn.Close()
}

func TestTerminalWebSocket(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.APIKey = "k3y" })
	base := serveHTTP(t, s)
	call := servertest.HTTP(base, "k3y", "c")
	id := servertest.Create(t, call, nil)
	owner := http.Header{"Authorization": {"Bearer k3y"}, server.HeaderConversation: {"c"}}

	t.Run("Session", func(t *testing.T) {
		w := mustDial(t, base, id, url.Values{"rows": {"24"}, "cols": {"80"}}, owner)
		w.expect("echo hel''lo-ws\r", "hello-ws")
		w.expect("echo size-''$(stty size)\r", "size-24 80")
		w.control(map[string]any{"type": "resize", "rows": 33, "cols": 111})
		w.expect("stty size\r", "33 111")
		// A control message the server cannot act on is answered, and the
		// session carries on.
		require.NoError(t, w.conn.WriteMessage(websocket.TextMessage, []byte("ls\r")))
		assert.Equal(t, "error", w.text().Type)
		w.control(map[string]any{"type": "resize", "rows": 0, "cols": 80})
		assert.Contains(t, w.text().Message, "rows=0")
		w.expect("echo still-''here\r", "still-here")
		w.typeIn("exit 3\r")
		m := w.text()
		assert.Equal(t, "exit", m.Type)
		require.NotNil(t, m.ExitCode)
		assert.Equal(t, 3, *m.ExitCode)
		<-w.closed
		assert.Equal(t, websocket.CloseNormalClosure, w.closeCode)
		// Its program ended: the terminal is gone.
		assert.Contains(t, servertest.Fails(t, call, "terminal_read", termArgs(id, w.started.TerminalID, nil)), "not found")
	})

	t.Run("Command", func(t *testing.T) {
		w := mustDial(t, base, id, url.Values{"command": {"echo from-command; exit 4"}}, owner)
		w.expect("", "from-command")
		m := w.text()
		require.Equal(t, "exit", m.Type)
		assert.Equal(t, 4, *m.ExitCode)
	})

	t.Run("AttachToToolTerminal", func(t *testing.T) {
		term, _ := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "sh", "wait_for": prompt}))
		servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "echo mark-''one\n", "wait_for": "mark-one"}))
		w := mustDial(t, base, id, url.Values{"terminal": {term}}, owner)
		assert.Equal(t, term, w.started.TerminalID)
		w.expect("", "mark-one") // replayed
		w.expect("echo two-''ws\r", "two-ws")
		w.leave()
		// Detached: the terminal runs on, for the tools too.
		out := servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "echo three-''tools\n", "wait_for": "three-tools"}))
		assert.Contains(t, out, "two-ws")
		assert.Contains(t, out, "wait_for matched")
		servertest.Must(t, call, "terminal_close", termArgs(id, term, nil))
	})

	t.Run("DetachAttach", func(t *testing.T) {
		w := mustDial(t, base, id, url.Values{"command": {"sh"}}, owner)
		term := w.started.TerminalID
		w.expect("echo before-''detach\r", "before-detach")
		w.leave()
		// The conversation query parameter serves clients without headers.
		again := mustDial(t, base, id, url.Values{"terminal": {term}, "conversation": {"c"}, "rows": {"30"}, "cols": {"90"}},
			http.Header{"Authorization": {"Bearer k3y"}})
		again.expect("", "before-detach")
		again.expect("echo after-''$(stty size)\r", "after-30 90")
		// The tools reach a WebSocket's terminal as well.
		out := servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "echo via-''tools\n", "wait_for": "via-tools"}))
		assert.Contains(t, out, "wait_for matched")
		again.expect("", "via-tools")
		servertest.Must(t, call, "terminal_close", termArgs(id, term, nil))
		m := again.text()
		assert.Equal(t, "exit", m.Type)
		<-again.closed
	})

	t.Run("Refused", func(t *testing.T) {
		refused(t, base, id, nil, http.Header{"Authorization": {"Bearer wrong"}, server.HeaderConversation: {"c"}}, http.StatusUnauthorized)
		refused(t, base, id, nil, http.Header{server.HeaderConversation: {"c"}}, http.StatusUnauthorized)
		other := http.Header{"Authorization": {"Bearer k3y"}, server.HeaderConversation: {"other"}}
		assert.Contains(t, refused(t, base, id, nil, other, http.StatusNotFound), "was not found")
		assert.Contains(t, refused(t, base, id, url.Values{"conversation": {"other"}}, http.Header{"Authorization": {"Bearer k3y"}}, http.StatusNotFound),
			"was not found")
		refused(t, base, "no-such-sandbox", nil, owner, http.StatusNotFound)
		assert.Contains(t, refused(t, base, id, nil, http.Header{"Authorization": {"Bearer k3y"}}, http.StatusBadRequest), "X-Conversation-Id")
		assert.Contains(t, refused(t, base, id, url.Values{"conversation": {"bad id!"}}, http.Header{"Authorization": {"Bearer k3y"}}, http.StatusBadRequest),
			"conversation")
		assert.Contains(t, refused(t, base, id, url.Values{"terminal": {"nope"}}, owner, http.StatusNotFound), "Terminal 'nope' not found")
		assert.Contains(t, refused(t, base, id, url.Values{"rows": {"-3"}}, owner, http.StatusBadRequest), "rows")
		cross := owner.Clone()
		cross.Set("Origin", "https://evil.example")
		refused(t, base, id, nil, cross, http.StatusForbidden)

		// Not a WebSocket.
		req, err := http.NewRequest(http.MethodGet, base+"/sandboxes/"+id+"/terminal", nil)
		require.NoError(t, err)
		req.Header = owner.Clone()
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode)
	})
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	assertNoSandboxes(t, b)
}

// TestTerminalWebSocketKeepsSandbox: a sandbox with a WebSocket connected
// is in use, so it does not expire idle; once the client goes it does.
// Deleting the sandbox ends the WebSocket's program.
func TestTerminalWebSocketKeepsSandbox(t *testing.T) {
	b := localBackend(t)
	c := newClock()
	s := ttlServerMax(t, b, c, 24*time.Hour)
	base := serveHTTP(t, s)
	call := servertest.HTTP(base, "", "c")
	id := servertest.Create(t, call, nil)
	header := http.Header{server.HeaderConversation: {"c"}}

	w := mustDial(t, base, id, url.Values{"command": {"sh"}}, header)
	w.expect("echo up-''now\r", "up-now")
	c.Add(2 * time.Hour) // far past the 30 minutes idle
	assert.Empty(t, s.Reap(context.Background()), "a sandbox with a WebSocket connected is in use")
	w.expect("echo still-''up\r", "still-up")
	w.leave()
	// Its idle window starts again when the server lets go of it.
	waitFor(t, func() bool {
		list, err := s.List(context.Background(), "conv:c")
		require.NoError(t, err)
		require.Len(t, list, 1)
		return list[0].ExpiresAt.After(c.Now())
	})
	c.Add(2 * time.Hour)
	assert.Equal(t, []string{id}, s.Reap(context.Background()))
	assertNoSandboxes(t, b)

	// Deleting a sandbox ends its WebSocket terminals.
	id = servertest.Create(t, call, nil)
	w = mustDial(t, base, id, url.Values{"command": {stubbornProgram}}, header)
	w.expect("", "pid=")
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	m := w.text()
	assert.Equal(t, "exit", m.Type)
	<-w.closed
}

// TestTerminalWebSocketServerClose: closing the server ends its terminal
// WebSockets (going away) and kills their programs.
func TestTerminalWebSocketServerClose(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	base := serveHTTP(t, s)
	call := servertest.HTTP(base, "", "c")
	id := servertest.Create(t, call, nil)
	w := mustDial(t, base, id, url.Values{"command": {stubbornProgram}}, http.Header{server.HeaderConversation: {"c"}})
	r := w.out.Read(w.ctx, regexp.MustCompile(`pid=(\d+)\r?\n`), 0)
	require.True(t, r.Matched, "no pid in %q", r.Output)
	pid, err := strconv.Atoi(regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(r.Output)[1])
	require.NoError(t, err)
	require.True(t, procAlive(pid))

	require.NoError(t, s.Close())
	<-w.closed
	assert.Equal(t, websocket.CloseGoingAway, w.closeCode)
	waitFor(t, func() bool { return !procAlive(pid) })
	require.NoError(t, must(b.Get(context.Background(), id)).Destroy(context.Background()))
}

// TestTerminalWebSocketWithoutAgent: where terminals end with their client
// (the local backend's own, without sbxd), a WebSocket that goes kills its
// program, there is nothing to attach to, and deleting the sandbox kills
// the program of a WebSocket still connected.
func TestTerminalWebSocketWithoutAgent(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, func(o *server.Options) { o.NoAgent = true })
	base := serveHTTP(t, s)
	call := servertest.HTTP(base, "", "c")
	id := servertest.Create(t, call, nil)
	header := http.Header{server.HeaderConversation: {"c"}}
	pidOf := func(w *wsTerm) int {
		t.Helper()
		r := w.out.Read(w.ctx, regexp.MustCompile(`pid=\d+\r?\n`), 0)
		require.True(t, r.Matched, "no pid in %q", r.Output)
		pid, err := strconv.Atoi(regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(r.Output)[1])
		require.NoError(t, err)
		require.True(t, procAlive(pid))
		return pid
	}

	w := mustDial(t, base, id, url.Values{"command": {stubbornProgram}}, header)
	pid := pidOf(w)
	assert.Contains(t, refused(t, base, id, url.Values{"terminal": {w.started.TerminalID}}, header, http.StatusConflict), "end with their client")
	w.leave()
	waitFor(t, func() bool { return !procAlive(pid) })

	w = mustDial(t, base, id, url.Values{"command": {stubbornProgram}}, header)
	pid = pidOf(w)
	servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	waitFor(t, func() bool { return !procAlive(pid) })
	assert.Equal(t, "exit", w.text().Type)
	<-w.closed
}
