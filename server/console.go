package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// The operator's console at /ui/: server-rendered pages (html/template,
// which escapes what agents chose: sandbox names, file names, command
// lines) and a little JavaScript for live updates (server-sent events
// carrying the re-rendered fragments) and the terminal (xterm.js,
// vendored under ui/vendor). Every asset is embedded; nothing comes from
// another origin.
//
// Authentication is the admin key: a login page takes it and sets a
// session cookie (HttpOnly, SameSite=Strict, Path=/ui/); a request may
// also send the key as "Authorization: Bearer KEY" (scripts). Every
// state-changing request of a cookie session carries the session's CSRF
// token (a form field, or the terminal WebSocket's query), compared in
// constant time, and its Origin, when sent, must be this server.

//go:embed ui
var uiFiles embed.FS

// consoleTemplates are parsed on the console's first page, not at every
// sbx process's start.
var consoleTemplates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"ago":      ago,
		"until":    until,
		"bytes":    humanBytes,
		"join":     strings.Join,
		"list":     func(v ...string) []string { return v },
		"pathJoin": path.Join,
		"percent":  func(n, total int64) int64 { return n * 100 / max(total, 1) },
	}).ParseFS(uiFiles, "ui/*.html"))
})

const (
	consoleCookie = "sbx_console"
	// consoleSessionTTL is how long a login lasts.
	consoleSessionTTL = 12 * time.Hour
	// maxConsoleSessions bounds the logins kept (the oldest goes).
	maxConsoleSessions = 64
	// consoleRefresh is how often the live pages are brought up to date.
	consoleRefresh = 2 * time.Second
	// maxDownload caps a file downloaded through the console.
	maxDownload = 256 << 20
)

// consoleSessions are the console's logins, by the SHA-256 of their
// cookie.
type consoleSessions struct {
	mu sync.Mutex
	m  map[[32]byte]*consoleSession
}

type consoleSession struct {
	csrf    string
	expires time.Time
}

func randomToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (cs *consoleSessions) add(now time.Time) (cookie string, sess *consoleSession) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.m == nil {
		cs.m = map[[32]byte]*consoleSession{}
	}
	for k, v := range cs.m {
		if now.After(v.expires) {
			delete(cs.m, k)
		}
	}
	if len(cs.m) >= maxConsoleSessions {
		var oldest [32]byte
		first := true
		for k, v := range cs.m {
			if first || v.expires.Before(cs.m[oldest].expires) {
				oldest, first = k, false
			}
		}
		delete(cs.m, oldest)
	}
	cookie = randomToken()
	sess = &consoleSession{csrf: randomToken(), expires: now.Add(consoleSessionTTL)}
	cs.m[sha256.Sum256([]byte(cookie))] = sess
	return cookie, sess
}

func (cs *consoleSessions) get(cookie string, now time.Time) *consoleSession {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	sess := cs.m[sha256.Sum256([]byte(cookie))]
	if sess == nil || now.After(sess.expires) {
		return nil
	}
	return sess
}

func (cs *consoleSessions) remove(cookie string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.m, sha256.Sum256([]byte(cookie)))
}

// consoleAuth is who a console request is: a cookie session (sess set)
// or a caller that sent the admin key.
type consoleAuth struct {
	sess   *consoleSession
	cookie string
}

// csrf is the token pages embed ("" for a bearer caller, who needs none).
func (a consoleAuth) csrf() string {
	if a.sess == nil {
		return ""
	}
	return a.sess.csrf
}

