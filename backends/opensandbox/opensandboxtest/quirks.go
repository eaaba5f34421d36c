package opensandboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/server"
)

// The layer in front of sbx serve's OpenSandbox API: what it counts and
// records, and the real server's quirks (see the package doc).

const headerAPIKey = "OPEN-SANDBOX-API-KEY"

// routes names requests for Requests: the lifecycle routes, then execd's
// (with execd's own path), as "METHOD PATTERN".
var lifecycleRoutes, execdRoutes = func() (*http.ServeMux, *http.ServeMux) {
	life, execd := http.NewServeMux(), http.NewServeMux()
	for _, p := range []string{"", "/v1"} {
		for _, pat := range []string{"/sandboxes", "/sandboxes/{id}", "/sandboxes/{id}/metadata", "/sandboxes/{id}/pause",
			"/sandboxes/{id}/resume", "/sandboxes/{id}/renew-expiration", "/sandboxes/{id}/endpoints/{port}",
			"/sandboxes/{id}/proxy/{port}/{path...}", "/sandboxes/{id}/snapshots", "/snapshots", "/snapshots/{snapshotId}"} {
			life.Handle(p+pat, http.NotFoundHandler())
		}
	}
	for _, pat := range []string{"/ping", "/command", "/command/status/{id}", "/files", "/files/info", "/files/download",
		"/files/upload", "/files/mv", "/files/permissions", "/files/search", "/files/replace", "/directories",
		"/directories/list", "/session", "/session/{id}", "/session/{id}/run", "/ws/session/{id}", "/proxy/{port}/{path...}",
		"/metrics", "/metrics/watch"} {
		execd.Handle(pat, http.NotFoundHandler())
	}
	return life, execd
}()

func routeOf(mux *http.ServeMux, r *http.Request) string {
	_, pat := mux.Handler(r)
	if pat == "" {
		pat = r.URL.Path
	}
	return r.Method + " " + pat
}

// target is where a request to a sandbox goes: its port, and the path
// there.
type target struct {
	id     string
	port   int
	path   string
	direct bool // at the port's endpoint, not through the server proxy
}

// targetOf says which sandbox port r is for: the direct endpoints sbx
// serve hands out (/execd/ID/..., /port/ID/PORT/...) or the server proxy.
func (s *Server) targetOf(r *http.Request) (target, bool) {
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/execd/"); ok {
		id, sub, _ := strings.Cut(rest, "/")
		return target{id: id, port: s.opts.ExecdPort, path: "/" + sub, direct: true}, true
	}
	direct := strings.HasPrefix(p, "/port/")
	var rest string
	if direct {
		rest = strings.TrimPrefix(p, "/port/")
	} else if rest, _ = strings.CutPrefix(strings.TrimPrefix(p, "/v1"), "/sandboxes/"); rest == "" {
		return target{}, false
	}
	id, rest, _ := strings.Cut(rest, "/")
	if !direct {
		var ok bool
		if rest, ok = strings.CutPrefix(rest, "proxy/"); !ok {
			return target{}, false
		}
	}
	portText, sub, _ := strings.Cut(rest, "/")
	port, err := strconv.Atoi(portText)
	if err != nil {
		return target{}, false
	}
	return target{id: id, port: port, path: "/" + sub, direct: direct}, true
}

// withPath is r with another path (execd's own, for Intercept).
func withPath(r *http.Request, p string) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = p, ""
	r2.URL = &u
	return r2
}

func (s *Server) count(route string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[route]++
}

func (s *Server) violation(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
}

// keyOK reports whether r carries the API key: the quirks answer only
// requests the real server would have let in.
func (s *Server) keyOK(r *http.Request) bool {
	return s.opts.APIKey == "" || r.Header.Get(headerAPIKey) == s.opts.APIKey
}

