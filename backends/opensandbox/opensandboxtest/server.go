// Package opensandboxtest is an in-process OpenSandbox server for tests:
// the lifecycle API (sandbox-lifecycle.yml) and, for every sandbox, an
// execd (execd-api.yaml), implemented from the published specs and the wire
// facts in the project's specs/opensandbox/NOTES.md. It is NOT the real
// server and gives no isolation: a "sandbox" is a directory on this host
// and its commands are host processes (run with bash, in their own process
// group, in the sandbox's directory); its file API works on host paths.
//
// What it reproduces, because clients must cope with it:
//   - routes at the root and under /v1; the OPEN-SANDBOX-API-KEY header,
//     401 {"code":"MISSING_API_KEY"|"INVALID_API_KEY"};
//   - errors as {"code","message"}, request-body validation as FastAPI's
//     422 {"detail":[...]}, execd's 401 as {"error": ...};
//   - 202 on create; Pending for Options.PendingFor, then Running; an
//     entrypoint that exits makes the sandbox Failed with a reason;
//   - execd answers 503 until Options.ReadyAfter after Running;
//     X-EXECD-ACCESS-TOKEN enforced when the create request's env sets
//     EXECD_ACCESS_TOKEN; endpoint headers that every execd request must
//     carry; the API key refused (and recorded, see Violations) at execd;
//   - the server proxy (/sandboxes/{id}/proxy/{port}/...), which strips the
//     API key;
//   - the command stream: raw JSON events each followed by a blank line, no
//     "data:" prefix; output as lines without their line ends (as execd's
//     tailer sends them); exit 0 as execution_complete, any other exit only
//     as an error event with the exit code as evalue; execd's millisecond
//     timeout kills the bash process alone (not its process group), giving
//     evalue "-1" and traceback "signal: killed"; the stream held open for
//     a second after the last event; DELETE /command signals the process
//     group (SIGTERM, SIGKILL after 3 s);
//   - /files/info not following symlinks; uploads as metadata/file part
//     pairs whose metadata part must carry a filename; mode as octal digits
//     in a decimal number; ranged downloads;
//   - renew-expiration with 409 for a sandbox without expiry; pause and
//     resume through Pausing and Resuming (processes are stopped with
//     SIGSTOP; execd does not answer while paused); TTL expiry deletes;
//   - GET /sandboxes answering 500 DOCKER::SANDBOX_QUERY_FAILED ("No such
//     container") when a sandbox it lists is being removed meanwhile, as
//     the Docker runtime does when a container vanishes between its listing
//     and its inspection (Options.RemovalTime widens that window);
//   - a create request's networkPolicy starts an egress sidecar whose
//     policy API (GET, PATCH, DELETE /policy) is the endpoint of port
//     EgressPort, with an auth header; it enforces nothing;
//   - with Options.RoutedPorts, ports other than execd's published only
//     through execd's HTTP proxy route, the endpoint coming back as
//     host:port/proxy/PORT (execd's address), as a real deployment does
//     for ports it cannot map.
package opensandboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// APIKey is the key every lifecycle request must carry ("" accepts
	// any request).
	APIKey string
	// PendingFor is how long a new sandbox stays Pending (default 100 ms).
	PendingFor time.Duration
	// ReadyAfter is how long execd answers 503 after the sandbox is
	// Running (default 100 ms).
	ReadyAfter time.Duration
	// ExecdPort is the sandbox port execd "listens on" (default 44772).
	ExecdPort int
	// Root holds the sandboxes' directories (default: a new temporary
	// directory, removed by Close).
	Root string
	// MaxPageSize caps the page size of GET /sandboxes below the API's
	// 200, to exercise pagination.
	MaxPageSize int
	// Addr is the address to listen on (default 127.0.0.1 and a free
	// port). Keep it on loopback: commands run on this host.
	Addr string
	// RemovalTime is how long removing a sandbox takes beyond the work
	// itself: the window in which GET /sandboxes fails as the real server's
	// does when a container vanishes while it lists them.
	RemovalTime time.Duration
	// RoutedPorts publishes ports other than execd's only through
	// execd's /proxy/{port}/ route: the endpoints API answers
	// EXECD-HOST:PORT/proxy/{port} with execd's headers even in direct
	// mode. (This server does not require the execd access token on that
	// route.)
	RoutedPorts bool
	// Intercept, when set, sees every request first (the lifecycle
	// server's, and execd's with execd's own path) and answers it itself
	// by returning true: for failures no real server produces on cue,
	// such as a download failing just after a command timed out.
	Intercept func(w http.ResponseWriter, r *http.Request) bool
	// KeepCommandLogs writes each command's output to /tmp/<id>.stdout
	// and .stderr on this host and never removes them, as a real execd
	// does (by default they go to a private folder, removed at once).
	KeepCommandLogs bool
	// NoTerminalSessions answers as an execd before bash sessions and
	// their WebSocket (POST /session, GET /ws/session/{id}) do: 404.
	NoTerminalSessions bool
}

