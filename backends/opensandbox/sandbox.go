package opensandbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Sandbox is one OpenSandbox sandbox. It is safe for concurrent use.
type Sandbox struct {
	backend.TerminalsEndWithClient

	b     *Backend
	id    string
	token string
	user  string // default user of Exec (Spec.User)
	ports []int  // Spec.Ports, the ports Endpoint answers for
	name  string // Spec.Name
	// egress: made with a policy, so with an egress sidecar (egress.go).
	egress bool

	// onState is called at each state change waitState sees, during
	// Create only (from Create's goroutine).
	onState func(sandboxStatus)

	mu      sync.Mutex
	workDir string // default working directory; "" until known
	tmpDir  string // scratch space for Exec; "" until probed
	conn    *execd
	users   map[string]credential
}

var (
	_ backend.Sandbox    = (*Sandbox)(nil)
	_ backend.FileSystem = (*Sandbox)(nil)
	_ backend.Endpointer = (*Sandbox)(nil)
	_ backend.Renewer    = (*Sandbox)(nil)
	_ backend.Pauser     = (*Sandbox)(nil)
)

func (b *Backend) newSandbox(id string, labels map[string]string) *Sandbox {
	s := &Sandbox{
		b:       b,
		id:      id,
		token:   b.execdToken(labels[labelTokenNonce]),
		user:    labels[labelUser],
		workDir: labels[labelWorkDir],
		name:    labels[backend.LabelName],
		egress:  labels[labelEgress] != "",
	}
	for p := range strings.SplitSeq(labels[labelPorts], ".") {
		if n, err := strconv.Atoi(p); err == nil {
			s.ports = append(s.ports, n)
		}
	}
	return s
}

func (s *Sandbox) ID() string { return s.id }

func (s *Sandbox) opErr(op string, err error) error {
	return backend.WrapOp(op, Name, s.id, err)
}

func (s *Sandbox) path(suffix string) string {
	return "/sandboxes/" + url.PathEscape(s.id) + suffix
}

// start waits until a sandbox just created is Running and its execd
// answers, then settles its working directory. progress, when set,
// receives the provisioning states the sandbox goes through.
func (s *Sandbox) start(ctx context.Context, created sandboxJSON, progress func(backend.Progress)) error {
	ctx, cancel := context.WithTimeout(ctx, s.b.cfg.readyTimeout())
	defer cancel()
	s.onState = func(st sandboxStatus) {
		if progress != nil {
			progress(backend.Progress{Sandbox: s.name, Step: "provision", Status: statusText(st), Done: st.State == stateRunning})
		}
	}
	defer func() { s.onState = nil }()
	s.onState(created.Status)
	if _, err := s.waitState(ctx, stateRunning, created.Status); err != nil {
		return err
	}
	if err := s.waitExecd(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	wd := s.workDir
	s.mu.Unlock()
	if wd != "" {
		x, err := s.execd(ctx)
		if err != nil {
			return err
		}
		err = x.json(ctx, http.MethodPost, "/directories", nil, map[string]permissionJSON{wd: {Mode: 755}}, nil)
		if err != nil {
			return fmt.Errorf("making the working directory %s: %w", wd, err)
		}
	}
	p, err := s.probe(ctx)
	if err != nil {
		return err
	}
	if wd == "" {
		// Record execd's own working directory, so that Info and List
		// report it without asking the sandbox.
		md, err := encodeLabels(map[string]string{labelWorkDir: p.workDir})
		if err == nil {
			err = s.b.c.lifecycle(ctx, http.MethodPatch, s.path("/metadata"), nil, md, nil)
		}
		if err != nil {
			s.b.log.Warn("cannot record the working directory in the sandbox's metadata; List will not report it", "sandbox", s.id, "err", err)
		}
	}
	return nil
}

// waitState polls the sandbox until it is in state want. Failed and
// Terminated end the wait with the server's reason and message; other
// states (Pending, transitions, states this package does not know) are
// waited out.
func (s *Sandbox) waitState(ctx context.Context, want string, last sandboxStatus) (sandboxJSON, error) {
	interval := 50 * time.Millisecond
	for {
		if last.State == want {
			return sandboxJSON{}, nil
		}
		switch last.State {
		case stateFailed, stateTerminated:
			return sandboxJSON{}, fmt.Errorf("sandbox %s: %s", s.id, statusText(last))
		}
		select {
		case <-ctx.Done():
			return sandboxJSON{}, fmt.Errorf("sandbox %s is still %s, not %s (%w; raise [sandbox.opensandbox] ready_timeout_sec if provisioning is slow)",
				s.id, statusText(last), want, ctx.Err())
		case <-time.After(interval):
		}
		interval = min(interval*2, time.Second)
		var sj sandboxJSON
		if err := s.b.c.lifecycle(ctx, http.MethodGet, s.path(""), nil, nil, &sj); err != nil {
			return sj, err
		}
		if s.onState != nil && sj.Status != last {
			s.onState(sj.Status)
		}
		if sj.Status.State == want {
			return sj, nil
		}
		last = sj.Status
	}
}

// waitExecd probes execd's /ping until it answers 200.
func (s *Sandbox) waitExecd(ctx context.Context) error {
	interval := 25 * time.Millisecond
	var lastErr error
	for {
		x, err := s.execd(ctx)
		if err == nil {
			req, rerr := x.request(ctx, http.MethodGet, "/ping", nil, nil)
			if rerr != nil {
				return rerr
			}
			var resp *http.Response
			if resp, err = x.do(req); err == nil {
				resp.Body.Close()
				return nil
			}
		}
		lastErr = err
		if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusUnauthorized {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("execd of sandbox %s did not answer /ping: %w (%w)", s.id, lastErr, ctx.Err())
		case <-time.After(interval):
		}
		interval = min(interval*2, 500*time.Millisecond)
	}
}

// execd returns the sandbox's execd address, asking the endpoints API once.
func (s *Sandbox) execd(ctx context.Context) (*execd, error) {
	s.mu.Lock()
	x := s.conn
	s.mu.Unlock()
	if x != nil {
		return x, nil
	}
	ep, err := s.endpoint(ctx, s.b.cfg.ExecdPort, s.b.cfg.UseServerProxy)
	if err != nil {
		return nil, err
	}
	x, err = s.b.c.newExecd(ep, s.b.cfg.UseServerProxy, s.token)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.conn = x
	s.mu.Unlock()
	return x, nil
}

func (s *Sandbox) endpoint(ctx context.Context, port int, proxied bool) (endpointJSON, error) {
	var ep endpointJSON
	q := url.Values{"use_server_proxy": {strconv.FormatBool(proxied)}}
	err := s.b.c.lifecycle(ctx, http.MethodGet, s.path("/endpoints/"+strconv.Itoa(port)), q, nil, &ep)
	if err != nil {
		return ep, err
	}
	if ep.Endpoint == "" {
		return ep, fmt.Errorf("%s returned no endpoint for port %d of sandbox %s", ServiceLifecycle, port, s.id)
	}
	return ep, nil
}

// gone reports whether err from talking to execd is explained by the
// sandbox no longer existing, and returns the error to report.
func (s *Sandbox) gone(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, backend.ErrNotFound) || ctx.Err() != nil {
		return err
	}
	if !errors.Is(err, backend.ErrUnavailable) && !errors.Is(err, errStreamEnded) {
		return err
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.b.cfg.requestTimeout())
	defer cancel()
	if _, ferr := s.b.fetch(cctx, s.id); errors.Is(ferr, backend.ErrNotFound) {
		return fmt.Errorf("%w: sandbox %s is gone (%v)", backend.ErrNotFound, s.id, err)
	}
	return err
}