func (s *Server) madeOf(id string) *made {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.made[id]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	t, toSandbox := s.targetOf(r)
	if !t.direct {
		s.count(routeOf(lifecycleRoutes, r))
	}
	seen := r
	execd := toSandbox && t.port == s.opts.ExecdPort
	if execd {
		seen = withPath(r, t.path)
		s.count("execd " + routeOf(execdRoutes, seen))
	}
	if s.opts.Intercept != nil && s.opts.Intercept(w, seen) {
		return
	}
	switch {
	case toSandbox && t.direct && r.Header.Get(headerAPIKey) != "":
		s.violation("%s %s reached sandbox %s with the API key", r.Method, r.URL.Path, t.id)
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "the OpenSandbox API key must not be sent to a sandbox"})
		return
	case toSandbox && t.direct && r.Header.Get(server.OSBHeaderRoute) == "":
		s.violation("%s %s reached sandbox %s without the endpoint's %s header", r.Method, r.URL.Path, t.id, server.OSBHeaderRoute)
	}
	switch {
	case execd && (t.direct || s.keyOK(r)):
		if s.execdUp(w, r, t) {
			if r.Method == http.MethodPost && t.path == "/command" {
				s.command(w, r)
			} else {
				s.inner.ServeHTTP(w, r)
			}
		}
	case toSandbox && t.port == EgressPort && (t.path == "/credential-vault" || strings.HasPrefix(t.path, "/credential-vault/")):
		if !t.direct && !s.keyOK(r) {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"code": "UNAUTHORIZED", "message": "no API key"})
			return
		}
		s.vault(w, r, t)
	case toSandbox:
		s.inner.ServeHTTP(w, r)
	default:
		s.lifecycle(w, r)
	}
}

// execdUp answers (and returns false) for execd when the real one would
// not answer yet: before it is ready, while its sandbox is paused, or
// for bash sessions where it has none.
func (s *Server) execdUp(w http.ResponseWriter, r *http.Request, t target) bool {
	if s.opts.NoTerminalSessions && (strings.HasPrefix(t.path, "/session") || strings.HasPrefix(t.path, "/ws/session/")) {
		http.NotFound(w, r)
		return false
	}
	if m := s.madeOf(t.id); m != nil && time.Since(m.at) < s.opts.PendingFor+s.opts.ReadyAfter {
		http.Error(w, "execd is starting", http.StatusServiceUnavailable)
		return false
	}
	// A paused sandbox's execd is frozen with it: the request waits.
	for s.set.isPaused(t.id) {
		select {
		case <-r.Context().Done():
			return false
		case <-s.closing:
			http.Error(w, "the sandbox is gone", http.StatusServiceUnavailable)
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// lifecycle serves the lifecycle API with the quirks of its routes.
func (s *Server) lifecycle(w http.ResponseWriter, r *http.Request) {
	segs := strings.Split(strings.Trim(strings.TrimPrefix(r.URL.Path, "/v1"), "/"), "/")
	if segs[0] != "sandboxes" || !s.keyOK(r) {
		s.inner.ServeHTTP(w, r)
		return
	}
	switch {
	case len(segs) == 1 && r.Method == http.MethodPost:
		s.create(w, r)
	case len(segs) == 1 && r.Method == http.MethodGet:
		s.list(w, r)
	case len(segs) == 2 && r.Method == http.MethodDelete:
		s.remove(w, r, segs[1])
	case len(segs) == 3 && segs[2] == "renew-expiration" && s.madeOf(segs[1]) != nil && s.madeOf(segs[1]).noTimeout:
		writeJSON(w, http.StatusConflict, map[string]string{"code": "DOCKER::INVALID_EXPIRATION",
			"message": fmt.Sprintf("Sandbox %s is missing expiration metadata and cannot be renewed safely.", segs[1])})
	case len(segs) == 4 && segs[2] == "endpoints" && s.opts.RoutedPorts:
		s.routedEndpoint(w, r, segs[3])
	case len(segs) == 2 && r.Method == http.MethodGet, len(segs) == 3 && segs[2] == "metadata":
		s.relay(w, r, s.status)
	default:
		s.inner.ServeHTTP(w, r)
	}
}

// relay serves r with the API, handing a JSON object it answers with
// success to edit first (nil: as it is).
func (s *Server) relay(w http.ResponseWriter, r *http.Request, edit func(map[string]any)) {
	s.write(w, s.record(r), edit)
}

// record serves r with the API, into a recorder.
func (s *Server) record(r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.inner.ServeHTTP(rec, r)
	return rec
}

// write answers with what rec recorded, a JSON object answered with
// success handed to edit first (nil: as it is).
func (s *Server) write(w http.ResponseWriter, rec *httptest.ResponseRecorder, edit func(map[string]any)) {
	body := rec.Body.Bytes()
	if edit != nil && rec.Code < 300 && strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&m) == nil {
			edit(m)
			body, _ = json.Marshal(m)
		}
	}
	maps.Copy(w.Header(), rec.Header())
	w.Header().Del("Content-Length")
	w.WriteHeader(rec.Code)
	w.Write(body)
}

// status shows sandbox m as the real server would: Pending for a while
// after its creation, and, Failed, with why.
func (s *Server) status(m map[string]any) {
	id, _ := m["id"].(string)
	st, _ := m["status"].(map[string]any)
	mk := s.madeOf(id)
	if st == nil || mk == nil {
		return
	}
	switch st["state"] {
	case "Running":
		if time.Since(mk.at) < s.opts.PendingFor {
			st["state"], st["reason"], st["message"] = "Pending", "provisioning", "Sandbox is being provisioned."
		}
	case "Failed":
		if code := s.set.exitStatus(id); code != "" {
			st["reason"], st["message"] = "container_exited", fmt.Sprintf("the entrypoint %q exited: exit status %s", mk.entrypoint, code)
		}
	}
}

// create records the request and what the quirks need of the sandbox.
// Its volumes are recorded, not mounted: the sandboxes are host folders.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, server.MaxJSONBodyBytes))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"code": "SANDBOX::INVALID_PARAMETER", "message": err.Error()})
		return
	}
	s.mu.Lock()
	s.creates = append(s.creates, json.RawMessage(body))
	s.mu.Unlock()
	var req map[string]json.RawMessage
	var sent struct {
		Entrypoint []string
		Timeout    *float64
	}
	if json.Unmarshal(body, &req) == nil && json.Unmarshal(body, &sent) == nil {
		delete(req, "volumes")
		body, _ = json.Marshal(req)
	}
	inner := r.Clone(r.Context())
	inner.Body, inner.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	var created struct{ ID string }
	rec := s.record(inner)
	if rec.Code == http.StatusAccepted && json.Unmarshal(rec.Body.Bytes(), &created) == nil {
		s.mu.Lock()
		s.made[created.ID] = &made{at: time.Now(), entrypoint: sent.Entrypoint, noTimeout: sent.Timeout == nil}
		s.mu.Unlock()
	}
	s.write(w, rec, s.status)
}

