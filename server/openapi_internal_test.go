package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
)

const (
	docsAPIKey   = "docs-test-api-key"
	docsAdminKey = "docs-test-admin-key"
)

// docsServer is a server over the local backend with both keys set.
func docsServer(t *testing.T) *Server {
	t.Helper()
	b, err := local.New(local.Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s, err := New(Options{Backend: b, Spec: func(typ string) (backend.Spec, error) { return backend.Spec{Name: typ}, nil },
		APIKey: docsAPIKey, AdminKey: docsAdminKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// docsHandler is s.Handler(), with the documentation routes beside it
// while Handler does not add them itself.
func docsHandler(t *testing.T, s *Server) http.Handler {
	h := s.Handler()
	req := httptest.NewRequest("GET", "/openapi/tools.json", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code == http.StatusOK {
		return h
	}
	t.Log("Handler() does not serve /openapi/tools.json (it does not call s.apiDocsRoutes yet): the documentation routes are probed beside it")
	mux := http.NewServeMux()
	s.apiDocsRoutes(mux)
	mux.Handle("/", h)
	return mux
}

// docJSON is document name as served, decoded.
func docJSON(t *testing.T, h http.Handler, name string) map[string]any {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi/"+name+".json", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi/%s.json: %d %s: %s", name, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("/openapi/%s.json: %v", name, err)
	}
	return doc
}

// docOp is one documented operation.
type docOp struct {
	doc, method, path string // method in upper case
	op                map[string]any
}

func docOps(doc map[string]any, name string) []docOp {
	var ops []docOp
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			ops = append(ops, docOp{doc: name, method: strings.ToUpper(method), path: path, op: op.(map[string]any)})
		}
	}
	slices.SortFunc(ops, func(a, b docOp) int { return strings.Compare(a.path+" "+a.method, b.path+" "+b.method) })
	return ops
}

// The documents are well-formed: OpenAPI 3.1, every $ref resolves,
// every path parameter is declared, operation IDs are unique, and every
// schema compiles.
func TestAPIDocuments(t *testing.T) {
	s := docsServer(t)
	h := docsHandler(t, s)
	for _, d := range apiDocuments {
		t.Run(d.name, func(t *testing.T) {
			doc := docJSON(t, h, d.name)
			if doc["openapi"] != "3.1.0" {
				t.Errorf("openapi %v", doc["openapi"])
			}
			raw, _ := json.Marshal(doc)
			for _, m := range regexp.MustCompile(`"\$ref":"#/components/(\w+)/(\w+)"`).FindAllStringSubmatch(string(raw), -1) {
				if _, ok := doc["components"].(map[string]any)[m[1]].(map[string]any)[m[2]]; !ok {
					t.Errorf("$ref to %s/%s: not in components", m[1], m[2])
				}
			}
			ids := map[string]string{}
			for _, o := range docOps(doc, d.name) {
				id, _ := o.op["operationId"].(string)
				if prev, ok := ids[id]; ok || id == "" {
					t.Errorf("%s %s: operationId %q (also %s)", o.method, o.path, id, prev)
				}
				ids[id] = o.method + " " + o.path
				var declared []string
				params, _ := o.op["parameters"].([]any)
				for _, p := range params {
					p := p.(map[string]any)
					if r, ok := p["$ref"].(string); ok {
						p = doc["components"].(map[string]any)["parameters"].(map[string]any)[strings.TrimPrefix(r, "#/components/parameters/")].(map[string]any)
					}
					if p["in"] == "path" {
						declared = append(declared, p["name"].(string))
						if p["required"] != true {
							t.Errorf("%s %s: path parameter %s not required", o.method, o.path, p["name"])
						}
					}
				}
				for _, m := range pathParam.FindAllStringSubmatch(o.path, -1) {
					if !slices.Contains(declared, m[1]) {
						t.Errorf("%s %s: path parameter %s not declared", o.method, o.path, m[1])
					}
				}
				if len(o.op["responses"].(map[string]any)) == 0 {
					t.Errorf("%s %s: no responses", o.method, o.path)
				}
			}
			// RapiDoc 9.3.8 fails to render an example holding a null.
			var nullIn func(v any) bool
			nullIn = func(v any) bool {
				switch v := v.(type) {
				case nil:
					return true
				case map[string]any:
					return slices.ContainsFunc(slices.Collect(maps.Values(v)), nullIn)
				case []any:
					return slices.ContainsFunc(v, nullIn)
				}
				return false
			}
			var examples func(v any)
			examples = func(v any) {
				switch v := v.(type) {
				case map[string]any:
					for k, x := range v {
						if k == "example" && nullIn(x) {
							t.Errorf("an example holds a null (RapiDoc cannot render it): %v", x)
						}
						examples(x)
					}
				case []any:
					for _, x := range v {
						examples(x)
					}
				}
			}
			examples(doc["paths"])
			for name := range doc["components"].(map[string]any)["schemas"].(map[string]any) {
				if _, err := docSchema(t, doc, name); err != nil {
					t.Errorf("schema %s: %v", name, err)
				}
			}
		})
	}
}

// docSchema resolves component schema name of doc for validation.
func docSchema(t *testing.T, doc map[string]any, name string) (*jsonschema.Resolved, error) {
	t.Helper()
	defs, _ := json.Marshal(doc["components"].(map[string]any)["schemas"])
	root := fmt.Sprintf(`{"$defs":%s,"$ref":"#/$defs/%s"}`, strings.ReplaceAll(string(defs), "#/components/schemas/", "#/$defs/"), name)
	var s jsonschema.Schema
	if err := json.Unmarshal([]byte(root), &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

// notAPI are the route prefixes the documents leave out: the operator's
// console (/ui) is pages for people, not an API.
var notAPI = []string{"/ui"}

// registeredRoutes reads the patterns the package's files register on a
// ServeMux named mux (mux.Handle, mux.HandleFunc) and through osbRoutes'
// helper h (each at the root and under /v1). A registration it cannot
// read fails the test: register with string literals, or teach it.
func registeredRoutes(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var routes []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			var osbHelper bool
			switch fn := call.Fun.(type) {
			case *ast.SelectorExpr:
				x, ok := fn.X.(*ast.Ident)
				if !ok || x.Name != "mux" || fn.Sel.Name != "Handle" && fn.Sel.Name != "HandleFunc" {
					return true
				}
			case *ast.Ident:
				if fn.Name != "h" || file != "osb.go" {
					return true
				}
				osbHelper = true
			default:
				return true
			}
			where := fset.Position(call.Pos())
			patterns, ok := patternsOf(call.Args[0], osbHelper)
			if !ok {
				// osbRoutes' helper registers what its callers name.
				if bin, isBin := call.Args[0].(*ast.BinaryExpr); isBin && file == "osb.go" && strings.Contains(identNames(bin), "rest") {
					return true
				}
				t.Errorf("%s: cannot read the pattern of this registration: register with a string literal (or p + a literal in osbRoutes), or teach registeredRoutes", where)
				return true
			}
			routes = append(routes, patterns...)
			return true
		})
	}
	slices.Sort(routes)
	return slices.Compact(routes)
}

// identNames is the identifiers in e, space-separated.
func identNames(e ast.Expr) string {
	var names []string
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			names = append(names, id.Name)
		}
		return true
	})
	return strings.Join(names, " ")
}

