package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxkit/sandboxkit/backend"
)

// HeaderConversation names the conversation an HTTP call belongs to. It is
// required on the JSON API; on MCP it is optional and, when sent, replaces
// the MCP session as the conversation, so a client that reconnects (or a
// restarted server) keeps its sandboxes.
const HeaderConversation = "X-Conversation-Id"

// MaxJSONBodyBytes bounds a JSON API request (write_file content
// included); larger ones get 413.
const MaxJSONBodyBytes = 64 << 20

// MaxMCPBodyBytes bounds a request of MCP over streamable HTTP (the MCP
// SDK's limit; larger ones get 413).
const MaxMCPBodyBytes = mcp.DefaultMaxRequestBodyBytes

// maxSmallBody bounds the bodies of the endpoints that take small ones
// (an egress policy, OpenSandbox's metadata and expiry) or none.
const maxSmallBody = 1 << 20

// validConversation reports whether id is 1 to 200 of A-Z a-z 0-9 . _ : @ /
// + = - (a regular expression for it costs every sbx process 0.7 ms to
// compile at start).
func validConversation(id string) bool {
	if len(id) < 1 || len(id) > 200 {
		return false
	}
	for _, r := range []byte(id) {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9', strings.IndexByte("._:@/+=-", r) >= 0:
		default:
			return false
		}
	}
	return true
}

// httpError is an HTTP failure of the JSON API (not a tool's own error,
// which is a 200 with is_error set).
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// ConversationFromHeader returns the conversation a header names ("" for
// none), or an error for a malformed one.
func ConversationFromHeader(h http.Header) (string, error) {
	id := h.Get(HeaderConversation)
	if id == "" {
		return "", nil
	}
	if !validConversation(id) {
		return "", fmt.Errorf("%s %q: want 1 to 200 letters, digits or ._:@/+=-", HeaderConversation, id)
	}
	return "conv:" + id, nil
}