// adminKeyOK reports whether key is the admin key (constant time).
func (s *Server) adminKeyOK(key string) bool {
	if s.opts.AdminKey == "" || key == "" {
		return false
	}
	got, want := sha256.Sum256([]byte(key)), sha256.Sum256([]byte(s.opts.AdminKey))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// consoleWho authenticates r: the session cookie, or the admin key as a
// bearer token.
func (s *Server) consoleWho(r *http.Request) (consoleAuth, bool) {
	if c, err := r.Cookie(consoleCookie); err == nil {
		if sess := s.console.get(c.Value, time.Now()); sess != nil {
			return consoleAuth{sess: sess, cookie: c.Value}, true
		}
	}
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && s.adminKeyOK(strings.TrimSpace(token)) {
		return consoleAuth{}, true
	}
	return consoleAuth{}, false
}

// consolePage wraps a console page: without a login, a browser is sent
// to the login page and other callers get 401.
func (s *Server) consolePage(next func(http.ResponseWriter, *http.Request, consoleAuth)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setConsoleHeaders(w)
		if s.opts.AdminKey == "" {
			dropBody(w, r)
			s.consoleClosed(w)
			return
		}
		who, ok := s.consoleWho(r)
		if !ok {
			dropBody(w, r)
			if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxkit console"`)
			http.Error(w, "log in at /ui/login with the admin key (the API key does not open the console)", http.StatusUnauthorized)
			return
		}
		next(w, r, who)
	})
}

// consoleAction wraps a state-changing console request: its CSRF token
// and origin are checked, and it is audited.
func (s *Server) consoleAction(next func(http.ResponseWriter, *http.Request, consoleAuth)) http.Handler {
	return s.consolePage(func(w http.ResponseWriter, r *http.Request, who consoleAuth) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if !sameOrigin(r) {
			http.Error(w, "the request's Origin is not this server", http.StatusForbidden)
			return
		}
		if who.sess != nil && !tokenOK(r.FormValue("csrf"), who.sess.csrf) {
			http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
			return
		}
		s.auditCall(&AuditEntry{Kind: AuditAdmin, Conversation: "console"}, w, r, func(w http.ResponseWriter, r *http.Request) { next(w, r, who) })
	})
}

func tokenOK(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// setConsoleHeaders keeps the pages to this origin's own assets and out
// of frames.
func setConsoleHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin") // no-referrer would make a form's Origin "null"
	h.Set("Cache-Control", "no-store")
}

func (s *Server) consoleClosed(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "the console is closed: start the server with $%s (or [sandbox.serve] admin_key) set, and log in at /ui/login with that key\n", EnvAdminKey)
}

// consoleRoutes adds the console to mux.
func (s *Server) consoleRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusMovedPermanently) })
	mux.HandleFunc("GET /ui/login", s.serveLoginPage)
	mux.HandleFunc("POST /ui/login", s.serveLogin)
	mux.Handle("POST /ui/logout", s.consoleAction(s.serveLogout))
	mux.Handle("GET /ui/assets/", s.consoleAssets())
	mux.Handle("GET /ui/{$}", s.consolePage(s.serveOverview))
	mux.Handle("GET /ui/events", s.consolePage(s.serveConsoleEvents))
	mux.Handle("GET /ui/sandboxes/{id}", s.consolePage(s.serveSandboxPage))
	mux.Handle("GET /ui/sandboxes/{id}/download", s.consolePage(s.serveDownload))
	mux.Handle("GET /ui/sandboxes/{id}/terminal", s.consolePage(s.serveConsoleTerminal))
	mux.Handle("POST /ui/sandboxes/{id}/{action}", s.consoleAction(s.serveSandboxAction))
}