// patternsOf reads a pattern argument: a string literal, or osbRoutes'
// loop prefix p plus one (in osbRoutes' helper, a literal stands for both).
func patternsOf(e ast.Expr, osbHelper bool) ([]string, bool) {
	prefixes := []string{""}
	if osbHelper {
		prefixes = []string{"", "/v1"}
	}
	if bin, ok := e.(*ast.BinaryExpr); ok && bin.Op == token.ADD {
		if id, ok := bin.X.(*ast.Ident); ok && id.Name == "p" {
			prefixes, e = []string{"", "/v1"}, bin.Y
		}
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return nil, false
	}
	pattern, err := strconv.Unquote(lit.Value)
	if err != nil {
		return nil, false
	}
	var out []string
	for _, p := range prefixes {
		method, path, found := strings.Cut(pattern, " ")
		if !found {
			method, path = "", pattern
		}
		out = append(out, strings.TrimSpace(method+" "+p+path))
	}
	return out, true
}

// probePath fills a documented path's parameters with sample values.
func probePath(path string) string {
	values := map[string]string{"port": "8080", "targetPort": "8080", "path": "probe/x", "file": "docs.js"}
	return pathParam.ReplaceAllStringFunc(path, func(m string) string {
		if v, ok := values[m[1:len(m)-1]]; ok {
			return v
		}
		return "doc-probe-" + m[1:len(m)-1]
	})
}

