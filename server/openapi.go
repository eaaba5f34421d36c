package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server/apidocs"
	"github.com/sandboxkit/sandboxkit/session"
)

// The API documentation: three OpenAPI 3.1 documents, made here from the
// server's routes, tools and types when asked for, and a page that
// renders them (package apidocs):
//
//	GET /openapi/tools.json        the agents' HTTP API: tools, terminals, MCP
//	GET /openapi/admin.json        the operator's: /admin and /metrics
//	GET /openapi/opensandbox.json  the OpenSandbox-compatible API and execd
//	GET /docs                      the page (RapiDoc, embedded), /docs/{file} its assets
//
// They need no key, as /health: they hold nothing of this server's
// configuration but the execd port. TestAPIDocsCoverRoutes checks that every
// route the server registers is documented and every documented operation
// is answered.

// apiDocuments names the documents and the titles the page shows.
var apiDocuments = []struct{ name, title string }{
	{"tools", "Tools API"},
	{"admin", "Admin API"},
	{"opensandbox", "OpenSandbox API"},
}

// apiDocsRoutes adds the documents and the page to mux.
func (s *Server) apiDocsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /openapi/tools.json", s.serveOpenAPI("tools"))
	mux.HandleFunc("GET /openapi/admin.json", s.serveOpenAPI("admin"))
	mux.HandleFunc("GET /openapi/opensandbox.json", s.serveOpenAPI("opensandbox"))
	mux.HandleFunc("GET /docs", apidocs.Page)
	mux.HandleFunc("GET /docs/{file}", apidocs.Asset)
}

// openAPI returns document name ("tools", "admin", "opensandbox").
func (s *Server) openAPI(name string) (*oaDoc, error) {
	switch name {
	case "tools":
		return toolsDoc()
	case "admin":
		return adminDoc(), nil
	case "opensandbox":
		return osbDoc(s.opts.OSBExecdPort), nil
	}
	return nil, fmt.Errorf("no API document %q", name)
}

func (s *Server) serveOpenAPI(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		doc, err := s.openAPI(name)
		var body []byte
		if err == nil {
			body, err = json.MarshalIndent(doc, "", "  ")
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "API document "+name+": "+err.Error())
			return
		}
		sum := sha256.Sum256(body)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", `"`+hex.EncodeToString(sum[:12])+`"`)
		h.Set("X-Content-Type-Options", "nosniff")
		// The page's renderer fetches it from this origin; other origins'
		// pages may read it too (it holds nothing secret, and no
		// credentials go with such a request).
		h.Set("Access-Control-Allow-Origin", "*")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}
}

// The parts of an OpenAPI 3.1 document that the documents use.
type (
	oaDoc struct {
		OpenAPI    string                      `json:"openapi"`
		Info       oaInfo                      `json:"info"`
		Servers    []oaServer                  `json:"servers,omitempty"`
		Tags       []oaTag                     `json:"tags,omitempty"`
		Security   []oaRequirement             `json:"security,omitempty"`
		Paths      map[string]map[string]*oaOp `json:"paths"`
		Components oaComponents                `json:"components"`

		// pathParams describe the path parameters by name; add fills
		// them in.
		pathParams map[string]string
	}
	oaInfo struct {
		Title       string     `json:"title"`
		Version     string     `json:"version"`
		Description string     `json:"description,omitempty"`
		License     *oaLicense `json:"license,omitempty"`
	}
	oaLicense struct {
		Name       string `json:"name"`
		Identifier string `json:"identifier,omitempty"`
	}
	oaServer struct {
		URL         string `json:"url"`
		Description string `json:"description,omitempty"`
	}
	oaTag struct {
		Name        string `json:"name"`
		Description string `json:"description,omitempty"`
	}
	// oaRequirement is a security requirement: scheme names, each with
	// its (no) scopes.
	oaRequirement map[string][]string
	oaOp          struct {
		Tags        []string               `json:"tags,omitempty"`
		Summary     string                 `json:"summary,omitempty"`
		Description string                 `json:"description,omitempty"`
		OperationID string                 `json:"operationId,omitempty"`
		Parameters  []*oaParam             `json:"parameters,omitempty"`
		RequestBody *oaBody                `json:"requestBody,omitempty"`
		Responses   map[string]*oaResponse `json:"responses"`
		// Security, when set, replaces the document's (an empty list:
		// no key needed).
		Security *[]oaRequirement `json:"security,omitempty"`
	}
	oaParam struct {
		Ref         string             `json:"$ref,omitempty"`
		Name        string             `json:"name,omitempty"`
		In          string             `json:"in,omitempty"`
		Description string             `json:"description,omitempty"`
		Required    bool               `json:"required,omitempty"`
		Schema      *jsonschema.Schema `json:"schema,omitempty"`
		Example     any                `json:"example,omitempty"`
	}
	oaBody struct {
		Description string             `json:"description,omitempty"`
		Required    bool               `json:"required,omitempty"`
		Content     map[string]oaMedia `json:"content"`
	}
	oaMedia struct {
		Schema  *jsonschema.Schema `json:"schema,omitempty"`
		Example any                `json:"example,omitempty"`
	}
	oaResponse struct {
		Ref         string               `json:"$ref,omitempty"`
		Description string               `json:"description,omitempty"`
		Headers     map[string]*oaHeader `json:"headers,omitempty"`
		Content     map[string]oaMedia   `json:"content,omitempty"`
	}
	oaHeader struct {
		Description string             `json:"description,omitempty"`
		Schema      *jsonschema.Schema `json:"schema"`
	}
	oaComponents struct {
		Schemas         map[string]*jsonschema.Schema `json:"schemas,omitempty"`
		Parameters      map[string]*oaParam           `json:"parameters,omitempty"`
		Responses       map[string]*oaResponse        `json:"responses,omitempty"`
		SecuritySchemes map[string]*oaSecurity        `json:"securitySchemes,omitempty"`
	}
	oaSecurity struct {
		Type         string `json:"type"`
		Scheme       string `json:"scheme,omitempty"`
		BearerFormat string `json:"bearerFormat,omitempty"`
		In           string `json:"in,omitempty"`
		Name         string `json:"name,omitempty"`
		Description  string `json:"description,omitempty"`
	}
)

