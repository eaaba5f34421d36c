package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/server"
)

// rawStdio is a client that speaks raw JSON-RPC lines to a server's stdio
// transport, as a broken or hostile client would.
type rawStdio struct {
	t    *testing.T
	w    *io.PipeWriter
	r    *bufio.Scanner
	done chan error
}

func startRawStdio(t *testing.T, s *server.Server) *rawStdio {
	sr, cw := io.Pipe()
	cr, sw := io.Pipe()
	c := &rawStdio{t: t, w: cw, r: bufio.NewScanner(cr), done: make(chan error, 1)}
	c.r.Buffer(nil, 16<<20)
	go func() {
		err := s.RunStdio(context.Background(), "stdio:raw", server.StdioTransport(sr, sw))
		sw.Close()
		c.done <- err
	}()
	t.Cleanup(func() { cw.Close() })
	return c
}

// send writes one line.
func (c *rawStdio) send(line string) {
	c.t.Helper()
	_, err := io.WriteString(c.w, line+"\n")
	require.NoError(c.t, err, "writing %q: the server stopped reading", line)
}

type rpcAnswer struct {
	ID     any             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// next reads the server's next message.
func (c *rawStdio) next() rpcAnswer {
	c.t.Helper()
	got := make(chan bool, 1)
	go func() { got <- c.r.Scan() }()
	select {
	case ok := <-got:
		require.True(c.t, ok, "the server's output ended: %v", c.r.Err())
	case err := <-c.done:
		c.t.Fatalf("the server stopped: %v", err)
	case <-time.After(30 * time.Second):
		c.t.Fatal("no answer within 30s")
	}
	var a rpcAnswer
	require.NoError(c.t, json.Unmarshal(c.r.Bytes(), &a), "answer %s", c.r.Text())
	return a
}

// call sends a request with id and returns its answer.
func (c *rawStdio) call(id int, method string, params any) rpcAnswer {
	c.t.Helper()
	p, err := json.Marshal(params)
	require.NoError(c.t, err)
	c.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, p))
	a := c.next()
	require.EqualValues(c.t, id, a.ID, "answer to request %d", id)
	return a
}

// tool calls a tool and returns its text.
func (c *rawStdio) tool(id int, name string, args map[string]any) string {
	c.t.Helper()
	a := c.call(id, "tools/call", map[string]any{"name": name, "arguments": args})
	require.Nil(c.t, a.Error, "tools/call %s", name)
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	require.NoError(c.t, json.Unmarshal(a.Result, &res))
	var b strings.Builder
	for _, ct := range res.Content {
		b.WriteString(ct.Text)
	}
	return b.String()
}