// Handler returns the HTTP API:
//
//	GET  /health          {"status":"healthy"}; needs no key
//	GET  /sandbox/status  {"enabled":true,...}, or false and the reason
//	GET  /pools           {"pools":[...]}: the figures of the warm pools (PoolStats)
//	GET  /tools           the tools with their JSON input schemas
//	POST /tools/{name}    run a tool: JSON arguments in, Result out
//	GET  /sandboxes/{id}/terminal
//	                      a WebSocket to a terminal of sandbox id: a new
//	                      one running command (query; default a shell), or
//	                      terminal=ID to attach to one; rows, cols; binary
//	                      messages are the terminal's bytes, text messages
//	                      JSON control ({"type":"resize","rows":R,"cols":C}
//	                      in; {"type":"started","terminal_id":ID} first,
//	                      {"type":"exit","exit_code":N} last out); the
//	                      conversation as X-Conversation-Id or the
//	                      conversation query parameter (see terminal_ws.go)
//	     /mcp             MCP over streamable HTTP
//	GET  /admin/sandboxes/{id}/egress
//	PUT  /admin/sandboxes/{id}/egress
//	                      the operator's: a sandbox's egress policy and
//	                      denied attempts; replace its policy (see
//	                      egress.go); need the admin key, not the API key
//	GET  /admin/audit     the audit trail's latest entries (audit.go):
//	                      conversation, sandbox, kind, tool, since, limit
//	GET  /metrics         Prometheus metrics (metrics.go); admin key
//	     /ui/             the operator's console (console.go): a login
//	                      with the admin key, then pages
//	GET  /openapi/{tools,admin,opensandbox}.json, /docs
//	                      the OpenAPI documents and their rendering
//	                      (openapi.go); need no key
//
// Everything but /health, /openapi, /docs, /ui, /admin and /metrics needs the API key when one is set, as
// "Authorization: Bearer KEY" or "X-API-Key: KEY". A request body is read
// only once the key is checked, and within the limits of Options
// (BodyTimeout, BodyMinRate, BodyBudget).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
	})
	mux.Handle("GET /sandbox/status", s.auth(http.HandlerFunc(s.serveStatus)))
	mux.Handle("GET /pools", s.auth(http.HandlerFunc(s.servePools)))
	mux.Handle("GET /tools", s.auth(http.HandlerFunc(s.serveToolList)))
	mux.Handle("POST /tools/{name}", s.auth(s.limitBody(MaxJSONBodyBytes, writeError, http.HandlerFunc(s.serveTool))))
	mux.Handle("GET /sandboxes/{id}/terminal", s.auth(s.auditRoute(AuditTerminal, http.HandlerFunc(s.serveTerminal))))
	mux.Handle("GET /admin/sandboxes/{id}/egress", s.adminAuth(http.HandlerFunc(s.serveEgressStatus)))
	mux.Handle("PUT /admin/sandboxes/{id}/egress", s.adminAuth(s.auditRoute(AuditAdmin, s.limitBody(maxSmallBody, writeError, http.HandlerFunc(s.serveSetEgress)))))
	mux.Handle("GET /admin/audit", s.adminAuth(http.HandlerFunc(s.serveAudit)))
	mux.Handle("GET /metrics", s.adminAuth(s.metrics.handler()))
	s.consoleRoutes(mux)
	s.apiDocsRoutes(mux)
	s.osbRoutes(mux)

	srv := s.MCPServer(func(req *mcp.CallToolRequest) string {
		if req.Extra != nil {
			if conv, err := ConversationFromHeader(req.Extra.Header); err == nil && conv != "" {
				return conv
			}
		}
		if req.Session == nil || req.Session.ID() == "" {
			return ""
		}
		return "mcp:" + req.Session.ID()
	})
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		// A session nobody used for a sandbox's whole life has nothing
		// left to reach: close it, so vanished clients cost no memory.
		&mcp.StreamableHTTPOptions{Logger: s.opts.Logger, SessionTimeout: s.opts.MaxLifetime, MaxRequestBodyBytes: MaxMCPBodyBytes})
	checkConv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := ConversationFromHeader(r.Header); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if refuseSessionless(w, r) {
			return
		}
		mcpHandler.ServeHTTP(w, r)
	})
	mux.Handle("/mcp", s.auth(s.limitBody(MaxMCPBodyBytes, writeError, checkConv)))
	return s.observeHTTP(s.guardBodies(mux))
}

// auth requires the API key, compared in constant time.
func (s *Server) auth(next http.Handler) http.Handler {
	if s.opts.APIKey == "" {
		return next
	}
	return requireKey(s.opts.APIKey, "missing or wrong API key: send Authorization: Bearer <key>", next)
}

// adminAuth requires the admin key; without one the endpoint is closed.
func (s *Server) adminAuth(next http.Handler) http.Handler {
	if s.opts.AdminKey == "" {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			dropBody(w, r)
			writeError(w, http.StatusForbidden, "the admin endpoints are closed: start the server with $"+EnvAdminKey+
				" (or [sandbox.serve] admin_key) set to a key other than the API key, and send it as Authorization: Bearer <admin key>")
		})
	}
	return requireKey(s.opts.AdminKey, "missing or wrong admin key: send Authorization: Bearer <admin key> (the API key does not open /admin)", next)
}

// requireKey lets through requests that send key as "Authorization:
// Bearer KEY" or "X-API-Key: KEY", compared in constant time.
func requireKey(key, refusal string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte(key))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if h := r.Header.Get("Authorization"); key == "" && h != "" {
			if scheme, token, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
				key = strings.TrimSpace(token)
			}
		}
		// Hashing first makes the comparison independent of the length.
		got := sha256.Sum256([]byte(key))
		if key == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			dropBody(w, r)
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxkit"`)
			writeError(w, http.StatusUnauthorized, refusal)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Status reports whether the backend can be reached: enabled, or not and
// why.
func (s *Server) Status(ctx context.Context) (enabled bool, reason string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := s.opts.Backend.List(ctx, statusFilter(s.opts.Instance)); err != nil {
		return false, fmt.Sprintf("the %s backend cannot be reached: %v", s.opts.Backend.Name(), err)
	}
	return true, ""
}