func newDoc(title, description string) *oaDoc {
	return &oaDoc{
		OpenAPI: "3.1.0",
		// No license: the project has not chosen one, so the documents
		// claim none.
		Info:    oaInfo{Title: title, Version: Implementation.Version, Description: description},
		Servers: []oaServer{{URL: "/", Description: "this server"}},
		Paths:   map[string]map[string]*oaOp{},
		Components: oaComponents{
			Schemas: map[string]*jsonschema.Schema{}, Parameters: map[string]*oaParam{},
			Responses: map[string]*oaResponse{}, SecuritySchemes: map[string]*oaSecurity{},
		},
		pathParams: map[string]string{},
	}
}

// pathParam matches a path's parameters ({id}, and the mux's {path...}).
var pathParam = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// add documents operation method path. Path parameters it does not list
// are added (string, described by d.pathParams); the operation ID, when
// not set, is made from the method and path.
func (d *oaDoc) add(method, path string, op *oaOp) {
	if d.Paths[path] == nil {
		d.Paths[path] = map[string]*oaOp{}
	}
	method = strings.ToLower(method)
	if d.Paths[path][method] != nil {
		panic("API document: " + method + " " + path + " twice")
	}
	var params []*oaParam
	for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
		if !slices.ContainsFunc(op.Parameters, func(p *oaParam) bool { return p.In == "path" && p.Name == m[1] }) {
			params = append(params, &oaParam{Name: m[1], In: "path", Required: true, Description: d.pathParams[m[1]], Schema: str("")})
		}
	}
	op.Parameters = append(params, op.Parameters...)
	if op.OperationID == "" {
		op.OperationID = operationID(method, path)
	}
	if op.Responses == nil {
		op.Responses = map[string]*oaResponse{}
	}
	d.Paths[path][method] = op
}

// operationID makes "getSandboxesIdEndpointsPort" of GET
// /sandboxes/{id}/endpoints/{port}.
func operationID(method, path string) string {
	var b strings.Builder
	b.WriteString(method)
	for _, part := range strings.FieldsFunc(path, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') }) {
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// Schema helpers.

// docTypeSchemas are how the documents show types jsonschema.For does not
// know as JSON shows them.
var docTypeSchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[time.Time]():       {Type: "string", Format: "date-time"},
	reflect.TypeFor[json.RawMessage](): {Description: "any JSON value"},
}

// schemaFor is T's schema, with descriptions (property: text) added.
func schemaFor[T any](descriptions map[string]string) *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: docTypeSchemas})
	if err != nil {
		panic(fmt.Sprintf("API document: %v", err)) // a type of this file: TestAPIDocuments
	}
	for name, text := range descriptions {
		p := s.Properties[name]
		if p == nil {
			panic(fmt.Sprintf("API document: %T has no property %q", *new(T), name))
		}
		p.Description = text
	}
	return s
}

func ref(name string) *jsonschema.Schema {
	return &jsonschema.Schema{Ref: "#/components/schemas/" + name}
}