func (c *rawStdio) initialize(version string) {
	c.t.Helper()
	a := c.call(1, "initialize", map[string]any{"protocolVersion": version, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	require.Nil(c.t, a.Error)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// TestStdioBadLines: a line that is not a JSON-RPC message gets a JSON-RPC
// error and the session, with its sandbox, carries on.
func TestStdioBadLines(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	c := startRawStdio(t, s)
	c.initialize("2025-06-18")
	id := strings.Fields(c.tool(2, "create_sandbox", map[string]any{}))[2]

	for _, bad := range []struct {
		line   string
		id     any
		code   int
		reason string
	}{
		{`{oops`, nil, -32700, "not JSON"},
		{`{"jsonrpc":"2.0","id":3,"method":"tools/list"`, nil, -32700, "not JSON"},
		{`not json at all`, nil, -32700, "not JSON"},
		{`42`, nil, -32600, "not a JSON-RPC 2.0 message"},
		{`{"hello":"world"}`, nil, -32600, "not a JSON-RPC 2.0 message"},
		{`{"jsonrpc":"1.0","id":4,"method":"tools/list"}`, 4.0, -32600, "not a JSON-RPC 2.0 message"},
		{`{"jsonrpc":"2.0","id":"five","method":5}`, "five", -32600, "not a JSON-RPC 2.0 message"},
		{`[]`, nil, -32600, "not part of MCP protocol version 2025-06-18"},
		{`[{"jsonrpc":"2.0","id":6,"method":"tools/list"}]`, nil, -32600, "batches are not part of"},
	} {
		c.send(bad.line)
		a := c.next()
		if assert.NotNil(t, a.Error, "%s: want an error answer", bad.line) {
			assert.Equal(t, bad.code, a.Error.Code, bad.line)
			assert.Contains(t, a.Error.Message, bad.reason, bad.line)
		}
		assert.Equal(t, bad.id, a.ID, bad.line)
	}
	c.send("") // blank lines are skipped
	assert.Contains(t, c.tool(7, "execute", map[string]any{"sandbox_id": id, "command": "echo still here"}), "still here")
	list := c.call(8, "tools/list", map[string]any{})
	assert.Nil(t, list.Error)
	assert.Contains(t, string(list.Result), "create_sandbox")
	c.w.Close()
	require.NoError(t, <-c.done)
}

// TestStdioBatchesInOldProtocol: protocol 2025-03-26 has batches; a bad one
// is refused without ending the session.
func TestStdioBatchesInOldProtocol(t *testing.T) {
	s := newServer(t, localBackend(t), nil)
	c := startRawStdio(t, s)
	c.initialize("2025-03-26")
	// An entry the SDK's decoder takes, in a batch nested one level too
	// deep for it.
	deep := `{"jsonrpc":"2.0","id":9,"method":"ping","params":` + strings.Repeat(`{"a":`, 999) + "1" + strings.Repeat("}", 999) + "}"
	for _, bad := range []string{`[]`, `[1]`, `[{"jsonrpc":"2.0","id":2,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, "[" + deep + "]"} {
		c.send(bad)
		a := c.next()
		if assert.NotNil(t, a.Error, bad) {
			assert.Equal(t, -32600, a.Error.Code, bad)
		}
	}
	c.send(`[{"jsonrpc":"2.0","id":3,"method":"ping"}]`)
	var batch []rpcAnswer
	require.True(t, c.r.Scan())
	require.NoError(t, json.Unmarshal(c.r.Bytes(), &batch), c.r.Text())
	require.Len(t, batch, 1)
	assert.EqualValues(t, 3, batch[0].ID)
	assert.Nil(t, c.call(4, "ping", map[string]any{}).Error)
}

// TestStdioAnswersBeforeEOF: requests read before standard input ends are
// answered before the session ends, as "printf '<requests>' | sbx mcp"
// needs; a tool call that takes a while (create_sandbox) included.
func TestStdioAnswersBeforeEOF(t *testing.T) {
	s := newServer(t, localBackend(t), func(o *server.Options) { o.DeleteOnShutdown = true })
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"three","method":"tools/call","params":{"name":"create_sandbox","arguments":{}}}`,
		`{oops`,
	}, "\n") + "\n"
	sr, cw := io.Pipe()
	go func() {
		io.WriteString(cw, in)
		cw.Close() // standard input ends right after the requests
	}()
	var out strings.Builder
	done := make(chan error, 1)
	go func() { done <- s.RunStdio(context.Background(), "stdio:eof", server.StdioTransport(sr, &out)) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("RunStdio did not return within 60s of its input's end")
	}
	answers := map[any]rpcAnswer{}
	for line := range strings.Lines(out.String()) {
		var a rpcAnswer
		require.NoError(t, json.Unmarshal([]byte(line), &a), line)
		answers[a.ID] = a
	}
	require.Contains(t, answers, 1.0, "answer to initialize in %q", out.String())
	assert.Nil(t, answers[1.0].Error)
	require.Contains(t, answers, 2.0, "answer to tools/list in %q", out.String())
	assert.Contains(t, string(answers[2.0].Result), "create_sandbox")
	require.Contains(t, answers, "three", "answer to tools/call in %q", out.String())
	assert.Contains(t, string(answers["three"].Result), "Created sandbox")
	require.Contains(t, answers, nil, "answer to the line that is not JSON")
	assert.Equal(t, -32700, answers[nil].Error.Code)
}

// failingWriter fails every write, as a standard output whose reader has
// gone does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, io.ErrClosedPipe }

// TestStdioEndsWhenOutputFails: when the client has closed both ends, the
// session still ends at the end of its input: an answer that cannot be
// written is not waited for.
func TestStdioEndsWhenOutputFails(t *testing.T) {
	s := newServer(t, localBackend(t), func(o *server.Options) { o.DeleteOnShutdown = true })
	in := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}` + "\n"
	done := make(chan error, 1)
	go func() {
		done <- s.RunStdio(context.Background(), "stdio:gone", server.StdioTransport(strings.NewReader(in), failingWriter{}))
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("RunStdio did not return within 60s of its input's end, with its output failing")
	}
}