// Info reports the sandbox's state and labels.
func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	sj, err := s.b.fetch(ctx, s.id)
	if err != nil {
		return backend.Info{}, s.opErr("info", err)
	}
	info := s.b.info(sj, decodeLabels(sj.Metadata))
	if info.WorkDir == "" && sj.Status.State == stateRunning {
		if p, err := s.probe(ctx); err == nil {
			info.WorkDir = p.workDir
		}
	}
	return info, nil
}

// Destroy deletes the sandbox and waits until the server no longer lists
// it. A sandbox that is already gone is not an error.
func (s *Sandbox) Destroy(ctx context.Context) error {
	err := s.b.c.lifecycle(ctx, http.MethodDelete, s.path(""), nil, nil, nil)
	switch {
	case errors.Is(err, backend.ErrNotFound):
		return nil
	case err != nil:
		// 409: already stopping; wait for it below like any other.
		if ae, ok := errors.AsType[*APIError](err); !ok || ae.Status != http.StatusConflict {
			return s.opErr("destroy", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	interval := 25 * time.Millisecond
	for {
		sj, err := s.b.fetch(ctx, s.id)
		if errors.Is(err, backend.ErrNotFound) {
			s.b.log.Debug("sandbox destroyed", "id", s.id)
			return nil
		}
		if err != nil {
			return s.opErr("destroy", err)
		}
		select {
		case <-ctx.Done():
			return s.opErr("destroy", fmt.Errorf("sandbox is still %s after the delete was accepted: %w", statusText(sj.Status), ctx.Err()))
		case <-time.After(interval):
		}
		interval = min(interval*2, time.Second)
	}
}

// Renew sets the sandbox to expire ttl from now, with the lifecycle API's
// renew-expiration. OpenSandbox only moves an expiry later, and a sandbox
// created without one (TTL 0) cannot get one: that is reported as an error
// wrapping errors.ErrUnsupported.
func (s *Sandbox) Renew(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if ttl <= 0 {
		return time.Time{}, s.opErr("renew", fmt.Errorf("%w: ttl must be positive, got %s", backend.ErrInvalidConfig, ttl))
	}
	exp := time.Now().UTC().Add(ttl).Truncate(time.Second)
	var resp renewResponse
	err := s.b.c.lifecycle(ctx, http.MethodPost, s.path("/renew-expiration"), nil, renewRequest{ExpiresAt: exp.Format(time.RFC3339)}, &resp)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusConflict {
		err = fmt.Errorf("%w: the sandbox has no expiry to renew (it was created without a TTL): %w", errors.ErrUnsupported, err)
	}
	if err != nil {
		return time.Time{}, s.opErr("renew", err)
	}
	if resp.ExpiresAt.IsZero() {
		return exp, nil
	}
	return resp.ExpiresAt.UTC(), nil
}

// Pause freezes the sandbox and waits until it is Paused.
func (s *Sandbox) Pause(ctx context.Context) error {
	return s.transition(ctx, "pause", "/pause", statePaused)
}

// Resume thaws the sandbox and waits until it is Running.
func (s *Sandbox) Resume(ctx context.Context) error {
	return s.transition(ctx, "resume", "/resume", stateRunning)
}

func (s *Sandbox) transition(ctx context.Context, op, suffix, want string) error {
	err := s.b.c.lifecycle(ctx, http.MethodPost, s.path(suffix), nil, nil, nil)
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusConflict {
		// Already there (or on the way): the wait below tells.
		err = nil
	}
	if err != nil {
		return s.opErr(op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.b.cfg.readyTimeout())
	defer cancel()
	sj, err := s.b.fetch(ctx, s.id)
	if err != nil {
		return s.opErr(op, err)
	}
	if _, err := s.waitState(ctx, want, sj.Status); err != nil {
		return s.opErr(op, err)
	}
	if want == stateRunning {
		// The sandbox may come back at another address.
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
	}
	return nil
}

// Endpoint returns host:port where a port published in Spec.Ports is
// reachable, from the endpoints API (always the direct endpoint: a proxied
// one is an HTTP route, see HTTPEndpoint). A port the Spec did not publish
// is an error wrapping backend.ErrNotFound; one the server publishes only
// as an HTTP route is a *RouteError naming its URL.
func (s *Sandbox) Endpoint(ctx context.Context, port int) (string, error) {
	if port < 1 || port > 65535 {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	if !slices.Contains(s.ports, port) {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d is not published (list it in the entry's ports)", backend.ErrNotFound, port))
	}
	ep, err := s.endpoint(ctx, port, false)
	if err != nil {
		return "", s.opErr("endpoint", err)
	}
	if strings.Contains(ep.Endpoint, "/") || len(ep.Headers) > 0 {
		x, err := s.b.c.newExecd(ep, false, "")
		if err != nil {
			return "", s.opErr("endpoint", err)
		}
		return "", s.opErr("endpoint", &RouteError{Port: port, URL: x.base.String(), HeaderNames: slices.Sorted(maps.Keys(ep.Headers))})
	}
	if _, _, err := net.SplitHostPort(ep.Endpoint); err != nil {
		return "", s.opErr("endpoint", fmt.Errorf("endpoint %q of port %d is not host:port", ep.Endpoint, port))
	}
	return ep.Endpoint, nil
}

// RouteError is Endpoint's answer for a port the server publishes only as
// an HTTP route (host:port/proxy/PORT, or an address whose requests need
// headers): it has no TCP address, but HTTP reaches it at URL (see
// HTTPEndpoint for the headers' values). It unwraps to
// errors.ErrUnsupported.
type RouteError struct {
	Port        int
	URL         string   // http://host:port/path
	HeaderNames []string // headers every request must carry
}

func (e *RouteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "port %d has no TCP address: the OpenSandbox server publishes it only as the HTTP route %s", e.Port, e.URL)
	if len(e.HeaderNames) > 0 {
		fmt.Fprintf(&b, " (every request needs the header %s)", strings.Join(e.HeaderNames, ", "))
	}
	b.WriteString("; reach it over HTTP at that URL (Sandbox.HTTPEndpoint gives the URL and headers)")
	return b.String()
}

func (e *RouteError) Unwrap() error { return errors.ErrUnsupported }

// HTTPEndpoint returns the URL at which an HTTP service on port is reached
// (through the server proxy when use_server_proxy is set) and the headers
// every request to it must carry. The API key is not among them: add it
// yourself for proxied URLs.
func (s *Sandbox) HTTPEndpoint(ctx context.Context, port int) (string, http.Header, error) {
	if port < 1 || port > 65535 {
		return "", nil, s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	ep, err := s.endpoint(ctx, port, s.b.cfg.UseServerProxy)
	if err != nil {
		return "", nil, s.opErr("endpoint", err)
	}
	x, err := s.b.c.newExecd(ep, s.b.cfg.UseServerProxy, "")
	if err != nil {
		return "", nil, s.opErr("endpoint", err)
	}
	h := x.headers.Clone()
	h.Del(headerAPIKey)
	return x.base.String(), h, nil
}