func str(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: desc}
}

func integer(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "integer", Description: desc}
}

func boolean(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "boolean", Description: desc}
}

func arrayOf(items *jsonschema.Schema, desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "array", Items: items, Description: desc}
}

// object is an object of the given properties (name, schema pairs), all
// of them required unless listed in optional.
func object(desc string, props map[string]*jsonschema.Schema, optional ...string) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Description: desc, Properties: props}
	for name := range props {
		if !slices.Contains(optional, name) {
			s.Required = append(s.Required, name)
		}
	}
	slices.Sort(s.Required)
	return s
}

func ptr[T any](v T) *T { return &v }

// Parameter, body and response helpers.

func query(name, desc string, s *jsonschema.Schema) *oaParam {
	return &oaParam{Name: name, In: "query", Description: desc, Schema: s}
}

func header(name, desc string, required bool) *oaParam {
	return &oaParam{Name: name, In: "header", Description: desc, Required: required, Schema: str("")}
}

func paramRef(name string) *oaParam { return &oaParam{Ref: "#/components/parameters/" + name} }

func jsonBody(desc string, s *jsonschema.Schema, example any) *oaBody {
	return &oaBody{Description: desc, Required: true, Content: map[string]oaMedia{"application/json": {Schema: s, Example: example}}}
}

func jsonResponse(desc string, s *jsonschema.Schema) *oaResponse {
	return &oaResponse{Description: desc, Content: map[string]oaMedia{"application/json": {Schema: s}}}
}

func textResponse(ctype, desc string) *oaResponse {
	return &oaResponse{Description: desc, Content: map[string]oaMedia{ctype: {Schema: str("")}}}
}

func emptyResponse(desc string) *oaResponse { return &oaResponse{Description: desc} }

func responseRef(name string) *oaResponse {
	return &oaResponse{Ref: "#/components/responses/" + name}
}

// noKey is the security of routes that need no key.
var noKey = &[]oaRequirement{}

// Types the documents show (the server writes them as maps).
type (
	docHealth struct {
		Status string `json:"status" jsonschema:"always healthy"`
	}
	docStatus struct {
		Enabled bool   `json:"enabled" jsonschema:"whether the backend answers"`
		Backend string `json:"backend" jsonschema:"the backend's name (docker, lite, local, kubernetes, ...)"`
		Reason  string `json:"reason,omitempty" jsonschema:"why the backend cannot be reached, when it cannot"`
	}
	docPools struct {
		Pools []session.PoolStats `json:"pools" jsonschema:"one entry per warm pool, sorted by type"`
	}
	docTool struct {
		Name        string         `json:"name" jsonschema:"the tool's name: POST /tools/{name} runs it"`
		Description string         `json:"description" jsonschema:"what the model is told about the tool"`
		InputSchema map[string]any `json:"input_schema" jsonschema:"the tool's arguments, as a JSON Schema"`
	}
	docError struct {
		Error string `json:"error" jsonschema:"what went wrong"`
	}
)

// resultSchema is Result's, described.
func resultSchema() *jsonschema.Schema {
	s := schemaFor[Result](map[string]string{
		"output":      "the text the agent reads: the tool's answer, or what went wrong",
		"is_error":    "the call failed (the output says why); still HTTP 200",
		"sandbox_id":  "the sandbox the call made or used (create_sandbox, connect_sandbox, delete_sandbox)",
		"job_id":      "the background job the call started or used (execute with background, job_*)",
		"terminal_id": "the terminal the call started or used (terminal_*)",
	})
	s.Description = "The outcome of a tool call. A tool's own failure (a missing file, a command's non-zero exit is not one) is a 200 with is_error set."
	return s
}

// auditEntrySchema is AuditEntry's, described.
func auditEntrySchema() *jsonschema.Schema {
	s := schemaFor[AuditEntry](map[string]string{
		"time":         "when the call started (UTC)",
		"kind":         "tool (an MCP or HTTP tool call), terminal (a terminal WebSocket), opensandbox (a change through the OpenSandbox API or its execd) or admin (an operator's call)",
		"conversation": "who asked: conv:ID (X-Conversation-Id), mcp:SESSION, opensandbox, ...",
		"sandbox":      "the sandbox the call acted on",
		"tool":         "the tool's name (kind tool)",
		"route":        `the HTTP route otherwise ("POST /v1/sandboxes", "execd POST /command", ...)`,
		"argv":         "what ran: a command, a terminal's program",
		"path":         "the file or folder a call read, wrote or listed",
		"exit_code":    "a command's exit code, when it ran to the end in the call",
		"status":       "the HTTP status answered (routes)",
		"is_error":     "the call failed (tools: the agent was told so)",
		"duration_ms":  "how long the call took, in milliseconds",
		"bytes":        "what the call sent into the sandbox: a file's size, a request body's length",
	})
	s.Properties["kind"].Enum = []any{AuditTool, AuditTerminal, AuditOpenSandbox, AuditAdmin}
	s.Description = "One line of the audit trail. It never holds file contents, output, request bodies, headers or keys."
	return s
}

