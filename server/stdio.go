package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxStdioMessage bounds one message (line) on the stdio transport, as the
// MCP SDK bounds it.
const MaxStdioMessage = mcp.DefaultMaxLineLength

// firstBatchlessVersion is the first MCP protocol version without JSON-RPC
// batches.
const firstBatchlessVersion = "2025-06-18"

// StdioTransport returns the MCP transport sbx mcp serves on r and w:
// newline-delimited JSON-RPC messages, as the MCP stdio transport
// specifies. Unlike the SDK's own, one bad line does not end the session:
// a line that is not JSON is answered with a JSON-RPC parse error (-32700),
// one that is JSON but no JSON-RPC message (or is longer than
// MaxStdioMessage) with an invalid request error (-32600), and the next
// line is read. When r ends, every request read before its end is
// answered before the session ends (the SDK would drop their answers: a
// client that writes its requests and closes its end, as "printf ... | sbx
// mcp" does, would read nothing). r and w are not closed.
func StdioTransport(r io.Reader, w io.Writer) mcp.Transport {
	out := &stdioWriter{w: w, calls: newOpenCalls()}
	in := &stdioReader{br: bufio.NewReaderSize(r, 64<<10), out: out, max: MaxStdioMessage}
	return &mcp.IOTransport{Reader: in, Writer: out, MaxLineLength: -1}
}

// openCalls are the requests handed to the SDK and not yet answered. A
// nil *openCalls tracks nothing and never waits.
type openCalls struct {
	mu      sync.Mutex
	ids     map[jsonrpc.ID]bool
	changed chan struct{} // closed, and replaced, when ids shrinks or done is set
	done    bool          // the SDK closed the transport: no answer will come
}

func newOpenCalls() *openCalls {
	return &openCalls{ids: map[jsonrpc.ID]bool{}, changed: make(chan struct{})}
}