func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	enabled, reason := s.Status(r.Context())
	body := map[string]any{"enabled": enabled, "backend": s.opts.Backend.Name()}
	if !enabled {
		body["reason"] = reason
	}
	writeJSON(w, http.StatusOK, body)
}

type toolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	InputSchema any    `json:"input_schema"`
}

func (s *Server) serveToolList(w http.ResponseWriter, r *http.Request) {
	var list []toolInfo
	for _, t := range tools() {
		schema, err := t.schema()
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		list = append(list, toolInfo{Name: t.name, Description: s.describe(t.name, t.description), InputSchema: schema})
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) serveTool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var def *toolDef
	for _, t := range tools() {
		if t.name == name {
			def = &t
			break
		}
	}
	if def == nil {
		var names []string
		for _, t := range tools() {
			names = append(names, t.name)
		}
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown tool %q (known: %s)", name, strings.Join(names, ", ")))
		return
	}
	conv, err := ConversationFromHeader(r.Header)
	if err == nil && conv == "" {
		err = fmt.Errorf("missing %s header: name the conversation, so its sandboxes stay its own", HeaderConversation)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	body, err := readBody(r)
	if err != nil {
		writeError(w, bodyStatus(err), fmt.Sprintf("request body: %v", err))
		return
	}
	res, err := def.http(r.Context(), s, conv, body)
	if he, ok := err.(*httpError); ok {
		writeError(w, he.code, he.msg)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func statusFilter(instance string) backend.Filter {
	return backend.Filter{Labels: map[string]string{LabelInstance: instance}}
}

// newProtocolMeta is the _meta key of requests of the sessionless MCP
// protocol (2026-07-28 on).
const newProtocolMeta = "io.modelcontextprotocol/protocolVersion"

// refuseSessionless answers 400 Bad Request, with a JSON-RPC error, to a
// POST without Mcp-Session-Id that does not initialize a session, as the
// MCP spec asks of servers that require sessions (the SDK would make it a
// session of its own and answer 200). Requests of the sessionless protocol
// pass, so the SDK tells their clients which versions to fall back to.
func refuseSessionless(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" || r.Header.Get("MCP-Protocol-Version") >= "2026-07-28" {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxMCPBodyBytes+1))
	// The SDK reads the body again, and answers a failed or too long one.
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	if err != nil || len(body) > MaxMCPBodyBytes {
		return false
	}
	id, refuse := sessionless(body)
	if !refuse {
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	w.Write(rpcError(id, jsonrpc.CodeInvalidRequest, "Bad Request: no Mcp-Session-Id header: start a session with initialize "+
		"(sent without the header) and send the Mcp-Session-Id of its answer with every later request"))
	return true
}

// sessionless reports whether an MCP request body sent without a session
// needs one: it holds JSON-RPC messages, none of them initialize or of the
// sessionless protocol. id is the request's ID when the body is one
// request. Bodies that are not JSON-RPC are left to the SDK to answer.
func sessionless(body []byte) (id jsonrpc.ID, refuse bool) {
	body = bytes.TrimSpace(body)
	raws := []json.RawMessage{body}
	if len(body) > 0 && body[0] == '[' {
		// Into a new slice: Unmarshal would write the first entry over
		// body, which the SDK reads next.
		raws = nil
		if json.Unmarshal(body, &raws) != nil || len(raws) == 0 {
			return jsonrpc.ID{}, false
		}
	}
	for _, raw := range raws {
		msg, err := jsonrpc.DecodeMessage(raw)
		if err != nil {
			return jsonrpc.ID{}, false
		}
		req, ok := msg.(*jsonrpc.Request)
		if !ok {
			continue
		}
		if req.Method == "initialize" || req.Method == "server/discover" {
			return jsonrpc.ID{}, false
		}
		var params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if json.Unmarshal(req.Params, &params) == nil && params.Meta[newProtocolMeta] != nil {
			return jsonrpc.ID{}, false
		}
		if len(raws) == 1 {
			id = req.ID
		}
	}
	return id, true
}