// isMuxRefusal reports whether an answer is the ServeMux's own 404 or 405
// (plain text), not a route's (JSON).
func isMuxRefusal(code int, ctype, body string) bool {
	return (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) && strings.HasPrefix(ctype, "text/plain") &&
		(strings.HasPrefix(body, "404 page not found") || strings.HasPrefix(body, "Method Not Allowed"))
}

// TestAPIDocsCoverRoutes checks that the documents and the routes cannot
// drift apart: every route the server's source registers is documented
// (an operation whose path the route's pattern matches, with its method;
// the OpenSandbox routes without /v1 by their /v1 operations), and every
// documented operation is answered by a route of s.Handler() (a request to
// it gets no ServeMux 404 or 405).
func TestAPIDocsCoverRoutes(t *testing.T) {
	s := docsServer(t)
	h := docsHandler(t, s)
	var ops []docOp
	for _, d := range apiDocuments {
		ops = append(ops, docOps(docJSON(t, h, d.name), d.name)...)
	}
	routes := registeredRoutes(t)
	for _, want := range []string{"GET /health", "POST /tools/{name}", "/mcp", "GET /metrics", "POST /v1/sandboxes", "GET /sandboxes/{id}", "/execd/{id}/{path...}", "GET /docs"} {
		if !slices.Contains(routes, want) {
			t.Fatalf("registeredRoutes found no %q in the source: it no longer reads the registrations (found %q)", want, routes)
		}
	}
	t.Logf("%d registered routes, %d documented operations", len(routes), len(ops))

	t.Run("routes are documented", func(t *testing.T) {
	routes:
		for _, route := range routes {
			method, path, ok := strings.Cut(route, " ")
			if !ok {
				method, path = "", route
			}
			for _, p := range notAPI {
				if path == p || strings.HasPrefix(path, p+"/") {
					continue routes
				}
			}
			mux := http.NewServeMux()
			mux.HandleFunc(route, func(http.ResponseWriter, *http.Request) {})
			for _, o := range ops {
				if method != "" && method != o.method {
					continue
				}
				paths := []string{o.path}
				if o.doc == "opensandbox" && strings.HasPrefix(o.path, "/v1/") {
					paths = append(paths, strings.TrimPrefix(o.path, "/v1"))
				}
				for _, p := range paths {
					if _, pattern := mux.Handler(httptest.NewRequest(o.method, probePath(p), nil)); pattern == route {
						continue routes
					}
				}
			}
			t.Errorf("route %q is in no API document: document it in openapi.go or openapi_osb.go", route)
		}
	})

	t.Run("documented operations are answered", func(t *testing.T) {
		for _, o := range ops {
			req := httptest.NewRequest(o.method, probePath(o.path), nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if isMuxRefusal(rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()) {
				t.Errorf("%s: %s %s (as %s): no route answers: %d %s", o.doc, o.method, o.path, req.URL.Path, rec.Code, strings.TrimSpace(rec.Body.String()))
			}
		}
	})
}

// execdRouteLiterals are the routes osbExecd.serve compares route with
// ("GET /ping", ...).
func execdRouteLiterals(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "osb_execd.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		bin, ok := n.(*ast.BinaryExpr)
		if !ok || bin.Op != token.EQL {
			return true
		}
		if id, ok := bin.X.(*ast.Ident); ok && id.Name == "route" {
			if lit, ok := bin.Y.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				out = append(out, v)
			}
		}
		return true
	})
	return out
}