// list caps the page size, and fails as the Docker runtime does when a
// sandbox is removed while it lists them.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	if max := s.opts.MaxPageSize; max > 0 {
		q := r.URL.Query()
		n, err := strconv.Atoi(q.Get("pageSize"))
		if q.Get("pageSize") == "" {
			n, err = 20, nil
		}
		if err == nil && n > max {
			q.Set("pageSize", strconv.Itoa(max))
			r = r.Clone(r.Context())
			r.URL.RawQuery = q.Encode()
		}
	}
	rec := s.record(r)
	s.mu.Lock()
	racing := s.removals > 0
	s.mu.Unlock()
	if racing && rec.Code == http.StatusOK {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "DOCKER::SANDBOX_QUERY_FAILED",
			"message": `Failed to query sandboxes: 404 Client Error for http+docker://localhost/v1.47/containers/json: Not Found ("No such container")`})
		return
	}
	s.write(w, rec, func(m map[string]any) {
		items, _ := m["items"].([]any)
		for _, it := range items {
			if sb, ok := it.(map[string]any); ok {
				s.status(sb)
			}
		}
	})
}

// remove deletes a sandbox in RemovalTime more than it takes, during
// which listings fail (see list).
func (s *Server) remove(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	s.removals++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.removals--
		s.mu.Unlock()
	}()
	select {
	case <-time.After(s.opts.RemovalTime):
	case <-s.closing:
	}
	rec := s.record(r)
	if rec.Code == http.StatusNoContent {
		s.mu.Lock()
		delete(s.made, id)
		s.mu.Unlock()
	}
	s.write(w, rec, nil)
}

// routedEndpoint answers for a port other than execd's (and the egress
// API's) with execd's endpoint and its /proxy/{port} route.
func (s *Server) routedEndpoint(w http.ResponseWriter, r *http.Request, port string) {
	q := r.URL.Query().Get("use_server_proxy")
	n, err := strconv.Atoi(port)
	if q == "true" || q == "1" || err != nil || n == s.opts.ExecdPort || n == EgressPort {
		s.inner.ServeHTTP(w, r)
		return
	}
	execd := r.Clone(r.Context())
	execd.URL.Path = strings.TrimSuffix(r.URL.Path, port) + strconv.Itoa(s.opts.ExecdPort)
	execd.URL.RawPath = ""
	s.write(w, s.record(execd), func(m map[string]any) {
		m["endpoint"] = fmt.Sprint(m["endpoint"]) + "/proxy/" + port
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
