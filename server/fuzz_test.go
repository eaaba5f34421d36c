package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
)

// The fuzz targets feed the server what callers send: a JSON API request
// (tool name, conversation header, body) and an MCP tools/call's
// arguments; stdio lines and MCP HTTP bodies sent without a session are
// fuzzed in stdio_fuzz_test.go. They run on fuzzBackend, so no input makes
// a sandbox. Bounded runs (one target per go test -fuzz):
//
//	go test -run '^$' -fuzz '^FuzzJSONAPI$' -fuzztime 30s ./server/
//	go test -run '^$' -fuzz '^FuzzMCPToolArguments$' -fuzztime 30s ./server/
//	go test -run '^$' -fuzz '^FuzzStdioLine$' -fuzztime 30s ./server/
//	go test -run '^$' -fuzz '^FuzzSessionless$' -fuzztime 30s ./server/

// fuzzBackend is an in-process fake backend for the fuzz targets: it has
// no sandboxes and makes none, so every tool runs its argument checks and
// then fails or finds nothing, quickly.
type fuzzBackend struct{}

func (fuzzBackend) Name() string { return "fuzz" }
func (fuzzBackend) Create(context.Context, backend.Spec) (backend.Sandbox, error) {
	return nil, backend.ErrUnavailable
}
func (fuzzBackend) Get(context.Context, string) (backend.Sandbox, error) {
	return nil, backend.ErrNotFound
}
func (fuzzBackend) List(context.Context, backend.Filter) ([]backend.Info, error) { return nil, nil }
func (fuzzBackend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Isolation: backend.IsolationContainer}
}
func (fuzzBackend) Close() error { return nil }

var toolNames = []string{"create_sandbox", "connect_sandbox", "list_sandboxes", "delete_sandbox", "ls", "read_file",
	"write_file", "edit_file", "glob", "grep", "execute", "job_status", "job_output", "job_kill",
	"terminal_start", "terminal_send", "terminal_read", "terminal_close"}

// toolSeeds are arguments that reach past decoding.
var toolSeeds = []string{
	`{}`, `{"type":"main","timeout_minutes":30}`, `{"timeout_minutes":-1}`, `{"sandbox_id":"abc123"}`,
	`{"sandbox_id":"abc","path":"/etc","offset":-1,"limit":10}`, `{"sandbox_id":"a","pattern":"**/*.go","path":"."}`,
	`{"sandbox_id":"a","pattern":"x","-A":2,"-B":-1,"-C":3,"mode":"content","literal":true}`,
	`{"sandbox_id":"a","command":"echo hi","timeout":-5,"background":true}`,
	`{"sandbox_id":"a","job_id":"job-1","cursor":-3}`, `{"sandbox_id":"a","old_string":"","new_string":"x"}`,
	`{"unknown":1}`, `{"sandbox_id":7}`, `[]`, `null`, `"x"`, ``,
}

func fuzzServer(f *testing.F) *server.Server {
	s, err := server.New(server.Options{Backend: fuzzBackend{}, Spec: mainSpec, ReapInterval: -1, Types: []string{"main", "other"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	return s
}

// FuzzJSONAPI: POST /tools/NAME answers 200 with a Result, or a 4xx whose
// reason is the name, the conversation header or the body's JSON; never
// a 5xx or a panic.
func FuzzJSONAPI(f *testing.F) {
	for i, name := range toolNames {
		for _, seed := range toolSeeds {
			f.Add(name, "conv-1", []byte(seed))
		}
		f.Add(name, []string{"", "bad id!", "a/b:c@d", strings.Repeat("x", 201)}[i%4], []byte(`{}`))
	}
	f.Add("nope", "c", []byte(`{}`))
	s := fuzzServer(f)
	h := s.Handler()
	f.Fuzz(func(t *testing.T, name, conv string, body []byte) {
		if p := "/tools/" + name; strings.ContainsAny(name, "?#%") || path.Clean(p) != p ||
			strings.ContainsFunc(conv, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return // not one clean path segment (the mux redirects); not a header value
		}
		req := httptest.NewRequest(http.MethodPost, "/tools/x", bytes.NewReader(body))
		req.URL.Path = "/tools/" + name
		req.Header.Set(server.HeaderConversation, conv)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))

		known := false
		for _, n := range toolNames {
			known = known || n == name
		}
		_, convErr := server.ConversationFromHeader(req.Header)
		switch code := rec.Code; {
		case code >= 500:
			t.Fatalf("%s %q %q: %d %s", name, conv, body, code, rec.Body)
		case !known:
			if code != http.StatusNotFound && code != http.StatusMethodNotAllowed {
				t.Fatalf("unknown tool %q: %d %s", name, code, rec.Body)
			}
		case conv == "" || convErr != nil:
			if code != http.StatusBadRequest {
				t.Fatalf("%s with conversation %q: %d, want 400: %s", name, conv, code, rec.Body)
			}
		case code == http.StatusBadRequest:
			if !strings.Contains(rec.Body.String(), "bad JSON arguments") {
				t.Fatalf("%s %q: 400 for another reason than the body: %s", name, body, rec.Body)
			}
		case code == http.StatusOK:
			var res server.Result
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Output == "" {
				t.Fatalf("%s %q: 200 with %s (%v)", name, body, rec.Body, err)
			}
		default:
			t.Fatalf("%s %q: %d %s", name, body, code, rec.Body)
		}
	})
}

// FuzzMCPToolArguments: a tools/call with any JSON arguments gets a result
// or a JSON-RPC error, and the session carries on.
func FuzzMCPToolArguments(f *testing.F) {
	for _, name := range toolNames {
		for _, seed := range toolSeeds {
			if json.Valid([]byte(seed)) {
				f.Add(name, []byte(seed))
			}
		}
	}
	f.Add("nope", []byte(`{}`))
	s := fuzzServer(f)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.MCPServer(func(*mcp.CallToolRequest) string { return "conv:fuzz" }).Connect(context.Background(), st, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fuzz", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { cs.Close() })
	f.Fuzz(func(t *testing.T, name string, args []byte) {
		if !json.Valid(args) {
			return // the client cannot send it; stdio lines cover bad JSON
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		switch {
		case errors.Is(err, mcp.ErrConnectionClosed) || ctx.Err() != nil:
			t.Fatalf("%s %s: the session broke: %v", name, args, err)
		case err == nil && res == nil:
			t.Fatalf("%s %s: no result and no error", name, args)
		case err == nil && res.IsError && len(res.Content) == 0:
			t.Fatalf("%s %s: an error result without text", name, args)
		}
		if err := cs.Ping(ctx, nil); err != nil {
			t.Fatalf("after %s %s: ping: %v", name, args, err)
		}
	})
}
