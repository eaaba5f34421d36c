package opensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Header names of the two APIs.
const (
	headerAPIKey      = "OPEN-SANDBOX-API-KEY"
	headerExecdToken  = "X-EXECD-ACCESS-TOKEN"
	maxErrorBodyBytes = 64 << 10
)

// Services an APIError comes from.
const (
	ServiceLifecycle = "lifecycle server"
	ServiceExecd     = "execd"
	ServiceEgress    = "egress sidecar"
)

// APIError is an error answer of the OpenSandbox lifecycle server or of a
// sandbox's execd. It unwraps to the contract's sentinel for its status:
// 404 to backend.ErrNotFound, 400/401/403/422 to backend.ErrInvalidConfig,
// 405/501 to errors.ErrUnsupported, 502/503/504 to backend.ErrUnavailable.
// Its text never holds the API key or the execd access token.
type APIError struct {
	Service string // ServiceLifecycle or ServiceExecd
	Method  string
	Path    string // request path, without query
	Status  int
	// Code is the server's error code ("DOCKER::SANDBOX_NOT_FOUND",
	// "FILE_NOT_FOUND", ...), empty when the body had none.
	Code string
	// Message is the server's message; for FastAPI's 422 answers, the
	// validation errors joined.
	Message string
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %s: %d %s", e.Service, e.Method, e.Path, e.Status, http.StatusText(e.Status))
	if e.Code != "" {
		b.WriteString(": ")
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		if e.Service == ServiceLifecycle {
			b.WriteString(" (check [sandbox.opensandbox] api_key or " + EnvAPIKey + ")")
		}
	}
	return b.String()
}

func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusNotFound:
		return backend.ErrNotFound
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusUnprocessableEntity:
		return backend.ErrInvalidConfig
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return errors.ErrUnsupported
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return backend.ErrUnavailable
	}
	return nil
}

// apiErrorFrom reads an error answer. It understands the three shapes the
// APIs use: {"code","message"}, FastAPI's {"detail": ...} (a string, an
// object with code and message, or a list of validation errors) and execd's
// 401 {"error": "..."}; anything else is kept as text.
func apiErrorFrom(service string, resp *http.Response, redact func(string) string) *APIError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBodyBytes))
	e := &APIError{Service: service, Method: resp.Request.Method, Path: resp.Request.URL.Path, Status: resp.StatusCode}
	e.Code, e.Message = parseErrorBody(body)
	e.Code, e.Message = redact(e.Code), redact(e.Message)
	return e
}

func parseErrorBody(body []byte) (code, message string) {
	var shape struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
		Detail  json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal(body, &shape); err != nil {
		return "", strings.TrimSpace(string(body))
	}
	if shape.Code != "" || shape.Message != "" {
		return shape.Code, shape.Message
	}
	if len(shape.Error) > 0 {
		var s string
		if json.Unmarshal(shape.Error, &s) == nil {
			return "", s
		}
		return "", string(shape.Error)
	}
	if len(shape.Detail) > 0 {
		return parseDetail(shape.Detail)
	}
	return "", strings.TrimSpace(string(body))
}

// parseDetail reads FastAPI's "detail": a string (HTTPException), an object
// (HTTPException with a dict) or a list of validation errors (422).
func parseDetail(raw json.RawMessage) (code, message string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return "", s
	}
	var obj struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && (obj.Code != "" || obj.Message != "") {
		return obj.Code, obj.Message
	}
	var list []struct {
		Loc  []any  `json:"loc"`
		Msg  string `json:"msg"`
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		parts := make([]string, 0, len(list))
		for _, d := range list {
			loc := make([]string, 0, len(d.Loc))
			for _, l := range d.Loc {
				loc = append(loc, fmt.Sprint(l))
			}
			if len(loc) > 0 {
				parts = append(parts, strings.Join(loc, ".")+": "+d.Msg)
			} else {
				parts = append(parts, d.Msg)
			}
		}
		return "VALIDATION_ERROR", strings.Join(parts, "; ")
	}
	return "", string(raw)
}

// client speaks HTTP to the lifecycle server and to execd.
type client struct {
	http    *http.Client
	cfg     Config
	base    *url.URL // protocol://domain/v1
	secrets []string // never shown in errors
}

func newClient(cfg Config, hc *http.Client) (*client, error) {
	base, err := url.Parse(cfg.baseURL() + "/v1")
	if err != nil {
		return nil, fmt.Errorf("%w: [sandbox.opensandbox] domain %q: %v", backend.ErrInvalidConfig, cfg.Domain, err)
	}
	c := &client{http: hc, cfg: cfg, base: base}
	if cfg.APIKey != "" {
		c.secrets = append(c.secrets, cfg.APIKey)
	}
	return c, nil
}