// Server is the in-process server. Use NewServer, then Close.
type Server struct {
	opts    Options
	srv     *httptest.Server
	root    string
	ownRoot bool

	mu         sync.Mutex
	sandboxes  map[string]*sandbox
	order      []string
	violations []string
	requests   map[string]int
	creates    []json.RawMessage

	// proxyTransport carries proxied requests to the sandboxes' execd.
	proxyTransport *http.Transport
}

// NewServer starts a server on a loopback port.
func NewServer(opts Options) (*Server, error) {
	if opts.PendingFor == 0 {
		opts.PendingFor = 100 * time.Millisecond
	}
	if opts.ReadyAfter == 0 {
		opts.ReadyAfter = 100 * time.Millisecond
	}
	if opts.ExecdPort == 0 {
		opts.ExecdPort = 44772
	}
	s := &Server{opts: opts, sandboxes: map[string]*sandbox{}, requests: map[string]int{}}
	s.proxyTransport = &http.Transport{}
	s.root = opts.Root
	if s.root == "" {
		dir, err := os.MkdirTemp("", "opensandboxtest-")
		if err != nil {
			return nil, err
		}
		s.root, s.ownRoot = dir, true
	}
	// Commands may run as other users: they must reach their sandbox.
	if err := os.Chmod(s.root, 0o755); err != nil {
		return nil, err
	}
	s.srv = httptest.NewUnstartedServer(s.routes())
	if opts.Addr != "" {
		l, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			if s.ownRoot {
				os.RemoveAll(s.root)
			}
			return nil, err
		}
		s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.Start()
	return s, nil
}

// Domain is the server's host:port, for Config.Domain.
func (s *Server) Domain() string { return strings.TrimPrefix(s.srv.URL, "http://") }

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Violations lists protocol breaches the server saw from clients: the API
// key sent to execd, a missing endpoint header.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// Requests returns how many requests each route ("GET /v1/sandboxes",
// "execd POST /command", ...) received.
func (s *Server) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.requests))
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

// CreateRequests returns the bodies of the create requests received, in
// order.
func (s *Server) CreateRequests() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

// SandboxIDs lists the sandboxes that exist.
func (s *Server) SandboxIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// SandboxDir returns the host directory of a sandbox ("" if unknown).
func (s *Server) SandboxDir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.dir
	}
	return ""
}

// Close removes every sandbox (killing its processes) and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	ids := slices.Clone(s.order)
	s.mu.Unlock()
	for _, id := range ids {
		s.remove(id, "server closed")
	}
	s.srv.Close()
	s.proxyTransport.CloseIdleConnections()
	if s.ownRoot {
		os.RemoveAll(s.root)
	}
}

func (s *Server) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

func (s *Server) count(route string) {
	s.mu.Lock()
	s.requests[route]++
	s.mu.Unlock()
}