const conversationPattern = `^[A-Za-z0-9._:@/+=-]{1,200}$`

// toolsDoc is the agents' HTTP API.
func toolsDoc() (*oaDoc, error) {
	d := newDoc("sandboxkit tools API", `The HTTP API of `+"`sbx serve`"+` for agents and programs: the sandbox tools (the same as over MCP) as plain JSON calls, a WebSocket terminal, and MCP over streamable HTTP.

**Keys.** When the server has an API key (`+"`$"+EnvAPIKey+"`"+` or `+"`[sandbox.serve] api_key`"+`), every route but /health, /openapi/* and /docs needs it, as `+"`Authorization: Bearer KEY`"+` or `+"`X-API-Key: KEY`"+`; without one, none does. A wrong or missing key is a 401.

**Conversations.** A tool call belongs to a conversation, named by the `+"`X-Conversation-Id`"+` header (1 to 200 of A-Z a-z 0-9 . _ : @ / + = -): a conversation sees only its own sandboxes. The JSON API requires it; over MCP it is optional (the MCP session is the conversation).

**Tools.** `+"`GET /tools`"+` lists them with their JSON input schemas; `+"`POST /tools/{name}`"+` runs one with its arguments as the JSON body and answers a Result. Each tool is documented below as its own operation. A tool's own failure is a 200 with `+"`is_error`"+` set; 4xx and 5xx are failures of the request (bad JSON, no conversation, too large a body: 413, no room for the body right now: 503).

The operator's routes are in /openapi/admin.json; the OpenSandbox-compatible API in /openapi/opensandbox.json. /docs renders all three.`)
	d.Tags = []oaTag{
		{Name: "Server", Description: "health, the backend, the pools and the list of tools"},
		{Name: "Sandboxes", Description: "create, find and remove a conversation's sandboxes"},
		{Name: "Files", Description: "file tools (fileops): ls, read, write, edit, glob, grep"},
		{Name: "Commands", Description: "run commands, in the foreground or as background jobs"},
		{Name: "Terminals", Description: "interactive programs on a pseudo-terminal: the terminal tools and the WebSocket"},
		{Name: "MCP", Description: "the same tools over the Model Context Protocol"},
		{Name: "Documentation", Description: "these documents and the page that renders them; no key needed"},
	}
	d.pathParams["id"] = "the sandbox's ID (sandbox_id)"
	d.Components.SecuritySchemes["bearer"] = &oaSecurity{Type: "http", Scheme: "bearer",
		Description: "the API key, as Authorization: Bearer KEY (needed only when the server has one)"}
	d.Components.SecuritySchemes["apiKey"] = &oaSecurity{Type: "apiKey", In: "header", Name: "X-API-Key",
		Description: "the API key, as X-API-Key: KEY (the same key as bearer)"}
	d.Security = []oaRequirement{{"bearer": {}}, {"apiKey": {}}}
	d.Components.Parameters["Conversation"] = &oaParam{Name: HeaderConversation, In: "header", Required: true,
		Description: "the conversation the call belongs to: it sees only its own sandboxes",
		Schema:      &jsonschema.Schema{Type: "string", Pattern: conversationPattern}, Example: "chat-42"}
	d.Components.Schemas["Error"] = schemaFor[docError](nil)
	d.Components.Schemas["Result"] = resultSchema()
	d.Components.Schemas["Tool"] = schemaFor[docTool](nil)
	d.Components.Schemas["PoolStats"] = schemaFor[session.PoolStats](nil)
	d.Components.Responses["Unauthorized"] = jsonResponse("missing or wrong API key", ref("Error"))
	d.Components.Responses["BadRequest"] = jsonResponse("bad JSON arguments, or a missing or malformed X-Conversation-Id", ref("Error"))
	d.Components.Responses["TooLarge"] = jsonResponse(fmt.Sprintf("the body is larger than the route takes (%d MiB for tools)", MaxJSONBodyBytes>>20), ref("Error"))
	d.Components.Responses["Busy"] = jsonResponse("the server holds as many request bodies as it may: retry shortly", ref("Error"))

	d.add("GET", "/health", &oaOp{Tags: []string{"Server"}, Summary: "Health check", Security: noKey,
		Description: "Answers as long as the server runs; needs no key.",
		Responses:   map[string]*oaResponse{"200": jsonResponse("the server runs", schemaFor[docHealth](nil))}})
	d.add("GET", "/sandbox/status", &oaOp{Tags: []string{"Server"}, Summary: "Whether the backend can be reached",
		Responses: map[string]*oaResponse{"200": jsonResponse("the backend's state", schemaFor[docStatus](nil)), "401": responseRef("Unauthorized")}})
	pools := schemaFor[docPools](nil)
	pools.Properties["pools"] = arrayOf(ref("PoolStats"), "one entry per warm pool, sorted by type")
	d.add("GET", "/pools", &oaOp{Tags: []string{"Server"}, Summary: "The warm pools' figures",
		Responses: map[string]*oaResponse{"200": jsonResponse("the pools", pools), "401": responseRef("Unauthorized")}})
	d.add("GET", "/tools", &oaOp{Tags: []string{"Server"}, Summary: "List the tools",
		Description: "The tools, in the order agents see them, each with its JSON input schema and the description this server gives the model.",
		Responses:   map[string]*oaResponse{"200": jsonResponse("the tools", arrayOf(ref("Tool"), "")), "401": responseRef("Unauthorized")}})
	for _, t := range tools() {
		in, err := t.schema()
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.name, err)
		}
		s, ok := in.(*jsonschema.Schema)
		if !ok {
			return nil, fmt.Errorf("tool %s: schema of type %T", t.name, in)
		}
		d.add("POST", "/tools/"+t.name, &oaOp{Tags: []string{toolTag(t.name)}, Summary: t.name, OperationID: t.name,
			Description: t.description + "\n\nThe body is the tool's arguments; the answer a Result (a tool's own failure has is_error set).",
			Parameters:  []*oaParam{paramRef("Conversation")},
			RequestBody: jsonBody("the tool's arguments", s, nil),
			Responses: map[string]*oaResponse{
				"200": jsonResponse("the tool ran: its Result (is_error when it failed)", ref("Result")),
				"400": responseRef("BadRequest"), "401": responseRef("Unauthorized"),
				"413": responseRef("TooLarge"), "503": responseRef("Busy"),
			}})
	}
	d.add("GET", "/sandboxes/{id}/terminal", terminalOp())
	for _, m := range []string{"POST", "GET", "DELETE"} {
		d.add(m, "/mcp", mcpOp(m))
	}
	for _, doc := range apiDocuments {
		d.add("GET", "/openapi/"+doc.name+".json", &oaOp{Tags: []string{"Documentation"}, Summary: "OpenAPI document: " + doc.title, Security: noKey,
			Responses: map[string]*oaResponse{"200": jsonResponse("an OpenAPI 3.1 document", &jsonschema.Schema{Type: "object"})}})
	}
	d.add("GET", "/docs", &oaOp{Tags: []string{"Documentation"}, Summary: "The documentation page", Security: noKey,
		Description: "An HTML page that renders the three documents (?api=tools, admin or opensandbox) with RapiDoc " + apidocs.RapiDocVersion +
			", embedded in the server: it loads nothing from other origins. Its Content-Security-Policy allows this server only.",
		Parameters: []*oaParam{query("api", "the document shown; default tools", &jsonschema.Schema{Type: "string", Enum: []any{"tools", "admin", "opensandbox"}})},
		Responses:  map[string]*oaResponse{"200": textResponse("text/html", "the page")}})
	d.add("GET", "/docs/{file}", &oaOp{Tags: []string{"Documentation"}, Summary: "An asset of the documentation page", Security: noKey,
		Description: "The page's script, stylesheet, the renderer's bundle (gzip-compressed for clients that accept it) and its licences (licenses.txt).",
		Parameters: []*oaParam{{Name: "file", In: "path", Required: true, Description: "the asset",
			Schema: &jsonschema.Schema{Type: "string", Enum: []any{"docs.js", "docs.css", "rapidoc-min.js", "licenses.txt"}}}},
		Responses: map[string]*oaResponse{"200": textResponse("text/javascript", "the asset"), "404": textResponse("text/plain", "no such asset")}})
	return d, nil
}