// redact removes secrets from text that may reach an error or a log.
func (c *client) redact(s string) string {
	for _, secret := range c.secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, redacted)
		}
	}
	return s
}

// transportError translates a failure to get any answer.
func (c *client) transportError(service, where string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := c.redact(err.Error())
	if isConnectionFailure(err) {
		if service == ServiceLifecycle {
			return fmt.Errorf("%w: cannot reach the OpenSandbox server at %s: %s (is it running? check [sandbox.opensandbox] domain or %s)",
				backend.ErrUnavailable, where, msg, EnvDomain)
		}
		return fmt.Errorf("%w: cannot reach execd at %s: %s (the sandbox may be gone or its network unreachable from here; try use_server_proxy = true)",
			backend.ErrUnavailable, where, msg)
	}
	return fmt.Errorf("%s at %s: %s", service, where, msg)
}

func isConnectionFailure(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return true
	}
	return false
}

// lifecycle sends one JSON request to the lifecycle server and decodes a
// 2xx answer into out (when not nil). in, when not nil, is sent as JSON.
func (c *client) lifecycle(ctx context.Context, method, path string, query url.Values, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.requestTimeout())
	defer cancel()
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.APIKey != "" {
		req.Header.Set(headerAPIKey, c.cfg.APIKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(ServiceLifecycle, c.cfg.baseURL(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return apiErrorFrom(ServiceLifecycle, resp, c.redact)
	}
	defer drain(resp.Body)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: %s %s: reading the answer: %w", ServiceLifecycle, method, u.Path, err)
	}
	return nil
}

// drain reads what is left of a (small) answer, so that closing it keeps
// the connection for the next request instead of dropping it.
func drain(body io.Reader) {
	io.Copy(io.Discard, io.LimitReader(body, maxErrorBodyBytes))
}

// execd is the address of one sandbox's execd and what every request to it
// carries.
type execd struct {
	c       *client
	service string   // ServiceExecd, or ServiceEgress for the egress sidecar
	base    *url.URL // scheme://host:port[/proxy path]
	headers http.Header
	where   string // for errors: the URL without credentials
	token   string
}

// redact removes the API key and the access token from text.
func (x *execd) redact(s string) string {
	if x.token != "" {
		s = strings.ReplaceAll(s, x.token, redacted)
	}
	return x.c.redact(s)
}

func (c *client) newExecd(ep endpointJSON, proxied bool, token string) (*execd, error) {
	raw := ep.Endpoint
	if !strings.Contains(raw, "://") {
		// The lifecycle API returns endpoints without a scheme. Through
		// the proxy the endpoint is the server itself.
		scheme := "http"
		if proxied {
			scheme = c.cfg.Protocol
		}
		raw = scheme + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("%s returned an unusable execd endpoint %q", ServiceLifecycle, ep.Endpoint)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	h := http.Header{}
	for k, v := range ep.Headers {
		h.Set(k, v)
	}
	if token != "" {
		h.Set(headerExecdToken, token)
	}
	if proxied && c.cfg.APIKey != "" {
		// The server strips it before forwarding to the sandbox.
		h.Set(headerAPIKey, c.cfg.APIKey)
	} else {
		// Never hand the API key to a sandbox directly, whatever the
		// endpoint headers say.
		h.Del(headerAPIKey)
	}
	x := &execd{c: c, service: ServiceExecd, base: u, headers: h, where: u.Scheme + "://" + u.Host + u.Path, token: token}
	return x, nil
}

func (x *execd) url(path string, query url.Values) string {
	u := *x.base
	u.Path = x.base.Path + path
	u.RawQuery = query.Encode()
	return u.String()
}

// request builds a request to execd with its headers.
func (x *execd) request(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, x.url(path, query), body)
	if err != nil {
		return nil, err
	}
	for k, v := range x.headers {
		req.Header[k] = v
	}
	return req, nil
}

// do sends req and returns a 2xx answer (or one of okStatus); other answers
// become an *APIError.
func (x *execd) do(req *http.Request, okStatus ...int) (*http.Response, error) {
	resp, err := x.c.http.Do(req)
	if err != nil {
		return nil, x.c.transportError(x.service, x.where, err)
	}
	if (resp.StatusCode >= 200 && resp.StatusCode <= 299) || containsInt(okStatus, resp.StatusCode) {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, apiErrorFrom(x.service, resp, x.redact)
}

// json sends a request with an optional JSON body and decodes a JSON answer
// into out (when not nil), within the request timeout.
func (x *execd) json(ctx context.Context, method, path string, query url.Values, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, x.c.cfg.requestTimeout())
	defer cancel()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := x.request(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := x.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	defer drain(resp.Body)
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s: %s %s: reading the answer: %w", x.service, method, path, err)
	}
	return nil
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}