const headerAPIKey = "OPEN-SANDBOX-API-KEY"

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
	})
	for _, p := range []string{"", "/v1"} {
		route := func(pattern string, h func(http.ResponseWriter, *http.Request)) {
			method, rest, _ := strings.Cut(pattern, " ")
			full := method + " " + p + rest
			mux.HandleFunc(full, func(w http.ResponseWriter, r *http.Request) {
				s.count(method + " " + p + rest)
				if s.opts.Intercept != nil && s.opts.Intercept(w, r) {
					return
				}
				if !s.authorized(w, r) {
					return
				}
				h(w, r)
			})
		}
		route("POST /sandboxes", s.create)
		route("GET /sandboxes", s.list)
		route("GET /sandboxes/{id}", s.get)
		route("DELETE /sandboxes/{id}", s.delete)
		route("PATCH /sandboxes/{id}/metadata", s.patchMetadata)
		route("POST /sandboxes/{id}/pause", s.pause)
		route("POST /sandboxes/{id}/resume", s.resume)
		route("POST /sandboxes/{id}/renew-expiration", s.renew)
		route("GET /sandboxes/{id}/endpoints/{port}", s.endpoint)
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			route(m+" /sandboxes/{id}/proxy/{port}/{path...}", s.proxy)
		}
	}
	return mux
}

func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if s.opts.APIKey == "" {
		return true
	}
	switch got := r.Header.Get(headerAPIKey); {
	case got == "":
		writeError(w, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Provide an API key via the OPEN-SANDBOX-API-KEY header.")
		return false
	case got != s.opts.APIKey:
		writeError(w, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.")
		return false
	}
	return true
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// writeError answers with the {"code","message"} shape.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]string{"code": code, "message": message})
}

// validationError is one entry of FastAPI's 422 "detail" list.
type validationError struct {
	Type  string `json:"type"`
	Loc   []any  `json:"loc"`
	Msg   string `json:"msg"`
	Input any    `json:"input,omitempty"`
}

// write422 answers as FastAPI does when the request body fails validation.
func write422(w http.ResponseWriter, errs ...validationError) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": errs})
}

func notFound(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "DOCKER::SANDBOX_NOT_FOUND", fmt.Sprintf("Sandbox %s not found.", id))
}

// lookup returns the sandbox named by the request's {id}, or answers 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("id")
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		notFound(w, id)
	}
	return sb
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	if sb := s.lookup(w, r); sb != nil {
		writeJSON(w, http.StatusOK, sb.json(true))
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	if sb := s.lookup(w, r); sb != nil {
		s.remove(sb.id, "user_delete")
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, pageSize := 1, 20
	var errs []validationError
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, validationError{Type: "greater_than_equal", Loc: []any{"query", "page"}, Msg: "Input should be greater than or equal to 1", Input: v})
		}
		page = n
	}
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 200 {
			errs = append(errs, validationError{Type: "less_than_equal", Loc: []any{"query", "pageSize"}, Msg: "Input should be between 1 and 200", Input: v})
		}
		pageSize = n
	}
	if len(errs) > 0 {
		write422(w, errs...)
		return
	}
	if s.opts.MaxPageSize > 0 {
		pageSize = min(pageSize, s.opts.MaxPageSize)
	}
	var want url.Values
	if md := q.Get("metadata"); md != "" {
		var err error
		if want, err = parseMetadataQuery(md); err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_METADATA_FORMAT", "Invalid metadata format: "+err.Error())
			return
		}
	}
	states := q["state"]
	s.mu.Lock()
	var items []map[string]any
	for _, id := range s.order {
		sb := s.sandboxes[id]
		if sb.removing {
			// The Docker runtime lists the containers, then inspects
			// each: one removed in between fails the whole listing.
			s.mu.Unlock()
			writeError(w, http.StatusInternalServerError, "DOCKER::SANDBOX_QUERY_FAILED",
				fmt.Sprintf(`Failed to query sandboxes: 404 Client Error for http+docker://localhost/v1.47/containers/%s/json: Not Found ("No such container: %s")`, id, id))
			return
		}
		if len(states) > 0 && !slices.Contains(states, sb.state) {
			continue
		}
		match := true
		for k, vs := range want {
			if got, ok := sb.metadata[k]; !ok || got != vs[len(vs)-1] {
				match = false
			}
		}
		if match {
			items = append(items, sb.jsonLocked(true))
		}
	}
	s.mu.Unlock()
	total := len(items)
	from := min((page-1)*pageSize, total)
	to := min(from+pageSize, total)
	pages := (total + pageSize - 1) / pageSize
	writeJSON(w, http.StatusOK, map[string]any{
		"items": append([]map[string]any{}, items[from:to]...),
		"pagination": map[string]any{
			"page": page, "pageSize": pageSize, "totalItems": total, "totalPages": pages, "hasNextPage": page < pages,
		},
	})
}