// toolTag is the tag of tool name's operation.
func toolTag(name string) string {
	for tag, list := range map[string][]toolDef{"Sandboxes": sandboxTools(), "Files": fileTools(), "Commands": execTools(), "Terminals": terminalTools()} {
		if slices.ContainsFunc(list, func(t toolDef) bool { return t.name == name }) {
			return tag
		}
	}
	return "Tools"
}

func terminalOp() *oaOp {
	return &oaOp{Tags: []string{"Terminals"}, Summary: "A terminal of a sandbox, over a WebSocket", OperationID: "terminal",
		Description: `A WebSocket (RFC 6455: send the Upgrade headers) to a terminal of the sandbox: a new one running command, or, with terminal=ID, one the terminal tools or an earlier WebSocket started (its recent output is replayed first).

**Messages.** Binary messages are the terminal's bytes both ways (the client's are typed input). The client's text messages are JSON control messages: ` + "`" + `{"type":"resize","rows":R,"cols":C}` + "`" + `. The server's text messages are JSON: ` + "`" + `{"type":"started","terminal_id":ID}` + "`" + ` first; ` + "`" + `{"type":"exit","exit_code":N}` + "`" + ` last, when the program ended, followed by a normal close (1000); ` + "`" + `{"type":"error","message":TEXT}` + "`" + ` for a control message it could not act on, or, followed by a close with 1011, when the terminal was lost. When the server shuts down or the sandbox reaches its maximum lifetime it closes with 1001.

When the client goes, the terminal is detached (it keeps running and can be attached to again) where the sandbox's terminals outlive their client, and its program is killed elsewhere. While a WebSocket is connected its sandbox does not expire for being idle. Browsers, which cannot send headers on a WebSocket, name the conversation with the conversation parameter.`,
		Parameters: []*oaParam{
			header("Upgrade", "websocket", true),
			header("Connection", "Upgrade", true),
			header("Sec-WebSocket-Key", "the WebSocket handshake's key", true),
			header("Sec-WebSocket-Version", "13", true),
			{Name: HeaderConversation, In: "header", Description: "the conversation the sandbox belongs to (or the conversation parameter)",
				Schema: &jsonschema.Schema{Type: "string", Pattern: conversationPattern}},
			query("conversation", "the conversation, for clients that cannot send X-Conversation-Id (browsers)", &jsonschema.Schema{Type: "string", Pattern: conversationPattern}),
			query("terminal", "attach to this terminal of the sandbox (a terminal_id); without it a new terminal starts", str("")),
			query("command", "what a new terminal runs, with sh -c; default bash where the sandbox has it, else sh", str("")),
			query("rows", "the terminal's rows (default 24; attaching: resize)", integer("")),
			query("cols", "the terminal's columns (default 80; attaching: resize)", integer("")),
		},
		Responses: map[string]*oaResponse{
			"101": emptyResponse("Switching Protocols: the WebSocket is open"),
			"400": jsonResponse("not a WebSocket handshake, a bad parameter or a missing conversation", ref("Error")),
			"401": responseRef("Unauthorized"),
			"404": jsonResponse("no such sandbox or terminal in this conversation", ref("Error")),
		}}
}