// consoleAssets serves ui/assets and ui/vendor (immutable within a
// build: the page links them with the build's version).
func (s *Server) consoleAssets() http.Handler {
	sub, _ := fs.Sub(uiFiles, "ui")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/ui/assets/")
		if !strings.HasPrefix(name, "app.") && !strings.HasPrefix(name, "vendor/") || strings.HasSuffix(name, "/") || strings.Contains(name, "..") {
			http.NotFound(w, r)
			return
		}
		if strings.HasPrefix(name, "app.") {
			name = "assets/" + name
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}

// page is what every page's template gets.
type page struct {
	Title   string
	CSRF    string
	Version string
	Body    any
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := consoleTemplates().ExecuteTemplate(&buf, name, data); err != nil {
		s.opts.Logger.Warn("console: rendering a page", "page", name, "err", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func (s *Server) serveLoginPage(w http.ResponseWriter, r *http.Request) {
	setConsoleHeaders(w)
	if s.opts.AdminKey == "" {
		s.consoleClosed(w)
		return
	}
	s.render(w, "login.html", page{Title: "Log in", Version: Implementation.Version, Body: map[string]string{"Next": safeNext(r.URL.Query().Get("next")), "Error": ""}})
}

// safeNext keeps a post-login redirect on the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}

func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	setConsoleHeaders(w)
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if s.opts.AdminKey == "" {
		dropBody(w, r)
		s.consoleClosed(w)
		return
	}
	if !sameOrigin(r) {
		http.Error(w, "the request's Origin is not this server", http.StatusForbidden)
		return
	}
	next := safeNext(r.FormValue("next"))
	if !s.adminKeyOK(r.FormValue("key")) {
		w.WriteHeader(http.StatusUnauthorized)
		s.render(w, "login.html", page{Title: "Log in", Version: Implementation.Version,
			Body: map[string]string{"Next": next, "Error": "That is not the admin key (the agents' API key does not open the console)."}})
		return
	}
	cookie, _ := s.console.add(time.Now())
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: cookie, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(consoleSessionTTL / time.Second)})
	s.audit.add(AuditEntry{Time: time.Now().UTC(), Kind: AuditAdmin, Conversation: "console", Route: r.Pattern, Status: http.StatusSeeOther})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) serveLogout(w http.ResponseWriter, r *http.Request, who consoleAuth) {
	if who.cookie != "" {
		s.console.remove(who.cookie)
	}
	http.SetCookie(w, &http.Cookie{Name: consoleCookie, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// consoleSandbox is one row of the sandboxes table.
type consoleSandbox struct {
	ID, Backend, Type, State, Isolation, Session, Owner string
	Created, Expires                                    time.Time
	Pooled                                              bool
	Known                                               bool // the server holds it (it can act on it)
}

type consoleSessionRow struct {
	ID      string
	Members []string
}

type consolePool struct {
	Entry   string
	Size    int
	Ready   int
	Making  int
	Claimed int64
	Cold    int64
	Failed  int64
	Buckets []ttfcBucket
}

// ttfcBucket is one bar of a pool's time to first command histogram.
type ttfcBucket struct {
	Le    string
	Count int64
	Total int64
}

type consoleHealth struct {
	Version, Backend, Instance, GoVersion, AuditFile string
	Uptime                                           time.Duration
	Sandboxes, Goroutines                            int
	ListError                                        string
}

// overview is the console's front page's data.
type overview struct {
	Sandboxes []consoleSandbox
	Sessions  []consoleSessionRow
	Pools     []consolePool
	Health    consoleHealth
}

func (s *Server) overview(ctx context.Context) overview {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	var ov overview
	infos, err := s.opts.Backend.List(ctx, statusFilter(s.opts.Instance))
	if err != nil {
		ov.Health.ListError = err.Error()
	}
	s.mu.Lock()
	sessions := map[string][]string{}
	defaultIsolation := s.opts.Backend.Capabilities().Isolation
	for _, i := range infos {
		row := consoleSandbox{ID: i.ID, Backend: i.Backend, Type: i.Labels[LabelType], State: string(i.State),
			Isolation: string(cmp.Or(i.Isolation, defaultIsolation)), Session: i.Session, Created: i.CreatedAt, Expires: i.ExpiresAt,
			Pooled: i.Labels[backend.LabelPoolState] != ""}
		if owner := i.Labels[LabelConversation]; owner != "" {
			row.Owner = "owner " + owner[:min(12, len(owner))]
		}
		if b := s.boxes[i.ID]; b != nil && !b.gone {
			row.Known = true
			row.Owner = cmp.Or(b.convName, row.Owner)
			row.Expires = s.info(b).ExpiresAt
		}
		ov.Sandboxes = append(ov.Sandboxes, row)
		if i.Session != "" {
			sessions[i.Session] = append(sessions[i.Session], i.ID)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(ov.Sandboxes, func(a, b consoleSandbox) int {
		return cmp.Or(b.Created.Compare(a.Created), strings.Compare(a.ID, b.ID))
	})
	for _, id := range slices.Sorted(maps.Keys(sessions)) {
		ov.Sessions = append(ov.Sessions, consoleSessionRow{ID: id, Members: sessions[id]})
	}
	for _, st := range s.PoolStats() {
		ov.Pools = append(ov.Pools, consolePool{Entry: st.Entry, Size: st.Size, Ready: st.Ready, Making: st.Making,
			Claimed: st.Claimed, Cold: st.ColdFallbacks, Failed: st.Failed, Buckets: s.ttfcBuckets(st.Entry)})
	}
	ov.Health = consoleHealth{Version: Implementation.Version, Backend: s.opts.Backend.Name(), Instance: s.opts.Instance,
		GoVersion: runtime.Version(), AuditFile: s.opts.AuditFile, Uptime: time.Since(s.started).Truncate(time.Second),
		Sandboxes: len(infos), Goroutines: runtime.NumGoroutine(), ListError: ov.Health.ListError}
	return ov
}

// ttfcBuckets is the pooled time to first command histogram of type typ.
func (s *Server) ttfcBuckets(typ string) []ttfcBucket {
	var m dto.Metric
	if err := s.metrics.createTime.WithLabelValues(typ, "pool").(interface{ Write(*dto.Metric) error }).Write(&m); err != nil || m.Histogram == nil {
		return nil
	}
	var out []ttfcBucket
	total := int64(m.Histogram.GetSampleCount())
	prev := int64(0)
	for _, b := range m.Histogram.Bucket {
		n := int64(b.GetCumulativeCount())
		out = append(out, ttfcBucket{Le: fmtSeconds(b.GetUpperBound()), Count: n - prev, Total: total})
		prev = n
	}
	return out
}

func fmtSeconds(sec float64) string {
	if sec < 1 {
		return strconv.FormatFloat(sec*1000, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(sec, 'f', -1, 64) + " s"
}

func (s *Server) serveOverview(w http.ResponseWriter, r *http.Request, who consoleAuth) {
	s.render(w, "overview.html", page{Title: "Sandboxes", CSRF: who.csrf(), Version: Implementation.Version, Body: s.overview(r.Context())})
}

// sandboxPage is the data of one sandbox's page.
type sandboxPage struct {
	Row       consoleSandbox
	Commands  []AuditEntry
	Dir       string
	Parent    string
	Files     []fs.FileInfo
	FilesErr  string
	Egress    *backend.EgressStatus
	EgressErr string
	Terminal  bool
	Usage     *sandboxUsage
}

// sandboxUsage is what a sandbox uses now, from its own cgroup (v2).
type sandboxUsage struct {
	MemoryBytes int64
	CPUSeconds  float64
}

// usageScript prints the memory the sandbox's cgroup holds, then "usec N"
// or "nsec N", the CPU time it used: inside a container /sys/fs/cgroup is
// its own cgroup, the v2 files, or the v1 memory and cpuacct hierarchies.
const usageScript = `if [ -r /sys/fs/cgroup/memory.current ]; then
	cat /sys/fs/cgroup/memory.current && echo usec $(sed -n 's/^usage_usec //p' /sys/fs/cgroup/cpu.stat)
else
	cat /sys/fs/cgroup/memory/memory.usage_in_bytes && echo nsec $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage)
fi`

// usage reads b's memory and CPU time where it has a cgroup of its own
// (not on a backend without isolation, whose /sys/fs/cgroup is the
// host's); nil when it cannot tell.
func (s *Server) usage(ctx context.Context, b *box) *sandboxUsage {
	if b.isolation == backend.IsolationNone || b.sb == nil {
		return nil
	}
	var sb backend.Sandbox = b.sb
	if b.agent != nil {
		sb = b.agent
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", usageScript}})
	if err != nil || res.ExitCode != 0 {
		return nil
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) != 3 {
		return nil
	}
	mem, err1 := strconv.ParseInt(f[0], 10, 64)
	cpu, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return nil
	}
	unit := map[string]float64{"usec": 1e6, "nsec": 1e9}[f[1]]
	if unit == 0 {
		return nil
	}
	return &sandboxUsage{MemoryBytes: mem, CPUSeconds: float64(cpu) / unit}
}

func (s *Server) sandboxPage(ctx context.Context, id, dir string) (sandboxPage, error) {
	var p sandboxPage
	ov := s.overview(ctx)
	i := slices.IndexFunc(ov.Sandboxes, func(r consoleSandbox) bool { return r.ID == id })
	if i < 0 {
		return p, errGone(id)
	}
	p.Row = ov.Sandboxes[i]
	p.Commands, _ = s.audit.read(auditFilter{sandbox: id, limit: 200})
	slices.Reverse(p.Commands) // newest first
	if !p.Row.Known {
		return p, nil
	}
	err := s.withAnyBox(ctx, id, func(ctx context.Context, b *box) error {
		p.Dir = dir
		if p.Dir == "" {
			p.Dir = cmp.Or(b.infoWorkDir(ctx), "/")
		}
		if p.Dir != "/" {
			p.Parent = path.Dir(strings.TrimSuffix(p.Dir, "/"))
		}
		files, err := sbfiles.ReadDir(ctx, b.files, p.Dir)
		if err != nil {
			p.FilesErr = err.Error()
		}
		slices.SortFunc(files, func(a, b fs.FileInfo) int {
			return cmp.Or(boolOrder(b.IsDir(), a.IsDir()), strings.Compare(a.Name(), b.Name()))
		})
		p.Files = files
		if ec, ok := backend.AsBackend[backend.EgressController](s.opts.Backend); ok {
			st, err := ec.EgressStatus(ctx, id)
			if err == nil {
				p.Egress = &st
			} else if !errors.Is(err, errors.ErrUnsupported) {
				p.EgressErr = err.Error()
			}
		}
		p.Usage = s.usage(ctx, b)
		_, p.Terminal = backend.As[backend.Terminaler](b.files)
		if b.agent != nil {
			p.Terminal = true
		}
		return nil
	})
	return p, err
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// infoWorkDir is the sandbox's working directory, where the file browser
// starts.
func (b *box) infoWorkDir(ctx context.Context) string {
	if b.sb == nil {
		return ""
	}
	info, err := b.sb.Info(ctx)
	if err != nil {
		return ""
	}
	return info.WorkDir
}

func (s *Server) serveSandboxPage(w http.ResponseWriter, r *http.Request, who consoleAuth) {
	id := r.PathValue("id")
	p, err := s.sandboxPage(r.Context(), id, r.URL.Query().Get("path"))
	if err != nil {
		code, msg := terminalHTTPError(err, id)
		http.Error(w, msg, code)
		return
	}
	s.render(w, "sandbox.html", page{Title: "Sandbox " + id, CSRF: who.csrf(), Version: Implementation.Version, Body: p})
}

// serveDownload sends a file of the sandbox as an attachment.
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request, _ consoleAuth) {
	id, name := r.PathValue("id"), r.URL.Query().Get("path")
	if name == "" {
		http.Error(w, "path is missing", http.StatusBadRequest)
		return
	}
	err := s.withAnyBox(r.Context(), id, func(ctx context.Context, b *box) error {
		rc, err := sbfiles.ReadFile(ctx, b.files, name)
		if err != nil {
			return err
		}
		defer rc.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", "attachment; filename*=UTF-8''"+url.PathEscape(path.Base(name)))
		w.Header().Set("Cache-Control", "no-store")
		_, err = io.Copy(w, io.LimitReader(rc, maxDownload))
		if err != nil {
			return nil // the answer started: nothing to tell
		}
		s.audit.add(AuditEntry{Time: time.Now().UTC(), Kind: AuditAdmin, Conversation: "console", Sandbox: id, Route: r.Pattern, Path: name, Status: http.StatusOK})
		return nil
	})
	if err != nil {
		code, msg := terminalHTTPError(err, id)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, backend.ErrNotFound) {
			code = http.StatusNotFound
		}
		http.Error(w, msg, code)
	}
}

// serveSandboxAction is POST /ui/sandboxes/{id}/{action}: delete, renew,
// pause or resume.
func (s *Server) serveSandboxAction(w http.ResponseWriter, r *http.Request, _ consoleAuth) {
	id, action := r.PathValue("id"), r.PathValue("action")
	back := "/ui/sandboxes/" + url.PathEscape(id)
	var err error
	switch action {
	case "delete":
		back = "/ui/"
		ctx, stop := s.callContext(r.Context())
		defer stop()
		var b *box
		if b, err = s.find(ctx, id, ""); err == nil {
			err = s.deleteBox(ctx, b, "console")
		}
	case "renew":
		err = s.withAnyBox(r.Context(), id, func(context.Context, *box) error { return nil }) // a call is activity
	case "pause", "resume":
		err = s.withAnyBox(r.Context(), id, func(ctx context.Context, b *box) error {
			p, ok := backend.As[backend.Pauser](b.sb)
			if !ok {
				return &statusError{http.StatusNotImplemented, fmt.Errorf("the %s backend cannot pause sandboxes", s.opts.Backend.Name())}
			}
			if action == "pause" {
				return p.Pause(ctx)
			}
			return p.Resume(ctx)
		})
	default:
		http.Error(w, fmt.Sprintf("unknown action %q (delete, renew, pause, resume)", action), http.StatusNotFound)
		return
	}
	if err != nil {
		code, msg := terminalHTTPError(err, id)
		http.Error(w, action+": "+msg, code)
		return
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// serveConsoleTerminal is the console's terminal WebSocket: the
// operator's, to any sandbox the server holds. A browser sends the
// session cookie (SameSite=Strict) and Origin; the CSRF token comes in
// the query.
func (s *Server) serveConsoleTerminal(w http.ResponseWriter, r *http.Request, who consoleAuth) {
	if !sameOrigin(r) {
		http.Error(w, "the request's Origin is not this server", http.StatusForbidden)
		return
	}
	if who.sess != nil && !tokenOK(r.URL.Query().Get("csrf"), who.sess.csrf) {
		http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
		return
	}
	id := r.PathValue("id")
	q := r.URL.Query()
	q.Del("csrf")
	r.URL.RawQuery = q.Encode()
	s.auditCall(&AuditEntry{Kind: AuditTerminal, Conversation: "console"}, w, r, func(w http.ResponseWriter, r *http.Request) {
		s.terminalSocket(w, r, id, func(ctx context.Context, fn func(context.Context, *box) error) error {
			return s.withAnyBox(ctx, id, fn)
		})
	})
}

// serveConsoleEvents streams the live parts of a page as server-sent
// events: every consoleRefresh, when they changed, one "update" event
// whose data is a JSON object of element ID to its new HTML (rendered
// by the templates, so escaped). ?sandbox=ID streams that sandbox's page.
func (s *Server) serveConsoleEvents(w http.ResponseWriter, r *http.Request, who consoleAuth) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	ctl := http.NewResponseController(w)
	ctl.Flush()
	id, dir := r.URL.Query().Get("sandbox"), r.URL.Query().Get("path")
	var last []byte
	t := time.NewTicker(consoleRefresh)
	defer t.Stop()
	for {
		parts := map[string]string{}
		frag := func(elem, tmpl string, data any) {
			var buf bytes.Buffer
			if err := consoleTemplates().ExecuteTemplate(&buf, tmpl, page{CSRF: who.csrf(), Body: data}); err == nil {
				parts[elem] = buf.String()
			}
		}
		if id == "" {
			ov := s.overview(r.Context())
			frag("sandboxes", "sandboxes", ov)
			frag("pools", "pools", ov)
			frag("sessions", "sessions", ov)
			frag("health", "health", ov)
		} else if p, err := s.sandboxPage(r.Context(), id, dir); err == nil {
			frag("info", "info", p)
			frag("commands", "commands", p)
			frag("egress", "egress", p)
		} else {
			parts["gone"] = "this sandbox is gone"
		}
		data, _ := json.Marshal(parts)
		if !bytes.Equal(data, last) {
			last = data
			if _, err := fmt.Fprintf(w, "event: update\ndata: %s\n\n", data); err != nil {
				return
			}
			ctl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.life.Done():
			return
		case <-t.C:
		}
	}
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return shortAge(time.Since(t)) + " ago"
}

func until(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Until(t)
	if d < 0 {
		return shortAge(-d) + " ago"
	}
	return "in " + shortAge(d)
}

func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h" + strconv.Itoa(int(d%time.Hour/time.Minute)) + "m"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + " " + string("KMGTPE"[exp]) + "iB"
}