// TestAPIDocsAnswersMatch checks real answers against the documents: the
// schemas of the answers the server writes as maps (a sandbox, a list, an
// endpoint, execd's file infos, ...) and of its types; and that execd
// answers each documented execd route (not its own "execd has no ..."),
// and each route execd's dispatch names is documented.
func TestAPIDocsAnswersMatch(t *testing.T) {
	s := docsServer(t)
	hs := httptest.NewServer(docsHandler(t, s))
	t.Cleanup(hs.Close)
	docs := map[string]map[string]any{}
	for _, d := range apiDocuments {
		docs[d.name] = docJSON(t, hs.Config.Handler, d.name)
	}
	call := func(method, path, key string, body any, hdr map[string]string) (int, http.Header, []byte) {
		t.Helper()
		var r io.Reader
		if body != nil {
			data, _ := json.Marshal(body)
			r = bytes.NewReader(data)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, hs.URL+path, r)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if resp.Header.Get("Content-Type") == "text/event-stream" {
			return resp.StatusCode, resp.Header, nil // a stream: its first answer is enough
		}
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, data
	}
	// check calls method path and validates its answer against schema of
	// document doc (a component name, or "" to only check the status).
	check := func(doc, schema string, wantCode int, method, path, key string, body any) map[string]any {
		t.Helper()
		code, _, data := call(method, path, key, body, nil)
		if code != wantCode {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, code, wantCode, data)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil && schema != "" {
			t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
		if schema != "" {
			rs, err := docSchema(t, docs[doc], schema)
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.Validate(v); err != nil {
				t.Errorf("%s %s: the answer does not match %s's %s: %v\n%s", method, path, doc, schema, err, data)
			}
		}
		m, _ := v.(map[string]any)
		return m
	}

	// addSchema adds a schema to document doc's components, to validate by.
	addSchema := func(doc, name string, schema any) {
		docs[doc]["components"].(map[string]any)["schemas"].(map[string]any)[name] = schema
	}
	// answerSchema adds the schema of an operation's answer as name.
	answerSchema := func(doc, name, method, path, code string) {
		op := docs[doc]["paths"].(map[string]any)[path].(map[string]any)[strings.ToLower(method)].(map[string]any)
		addSchema(doc, name, op["responses"].(map[string]any)[code].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"])
	}
	arrayOfRef := func(name string) any {
		return map[string]any{"type": "array", "items": map[string]any{"$ref": "#/components/schemas/" + name}}
	}

	// The tools API and the admin API.
	t.Run("tools", func(t *testing.T) {
		answerSchema("tools", "Health", "GET", "/health", "200")
		answerSchema("tools", "Status", "GET", "/sandbox/status", "200")
		answerSchema("tools", "Pools", "GET", "/pools", "200")
		addSchema("tools", "Tools", arrayOfRef("Tool"))
		check("tools", "Health", 200, "GET", "/health", "", nil)
		check("tools", "Status", 200, "GET", "/sandbox/status", docsAPIKey, nil)
		check("tools", "Pools", 200, "GET", "/pools", docsAPIKey, nil)
		check("tools", "Tools", 200, "GET", "/tools", docsAPIKey, nil)
		check("tools", "Error", 401, "GET", "/tools", "", nil)
		code, _, data := call("POST", "/tools/list_sandboxes", docsAPIKey, map[string]any{}, map[string]string{HeaderConversation: "docs-test"})
		var res any
		if err := json.Unmarshal(data, &res); err != nil || code != 200 {
			t.Fatalf("list_sandboxes: %d %s", code, data)
		}
		rs, err := docSchema(t, docs["tools"], "Result")
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Validate(res); err != nil {
			t.Errorf("list_sandboxes: %v: %s", err, data)
		}
		check("tools", "Error", 400, "POST", "/tools/list_sandboxes", docsAPIKey, map[string]any{})
	})
	t.Run("admin", func(t *testing.T) {
		answerSchema("admin", "Audit", "GET", "/admin/audit", "200")
		check("admin", "Audit", 200, "GET", "/admin/audit?limit=10", docsAdminKey, nil)
		check("admin", "Error", 401, "GET", "/admin/audit", docsAPIKey, nil)
		check("admin", "Error", 400, "GET", "/admin/audit?limit=0", docsAdminKey, nil)
	})

	// The OpenSandbox API, on a sandbox of the local backend.
	const o = "opensandbox"
	check(o, "ErrorResponse", 401, "GET", "/v1/sandboxes", "", nil)
	check(o, "ValidationError", 422, "POST", "/v1/sandboxes", docsAPIKey, map[string]any{})
	check(o, "ErrorResponse", 404, "GET", "/v1/sandboxes/nope", docsAPIKey, nil)
	sb := check(o, "Sandbox", 202, "POST", "/v1/sandboxes", docsAPIKey, map[string]any{"image": map[string]any{"uri": "ubuntu:24.04"},
		"entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 600, "metadata": map[string]string{"team": "docs"}})
	id, _ := sb["id"].(string)
	if id == "" {
		t.Fatal("no sandbox")
	}
	t.Cleanup(func() { call("DELETE", "/v1/sandboxes/"+id, docsAPIKey, nil, nil) })
	check(o, "Sandbox", 200, "GET", "/v1/sandboxes/"+id, docsAPIKey, nil)
	check(o, "ListSandboxesResponse", 200, "GET", "/v1/sandboxes?metadata=team%3Ddocs", docsAPIKey, nil)
	check(o, "Sandbox", 200, "PATCH", "/v1/sandboxes/"+id+"/metadata", docsAPIKey, map[string]any{"team": nil, "k": "v"})
	check(o, "Endpoint", 200, "GET", "/v1/sandboxes/"+id+"/endpoints/"+strconv.Itoa(s.opts.OSBExecdPort), docsAPIKey, nil)
	check(o, "Endpoint", 200, "GET", "/v1/sandboxes/"+id+"/endpoints/8080?use_server_proxy=true", docsAPIKey, nil)
	check(o, "RenewSandboxExpirationResponse", 200, "POST", "/v1/sandboxes/"+id+"/renew-expiration", docsAPIKey,
		map[string]string{"expiresAt": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})

	// execd, through the proxy.
	xp0 := "/v1/sandboxes/{id}/proxy/" + strconv.Itoa(s.opts.OSBExecdPort)
	xp := strings.Replace(xp0, "{id}", id, 1)
	check(o, "", 200, "GET", xp+"/ping", docsAPIKey, nil)
	addSchema(o, "FileInfos", arrayOfRef("FileInfo"))
	answerSchema(o, "FileInfoMap", "GET", xp0+"/files/info", "200")
	check(o, "", 200, "POST", xp+"/directories", docsAPIKey, map[string]any{"/tmp/docs-probe": map[string]any{"mode": 755}})
	check(o, "FileInfoMap", 200, "GET", xp+"/files/info?path=/tmp/docs-probe", docsAPIKey, nil)
	check(o, "FileInfos", 200, "GET", xp+"/directories/list?path=/tmp", docsAPIKey, nil)
	check(o, "Metrics", 200, "GET", xp+"/metrics", docsAPIKey, nil)
	check(o, "ExecdError", 404, "GET", xp+"/command/status/nope", docsAPIKey, nil)
	code, hdr, _ := call("POST", xp+"/command", docsAPIKey, map[string]any{"command": "true"}, nil)
	if code != 200 || hdr.Get("Content-Type") != "text/event-stream" {
		t.Errorf("POST /command: %d %s", code, hdr.Get("Content-Type"))
	}

	t.Run("execd routes", func(t *testing.T) {
		var documented []string
		for _, op := range docOps(docs[o], o) {
			rest, ok := strings.CutPrefix(op.path, xp0)
			// execd's proxy to other ports is not one of its routes
			// (and would reach out).
			if ok && !strings.HasPrefix(rest, "/proxy/") {
				documented = append(documented, op.method+" "+rest)
				// execd answers it: anything but its "no such route".
				path := strings.Replace(probePath(op.path), "doc-probe-id", id, 1)
				hdr := map[string]string{}
				if strings.Contains(op.path, "/ws/") {
					hdr = map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
				}
				code, _, data := call(op.method, path, docsAPIKey, nil, hdr)
				if code == http.StatusNotFound && strings.Contains(string(data), "execd has no") {
					t.Errorf("%s %s: execd does not serve it: %s", op.method, op.path, data)
				}
			}
		}
		for _, route := range execdRouteLiterals(t) {
			if !slices.Contains(documented, route) {
				t.Errorf("execd route %q (osb_execd.go) is not documented", route)
			}
		}
	})
}