func mcpOp(method string) *oaOp {
	session := header("Mcp-Session-Id", "the MCP session: the Mcp-Session-Id the answer to initialize carried", method != "POST")
	conv := &oaParam{Name: HeaderConversation, In: "header",
		Description: "optional: names the conversation instead of the MCP session, so a client that reconnects (or a restarted server) keeps its sandboxes",
		Schema:      &jsonschema.Schema{Type: "string", Pattern: conversationPattern}}
	version := header("MCP-Protocol-Version", "the protocol version agreed at initialize", false)
	op := &oaOp{Tags: []string{"MCP"}, Parameters: []*oaParam{session, conv, version},
		Responses: map[string]*oaResponse{"401": responseRef("Unauthorized")}}
	switch method {
	case "POST":
		op.Summary = "MCP: send JSON-RPC messages"
		op.OperationID = "mcpPost"
		op.Description = `MCP over streamable HTTP (protocol versions with sessions: ` + strings.Join(sessionedVersions, ", ") + `). Start with initialize, sent without Mcp-Session-Id; send the Mcp-Session-Id of its answer with every later request. A request other than initialize without a session is refused with 400. The body is a JSON-RPC message (or a batch); the answer JSON or a text/event-stream of JSON-RPC messages.

The tools are the ones documented here under POST /tools/{name}; tools/list gives their schemas.`
		op.RequestBody = jsonBody("a JSON-RPC request, notification or response, or a batch of them", &jsonschema.Schema{Type: "object"},
			map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
				"protocolVersion": sessionedVersions[len(sessionedVersions)-1], "capabilities": map[string]any{},
				"clientInfo": map[string]any{"name": "example", "version": "1"}}})
		op.Responses["200"] = &oaResponse{Description: "the answer: JSON, or a stream of JSON-RPC messages", Headers: map[string]*oaHeader{
			"Mcp-Session-Id": {Description: "the new session (answer to initialize)", Schema: str("")}},
			Content: map[string]oaMedia{"application/json": {Schema: &jsonschema.Schema{Type: "object"}}, "text/event-stream": {Schema: str("")}}}
		op.Responses["202"] = emptyResponse("accepted: the body held only notifications or responses")
		op.Responses["400"] = jsonResponse("not a valid request, a bad X-Conversation-Id, or no session", &jsonschema.Schema{Type: "object"})
		op.Responses["404"] = emptyResponse("the session is unknown or ended: initialize again")
		op.Responses["413"] = jsonResponse(fmt.Sprintf("a body larger than %d MiB", MaxMCPBodyBytes>>20), ref("Error"))
	case "GET":
		op.Summary = "MCP: the stream of the server's messages"
		op.OperationID = "mcpStream"
		op.Description = "A text/event-stream of the server's messages to the session (notifications, requests)."
		op.Responses["200"] = textResponse("text/event-stream", "the session's messages")
		op.Responses["400"] = emptyResponse("no session")
		op.Responses["404"] = emptyResponse("the session is unknown or ended")
	case "DELETE":
		op.Summary = "MCP: end the session"
		op.OperationID = "mcpDelete"
		op.Description = "Ends the MCP session. Its sandboxes stay until they expire (or delete_sandbox)."
		op.Responses["204"] = emptyResponse("the session ended")
		op.Responses["400"] = emptyResponse("no session")
		op.Responses["404"] = emptyResponse("the session is unknown or ended")
	}
	return op
}

