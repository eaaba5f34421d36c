package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// FuzzStdioLine: every line sbx mcp reads is handed to the MCP SDK as one
// message it can decode (so the session goes on), answered with one
// JSON-RPC error, or, when blank, skipped. See fuzz_test.go for the run.
func FuzzStdioLine(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{oops`, `42`, `[]`, `[1]`, ` `, "\t\r",
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"result":{}}`,
		`{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"m"}}`, `{"JSONRPC":"2.0","ID":1,"METHOD":"ping"}`,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, line string, batchless bool) {
		line = strings.ReplaceAll(line, "\n", " ") // one line
		var out bytes.Buffer
		w := &stdioWriter{w: &out}
		if batchless {
			v := firstBatchlessVersion
			w.version.Store(&v)
		}
		r := &stdioReader{br: bufio.NewReader(strings.NewReader(line + "\n")), out: w, max: 1 << 20}
		passed, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		blank := strings.TrimSpace(line) == ""
		switch {
		case blank:
			if len(passed) > 0 || out.Len() > 0 {
				t.Fatalf("blank line %q: passed %q, answered %q", line, passed, out.String())
			}
		case len(passed) > 0 && out.Len() > 0, len(passed) == 0 && out.Len() == 0:
			t.Fatalf("%q: passed %q and answered %q: want exactly one", line, passed, out.String())
		case len(passed) > 0:
			checkPassed(t, line, passed, batchless)
		default:
			checkAnswer(t, line, out.Bytes())
		}
	})
}

// checkPassed: what the SDK gets is the line, trimmed, with one newline,
// and decodes as the SDK decodes it.
func checkPassed(t *testing.T, line string, passed []byte, batchless bool) {
	t.Helper()
	msg := bytes.TrimSuffix(passed, []byte("\n"))
	if string(msg) != strings.TrimSpace(line) || bytes.Contains(msg, []byte("\n")) {
		t.Fatalf("%q passed as %q", line, passed)
	}
	if msg[0] != '[' {
		if _, err := jsonrpc.DecodeMessage(msg); err != nil {
			t.Fatalf("%q passed, but the SDK cannot decode it: %v", line, err)
		}
		return
	}
	if batchless {
		t.Fatalf("%q: a batch passed in a protocol without batches", line)
	}
	var batch []json.RawMessage
	if err := json.Unmarshal(msg, &batch); err != nil || len(batch) == 0 {
		t.Fatalf("%q passed as a batch: %v", line, err)
	}
	for _, raw := range batch {
		if _, err := jsonrpc.DecodeMessage(raw); err != nil {
			t.Fatalf("%q passed, but the SDK cannot decode its entry %s: %v", line, raw, err)
		}
	}
}

// checkAnswer: one line, a JSON-RPC 2.0 error response; its ID is null
// where the line's could not be read (which JSON-RPC asks for, and which the
// Go SDK's decoder, stricter, refuses: so it is checked here by hand).
func checkAnswer(t *testing.T, line string, answer []byte) {
	t.Helper()
	if bytes.Count(answer, []byte("\n")) != 1 || !bytes.HasSuffix(answer, []byte("\n")) {
		t.Fatalf("%q answered with %q: want one line", line, answer)
	}
	var wire struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(answer, &wire); err != nil || wire.JSONRPC != "2.0" || wire.Error == nil || wire.Result != nil || wire.Error.Message == "" {
		t.Fatalf("%q answered with %q: not a JSON-RPC 2.0 error response (%v)", line, answer, err)
	}
	var id any
	if err := json.Unmarshal(wire.ID, &id); err != nil {
		t.Fatalf("%q answered with %q: no id", line, answer)
	}
	if _, err := jsonrpc.MakeID(id); err != nil {
		t.Fatalf("%q answered with id %s: %v", line, wire.ID, err)
	}
	if code := wire.Error.Code; code != jsonrpc.CodeParseError && code != jsonrpc.CodeInvalidRequest {
		t.Fatalf("%q answered with code %d: want -32700 or -32600", line, code)
	}
	if json.Valid([]byte(strings.TrimSpace(line))) == (wire.Error.Code == jsonrpc.CodeParseError) {
		t.Fatalf("%q answered with code %d: parse errors are for lines that are not JSON", line, wire.Error.Code)
	}
}

// FuzzSessionless: a POST to /mcp without Mcp-Session-Id is refused (400)
// only when it holds JSON-RPC messages, none of which initializes a session
// or belongs to the sessionless protocol; anything else goes on to the SDK.
func FuzzSessionless(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"initialize"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`, `{oops`, `[]`, ``, `{"jsonrpc":"2.0","id":3,"result":{}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, refuse := sessionless(body)
		if !refuse {
			if id.IsValid() {
				t.Fatalf("%q: passed with an ID", body)
			}
			return
		}
		raws := []json.RawMessage{bytes.TrimSpace(body)}
		if len(raws[0]) > 0 && raws[0][0] == '[' {
			if err := json.Unmarshal(raws[0], &raws); err != nil || len(raws) == 0 {
				t.Fatalf("%q refused, but it is no batch: %v", body, err)
			}
		}
		for _, raw := range raws {
			msg, err := jsonrpc.DecodeMessage(raw)
			if err != nil {
				t.Fatalf("%q refused, but it is not JSON-RPC (the SDK should answer it): %v", body, err)
			}
			if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "initialize" {
				t.Fatalf("%q: an initialize refused", body)
			}
		}
		if id.IsValid() && len(raws) != 1 {
			t.Fatalf("%q: a batch answered with one ID", body)
		}
	})
}