// parseMetadataQuery parses "k=v&k2=v2" strictly, as the server's
// parse_qsl(strict_parsing=True) does.
func parseMetadataQuery(s string) (url.Values, error) {
	for part := range strings.SplitSeq(s, "&") {
		if !strings.Contains(part, "=") {
			return nil, fmt.Errorf("bad query field: %q", part)
		}
	}
	return url.ParseQuery(s)
}

func (s *Server) endpoint(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		write422(w, validationError{Type: "int_parsing", Loc: []any{"path", "port"}, Msg: "Input should be a valid integer, unable to parse string as an integer", Input: r.PathValue("port")})
		return
	}
	if port < 1 || port > 65535 {
		writeError(w, http.StatusBadRequest, "SANDBOX::INVALID_PORT", "Port must be between 1 and 65535.")
		return
	}
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	proxy := r.URL.Query().Get("use_server_proxy")
	ep := map[string]any{}
	switch {
	case port == EgressPort && sb.egress != nil:
		ep = sb.egress.endpoint()
	case port == s.opts.ExecdPort:
		ep["endpoint"] = strings.TrimPrefix(sb.execd.URL, "http://")
		// As a gateway would: execd requests must carry this header.
		ep["headers"] = map[string]string{routeHeader: sb.id}
	case s.opts.RoutedPorts:
		ep["endpoint"] = strings.TrimPrefix(sb.execd.URL, "http://") + "/proxy/" + strconv.Itoa(port)
		ep["headers"] = map[string]string{routeHeader: sb.id}
	default:
		// The fake's sandboxes share the host's network.
		ep["endpoint"] = "127.0.0.1:" + strconv.Itoa(port)
	}
	if proxy == "true" || proxy == "1" {
		ep["endpoint"] = r.Host + "/sandboxes/" + sb.id + "/proxy/" + strconv.Itoa(port)
	}
	writeJSON(w, http.StatusOK, ep)
}

// proxy forwards a request to a sandbox's execd, as the server's proxy
// route does: without the API key and hop-by-hop headers, streaming the
// answer.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	port, _ := strconv.Atoi(r.PathValue("port"))
	targetURL := sb.execd.URL
	switch {
	case port == EgressPort && sb.egress != nil:
		targetURL = sb.egress.srv.URL
	case port != s.opts.ExecdPort:
		writeJSON(w, http.StatusBadGateway, map[string]string{"detail": fmt.Sprintf("Could not connect to the backend sandbox port %d", port)})
		return
	}
	// The body is read here rather than handed to the transport: the
	// transport reads and closes the server's request body from its own
	// goroutine while the handler runs, and under load that races with
	// the server's background read of the connection, which then cancels
	// an unrelated stream (seen as a cut-off command stream at the
	// client). The real server's proxy (httpx) does not share the issue.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "reading the request: " + err.Error()})
		return
	}
	target, _ := url.Parse(targetURL)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path = "/" + r.PathValue("path")
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
			pr.Out.Header.Del(headerAPIKey)
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
			pr.Out.GetBody = nil
			if len(body) == 0 {
				pr.Out.Body = nil
			}
		},
		FlushInterval: -1,
		Transport:     s.proxyTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, map[string]string{"detail": "Could not connect to the backend sandbox: " + err.Error()})
		},
	}
	rp.ServeHTTP(w, r)
}