// add notes the calls (requests with an ID) of a message or batch the
// reader hands to the SDK. A call whose ID is open already is not added:
// the SDK answers it with ID null.
func (c *openCalls) add(line []byte) {
	if c == nil {
		return
	}
	ids := messageIDs(line, func(m jsonrpc.Message) (jsonrpc.ID, bool) {
		if req, ok := m.(*jsonrpc.Request); ok {
			return req.ID, req.IsCall()
		}
		return jsonrpc.ID{}, false
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.ids[id] = true
	}
}

// answered notes the answers in a message or batch the SDK wrote.
func (c *openCalls) answered(msg []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	none := len(c.ids) == 0
	c.mu.Unlock()
	if none {
		return
	}
	ids := messageIDs(msg, func(m jsonrpc.Message) (jsonrpc.ID, bool) {
		if resp, ok := m.(*jsonrpc.Response); ok {
			return resp.ID, true
		}
		return jsonrpc.ID{}, false
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	shrunk := false
	for _, id := range ids {
		if c.ids[id] {
			delete(c.ids, id)
			shrunk = true
		}
	}
	if shrunk {
		c.signal()
	}
}

// close notes that the SDK closed the transport.
func (c *openCalls) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.done = true
		c.signal()
	}
}

func (c *openCalls) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait returns once every open call is answered or the transport is
// closed.
func (c *openCalls) wait() {
	if c == nil {
		return
	}
	for {
		c.mu.Lock()
		if len(c.ids) == 0 || c.done {
			c.mu.Unlock()
			return
		}
		ch := c.changed
		c.mu.Unlock()
		<-ch
	}
}

// messageIDs returns the IDs pick takes from a JSON-RPC message or batch
// of them (entries that do not decode are left out).
func messageIDs(data []byte, pick func(jsonrpc.Message) (jsonrpc.ID, bool)) []jsonrpc.ID {
	data = bytes.TrimSpace(data)
	raws := []json.RawMessage{data}
	if len(data) > 0 && data[0] == '[' {
		// Into a new slice: Unmarshal would write the first entry over
		// data, raws' first element.
		raws = nil
		if json.Unmarshal(data, &raws) != nil {
			return nil
		}
	}
	var ids []jsonrpc.ID
	for _, raw := range raws {
		if m, err := jsonrpc.DecodeMessage(raw); err == nil {
			if id, ok := pick(m); ok && id.IsValid() {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// stdioWriter serialises the SDK's messages and the reader's error answers
// (each is one Write of a whole line), notes the protocol version the
// server settles on, which decides whether batches are allowed, and which
// calls the SDK has answered.
type stdioWriter struct {
	mu      sync.Mutex
	w       io.Writer
	version atomic.Pointer[string]
	calls   *openCalls
}

func (s *stdioWriter) Write(p []byte) (int, error) {
	if s.version.Load() == nil && bytes.Contains(p, []byte(`"protocolVersion"`)) {
		var m struct {
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if json.Unmarshal(p, &m) == nil && m.Result.ProtocolVersion != "" {
			s.version.Store(&m.Result.ProtocolVersion)
		}
	}
	n, err := s.write(p)
	// Written or not, the answer is the last the call gets: the reader
	// need not wait for it at the end of its input.
	s.calls.answered(p)
	return n, err
}

// write writes one whole line.
func (s *stdioWriter) write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *stdioWriter) Close() error {
	s.calls.close()
	return nil
}

// stdioReader passes the SDK the lines that are JSON-RPC messages and
// answers the others itself.
type stdioReader struct {
	br      *bufio.Reader
	out     *stdioWriter
	max     int
	line    int    // lines read
	pending []byte // the rest of a line handed to the SDK
	err     error  // the reader's error, returned once pending is empty
}

func (s *stdioReader) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			if errors.Is(s.err, io.EOF) {
				// The SDK ends the session, and drops the answers
				// still to come, when its reader ends.
				s.out.calls.wait()
			}
			return 0, s.err
		}
		var line []byte
		var tooLong bool
		line, tooLong, s.err = s.readLine()
		if tooLong {
			s.answer(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: line %d is longer than %d bytes", s.line, s.max))
			continue
		}
		if msg, ok := s.check(line); ok {
			s.out.calls.add(msg)
			s.pending = msg
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

func (s *stdioReader) Close() error {
	s.out.calls.close()
	return nil
}

// readLine reads the next line, without its end. A line longer than max is
// read to its end and dropped (tooLong).
func (s *stdioReader) readLine() (line []byte, tooLong bool, err error) {
	s.line++
	for {
		chunk, err := s.br.ReadSlice('\n')
		if !tooLong {
			line = append(line, chunk...)
			if len(line) > s.max+1 {
				line, tooLong = nil, true
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil || (errors.Is(err, io.EOF) && len(line) > 0) {
			return bytes.TrimRight(line, "\r\n"), tooLong, err
		}
		return nil, tooLong, err
	}
}

// check returns line as the SDK should read it, or answers it and returns
// false. It accepts what the SDK's stdio connection accepts without ending
// the session: one JSON-RPC message, or a non-empty batch of them where
// the protocol version has batches.
func (s *stdioReader) check(line []byte) ([]byte, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, false
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v) // the reason
		s.answer(jsonrpc.ID{}, jsonrpc.CodeParseError, fmt.Sprintf("Parse error: line %d is not JSON (%v); send one JSON-RPC message per line", s.line, err))
		return nil, false
	}
	if line[0] == '[' {
		if msg := s.checkBatch(line); msg != "" {
			s.answer(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: line %d: %s", s.line, msg))
			return nil, false
		}
	} else if _, err := jsonrpc.DecodeMessage(line); err != nil {
		s.answer(idOf(line), jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: line %d is not a JSON-RPC 2.0 message (%v)", s.line, err))
		return nil, false
	}
	return append(line, '\n'), true
}

// checkBatch returns what is wrong with a batch, or "".
func (s *stdioReader) checkBatch(line []byte) string {
	if v := s.out.version.Load(); v != nil && *v >= firstBatchlessVersion {
		return fmt.Sprintf("JSON-RPC batches are not part of MCP protocol version %s", *v)
	}
	if nesting(line) > maxNesting {
		return fmt.Sprintf("nested deeper than %d levels", maxNesting)
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(line, &batch); err != nil {
		return fmt.Sprintf("not a batch of JSON-RPC messages (%v)", err)
	}
	if len(batch) == 0 {
		return "empty batch"
	}
	ids := map[jsonrpc.ID]bool{}
	for i, raw := range batch {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return fmt.Sprintf("batch entry %d is not a JSON-RPC 2.0 message (%v)", i, err)
		}
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
			if ids[req.ID] {
				return fmt.Sprintf("batch entry %d repeats request ID %v", i, req.ID.Raw())
			}
			ids[req.ID] = true
		}
	}
	return ""
}

// maxNesting is how deep the MCP SDK's decoder lets JSON nest; a message
// nested deeper ends its session. Each entry of a batch is checked by the
// SDK's own decoder, the batch around them here.
const maxNesting = 1000

// nesting returns how deep objects and arrays nest in the JSON text data.
func nesting(data []byte) int {
	depth, deepest := 0, 0
	inString, escaped := false, false
	for _, b := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case inString:
			inString = b != '"'
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			depth++
			deepest = max(deepest, depth)
		case b == '}' || b == ']':
			depth--
		}
	}
	return deepest
}

// idOf returns the request ID a malformed message carries, if it has a
// valid one, so its answer can name it.
func idOf(line []byte) jsonrpc.ID {
	var probe struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(line, &probe) != nil {
		return jsonrpc.ID{}
	}
	id, err := jsonrpc.MakeID(probe.ID)
	if err != nil {
		return jsonrpc.ID{}
	}
	return id
}

// answer writes a JSON-RPC error response (ID null when id is the zero ID).
func (s *stdioReader) answer(id jsonrpc.ID, code int64, message string) {
	// Not through Write: the answer is not the SDK's, and must not count
	// as the answer to a call the SDK has open under the same ID.
	s.out.write(append(rpcError(id, code, message), '\n'))
}

// rpcError is a JSON-RPC error response (ID null when id is the zero ID:
// the request's ID could not be read).
func rpcError(id jsonrpc.ID, code int64, message string) []byte {
	resp := struct {
		JSONRPC string `json:"jsonrpc"`
		ID      any    `json:"id"`
		Error   struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id.Raw()}
	resp.Error.Code, resp.Error.Message = code, message
	data, _ := json.Marshal(resp) // cannot fail: strings and numbers
	return data
}