// adminDoc is the operator's API.
func adminDoc() *oaDoc {
	d := newDoc("sandboxkit admin API", `The operator's routes of `+"`sbx serve`"+`: sandboxes' egress policies, the audit trail and the Prometheus metrics.

**Key.** They need the admin key (`+"`$"+EnvAdminKey+"`"+` or `+"`[sandbox.serve] admin_key`"+`), a key other than the API key, as `+"`Authorization: Bearer ADMIN_KEY`"+` or `+"`X-API-Key: ADMIN_KEY`"+`. The API key does not open them (401). A server started without an admin key keeps them closed: 403.

Every change through /admin is written to the audit trail (kind admin).`)
	d.Tags = []oaTag{
		{Name: "Egress", Description: "a sandbox's egress policy and its refused attempts"},
		{Name: "Audit", Description: "the audit trail: one entry per thing done to a sandbox or the server"},
		{Name: "Metrics", Description: "Prometheus metrics"},
	}
	d.pathParams["id"] = "the sandbox's ID"
	d.Components.SecuritySchemes["adminBearer"] = &oaSecurity{Type: "http", Scheme: "bearer",
		Description: "the admin key, as Authorization: Bearer ADMIN_KEY (not the API key)"}
	d.Components.SecuritySchemes["adminKey"] = &oaSecurity{Type: "apiKey", In: "header", Name: "X-API-Key",
		Description: "the admin key, as X-API-Key: ADMIN_KEY"}
	d.Security = []oaRequirement{{"adminBearer": {}}, {"adminKey": {}}}
	d.Components.Schemas["Error"] = schemaFor[docError](nil)
	egress := schemaFor[backend.Egress](map[string]string{
		"default": `what is not listed gets: "deny" (also when empty) or "allow"`,
		"allow":   "what the sandbox may reach: host names (*.example.com for subdomains), IP addresses or CIDR ranges, each with :PORT optionally",
		"deny":    "what it may not reach, the same forms; deny wins over allow",
	})
	egress.Properties["default"].Enum = []any{"", "deny", "allow"}
	egress.Description = "An egress policy."
	d.Components.Schemas["Egress"] = egress
	denial := schemaFor[backend.EgressDenial](map[string]string{
		"time": "when", "proto": "dns, tcp or udp", "dest": `the address tried, or the name looked up for "dns"`,
		"port": "the port tried", "name": "the TLS SNI, HTTP Host or DNS name involved, if any", "reason": "why it was refused, or which credentials a let-through request carried (names, never values)",
		"kind":   `"" for a refused attempt; "credential" for a request to a declared host that carried brokered credentials`,
		"method": "kind credential: the request's method", "path": "kind credential: the request's path, without its query",
		"status": "kind credential: the server's answer (502 when it was not reached)",
	})
	denial.Description = "One refused attempt of the sandbox to reach something, or one request that carried brokered credentials."
	d.Components.Schemas["EgressDenial"] = denial
	d.Components.Schemas["EgressStatus"] = object("A sandbox's policy and its latest refused attempts, oldest first.", map[string]*jsonschema.Schema{
		"policy": ref("Egress"), "denials": arrayOf(ref("EgressDenial"), "the latest refused attempts, oldest first"),
	})
	d.Components.Schemas["AuditEntry"] = auditEntrySchema()
	d.Components.Responses["Unauthorized"] = jsonResponse("missing or wrong admin key (the API key does not open /admin)", ref("Error"))
	d.Components.Responses["Closed"] = jsonResponse("the server has no admin key: the admin routes are closed", ref("Error"))
	d.Components.Responses["NotOurs"] = jsonResponse("the sandbox is not one of this server's", ref("Error"))
	d.Components.Responses["NoEgress"] = jsonResponse("the backend does not enforce egress policies", ref("Error"))
	auth := map[string]*oaResponse{"401": responseRef("Unauthorized"), "403": responseRef("Closed")}
	with := func(m map[string]*oaResponse) map[string]*oaResponse {
		out := maps.Clone(auth)
		maps.Copy(out, m)
		return out
	}
	d.add("GET", "/admin/sandboxes/{id}/egress", &oaOp{Tags: []string{"Egress"}, Summary: "A sandbox's egress policy and denied attempts",
		OperationID: "getEgress",
		Responses: with(map[string]*oaResponse{
			"200": jsonResponse("the policy and the latest denials", ref("EgressStatus")),
			"404": responseRef("NotOurs"), "501": responseRef("NoEgress"),
		})})
	d.add("PUT", "/admin/sandboxes/{id}/egress", &oaOp{Tags: []string{"Egress"}, Summary: "Replace a sandbox's egress policy",
		OperationID: "setEgress",
		Description: "The body replaces the policy: new connections and DNS queries follow it at once, and open connections it no longer allows are closed within a second. " +
			"A sandbox made without a policy cannot get one later (409). Unknown fields are refused.",
		RequestBody: jsonBody("the new policy", ref("Egress"), map[string]any{"default": "deny", "allow": []string{"pypi.org", "*.pythonhosted.org:443"}}),
		Responses: with(map[string]*oaResponse{
			"204": emptyResponse("the policy is in force"),
			"400": jsonResponse("not a policy, or one the enforcer refuses", ref("Error")),
			"404": responseRef("NotOurs"),
			"409": jsonResponse("the sandbox was made without a policy and cannot get one", ref("Error")),
			"501": responseRef("NoEgress"),
		})})
	d.add("GET", "/admin/audit", &oaOp{Tags: []string{"Audit"}, Summary: "The audit trail's latest entries", OperationID: "audit",
		Description: fmt.Sprintf("The latest entries that match every filter given, oldest first: from the audit file (and its rotated files) when the server writes one, else from the %d kept in memory.", auditRing),
		Parameters: []*oaParam{
			query("conversation", "only this conversation's entries (as the entries show it: conv:ID, mcp:SESSION, opensandbox)", str("")),
			query("sandbox", "only entries of this sandbox", str("")),
			query("kind", "only entries of this kind", &jsonschema.Schema{Type: "string", Enum: []any{AuditTool, AuditTerminal, AuditOpenSandbox, AuditAdmin}}),
			query("tool", "only calls of this tool", str("")),
			query("since", "only entries at or after this time (RFC 3339, such as 2026-11-29T15:04:05Z)", &jsonschema.Schema{Type: "string", Format: "date-time"}),
			query("limit", "at most this many entries, the latest (default 100)", &jsonschema.Schema{Type: "integer",
				Minimum: ptr(1.0), Maximum: ptr(float64(maxAuditAnswer)), Default: json.RawMessage("100")}),
		},
		Responses: with(map[string]*oaResponse{
			"200": jsonResponse("the entries", object("", map[string]*jsonschema.Schema{"entries": arrayOf(ref("AuditEntry"), "oldest first")})),
			"400": jsonResponse("a bad since or limit", ref("Error")),
			"500": jsonResponse("the audit file could not be read", ref("Error")),
		})})
	d.add("GET", "/metrics", &oaOp{Tags: []string{"Metrics"}, Summary: "Prometheus metrics", OperationID: "metrics",
		Description: "The server's metrics in Prometheus's text format (or OpenMetrics, when the scraper asks for it): tool calls and their durations, HTTP requests by route, sandboxes, pools, refused keys, command times, and Go's runtime. Point a scrape job at it with the admin key as its bearer token.",
		Responses: with(map[string]*oaResponse{
			"200": textResponse("text/plain; version=0.0.4", "the metrics"),
			"503": emptyResponse("two scrapes are running already"),
		})})
	return d
}
