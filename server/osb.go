package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// OpenSandbox's lifecycle API (sandbox-lifecycle.yml), served over the
// server's sandboxes so that OpenSandbox's SDKs work against any backend:
//
//	POST   /v1/sandboxes                          create: 202 and the sandbox
//	GET    /v1/sandboxes?state=&metadata=&page=&pageSize=
//	GET    /v1/sandboxes/{id}
//	DELETE /v1/sandboxes/{id}                     204
//	POST   /v1/sandboxes/{id}/pause|resume        202 (backends that pause)
//	POST   /v1/sandboxes/{id}/renew-expiration    {"expiresAt"}
//	GET    /v1/sandboxes/{id}/endpoints/{port}?use_server_proxy=
//	POST   /v1/sandboxes/{id}/snapshots, GET|DELETE /v1/snapshots[/{id}]
//	                                              (osb_snapshots.go)
//	ANY    /sandboxes/{id}/proxy/{port}/{path...} execd (port 44772), the egress
//	                                              sidecar's API (18080) and, where
//	                                              the backend publishes it, any port
//	ANY    /execd/{id}/{path...}                  execd "directly": the endpoint
//	                                              the endpoints API hands out, with
//	                                              a per-sandbox route header
//	ANY    /port/{id}/{port}/{path...}            any other port "directly" where
//	                                              the backend does not publish it,
//	                                              with a per-port route header
//
// Routes answer at the root and under /v1, as the real server's do. They
// take the API key in OPEN-SANDBOX-API-KEY (or as the rest of the server
// does) and answer errors as {"code","message"}. The sandboxes belong to
// one conversation, "opensandbox" (X-Conversation-Id, when sent, names
// another), so the MCP tools of that conversation see them too.

// Headers and names of the OpenSandbox API.
const (
	osbHeaderAPIKey = "OPEN-SANDBOX-API-KEY"
	// OSBHeaderRoute carries the per-sandbox secret of the direct execd
	// endpoint, and the per-port one of a port's (the API key never goes
	// there).
	OSBHeaderRoute = "X-Sandboxkit-Execd-Route"
	osbHeaderToken = "X-EXECD-ACCESS-TOKEN"
	osbEnvToken    = "EXECD_ACCESS_TOKEN"
	// OSBExecdPort is the port execd has in an OpenSandbox sandbox; the
	// endpoints API answers for it (or for Options.OSBExecdPort) with this
	// server's execd.
	OSBExecdPort = 44772
	// osbConversation owns the sandboxes made through the API.
	osbConversation = "opensandbox"
)

// Labels of sandboxes made through the OpenSandbox API.
const (
	// LabelOSBMetadata prefixes the sandbox's metadata keys.
	LabelOSBMetadata = "sandboxkit.osb.meta."
	// LabelOSBEntrypoint is the entrypoint as JSON; LabelOSBImage the image.
	LabelOSBEntrypoint = "sandboxkit.osb.entrypoint"
	LabelOSBImage      = "sandboxkit.osb.image"
	// LabelOSBToken is the SHA-256 of the execd access token the sandbox
	// was created with (EXECD_ACCESS_TOKEN in its env).
	LabelOSBToken = "sandboxkit.osb.execd-token"
	// LabelOSBNoTimeout marks a sandbox created without a timeout: the API
	// shows no expiry, and only the server's hard limit (MaxLifetime)
	// removes it.
	LabelOSBNoTimeout = "sandboxkit.osb.no-timeout"
)

// osbError answers with OpenSandbox's error shape.
func osbError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, map[string]string{"code": code, "message": fmt.Sprintf(format, args...)})
}

// osbConv is the conversation an OpenSandbox API request acts for.
func osbConv(r *http.Request) (string, error) {
	conv, err := ConversationFromHeader(r.Header)
	if err != nil || conv != "" {
		return conv, err
	}
	return osbConversation, nil
}

// osbRoutes adds the OpenSandbox API to mux.
func (s *Server) osbRoutes(mux *http.ServeMux) {
	for _, p := range []string{"", "/v1"} {
		// limit bounds the route's body, held in memory (BodyBudget).
		h := func(pattern string, limit int64, fn func(http.ResponseWriter, *http.Request, string)) {
			method, rest, _ := strings.Cut(pattern, " ")
			mux.Handle(method+" "+p+rest, s.osbAuth(func(w http.ResponseWriter, r *http.Request, conv string) {
				call := func(w http.ResponseWriter, r *http.Request) {
					release, ok := s.admitBody(w, r, limit, osbFail)
					if !ok {
						return
					}
					defer release()
					fn(w, r, conv)
				}
				if method == http.MethodGet {
					call(w, r)
					return
				}
				// What changes something is audited, once authenticated
				// (a refused key is only counted, in the metrics).
				s.auditCall(&AuditEntry{Kind: AuditOpenSandbox, Conversation: conv}, w, r, call)
			}))
		}
		h("POST /sandboxes", MaxJSONBodyBytes, s.osbCreate)
		h("GET /sandboxes", maxSmallBody, s.osbList)
		h("GET /sandboxes/{id}", maxSmallBody, s.osbGet)
		h("DELETE /sandboxes/{id}", maxSmallBody, s.osbDelete)
		h("PATCH /sandboxes/{id}/metadata", maxSmallBody, s.osbPatchMetadata)
		h("POST /sandboxes/{id}/pause", maxSmallBody, s.osbPause)
		h("POST /sandboxes/{id}/resume", maxSmallBody, s.osbPause)
		h("POST /sandboxes/{id}/renew-expiration", maxSmallBody, s.osbRenew)
		h("GET /sandboxes/{id}/endpoints/{port}", maxSmallBody, s.osbEndpoint)
		h("POST /sandboxes/{id}/snapshots", maxSmallBody, s.osbCreateSnapshot)
		h("GET /snapshots", maxSmallBody, s.osbListSnapshots)
		h("GET /snapshots/{snapshotId}", maxSmallBody, s.osbGetSnapshot)
		h("DELETE /snapshots/{snapshotId}", maxSmallBody, s.osbDeleteSnapshot)
		// The proxy streams bodies on (execd's are admitted by osbExecd).
		mux.Handle(p+"/sandboxes/{id}/proxy/{port}/{path...}", s.osbAuth(s.osbProxy))
	}
	mux.HandleFunc("/execd/{id}/{path...}", s.osbDirectExecd)
	mux.HandleFunc("/port/{id}/{port}/{path...}", s.osbDirectPort)
}

// osbFail answers an error of the API's limits in OpenSandbox's shape.
func osbFail(w http.ResponseWriter, code int, msg string) {
	osbError(w, code, "REQUEST_REJECTED", "%s", msg)
}

// osbAuth checks the API key and the conversation header.
func (s *Server) osbAuth(next func(http.ResponseWriter, *http.Request, string)) http.Handler {
	want := sha256.Sum256([]byte(s.opts.APIKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.APIKey != "" {
			key := r.Header.Get(osbHeaderAPIKey)
			if key == "" {
				key = r.Header.Get("X-API-Key")
			}
			if h := r.Header.Get("Authorization"); key == "" && h != "" {
				if scheme, token, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
					key = strings.TrimSpace(token)
				}
			}
			got := sha256.Sum256([]byte(key))
			if key == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				dropBody(w, r)
			}
			switch {
			case key == "":
				osbError(w, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Provide an API key via the %s header.", osbHeaderAPIKey)
				return
			case subtle.ConstantTimeCompare(got[:], want[:]) != 1:
				osbError(w, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.")
				return
			}
		}
		conv, err := osbConv(r)
		if err != nil {
			dropBody(w, r)
			osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "%v", err)
			return
		}
		next(w, r, conv)
	})
}

// osbCreateRequest is the create body (CreateSandboxRequest).
type osbCreateRequest struct {
	Image *struct {
		URI  string          `json:"uri"`
		Auth json.RawMessage `json:"auth"`
	} `json:"image"`
	SnapshotID      string            `json:"snapshotId"`
	Entrypoint      []string          `json:"entrypoint"`
	Timeout         *float64          `json:"timeout"`
	ResourceLimits  map[string]string `json:"resourceLimits"`
	Env             map[string]string `json:"env"`
	Metadata        map[string]string `json:"metadata"`
	Extensions      map[string]string `json:"extensions"`
	NetworkPolicy   json.RawMessage   `json:"networkPolicy"`
	Volumes         json.RawMessage   `json:"volumes"`
	Platform        json.RawMessage   `json:"platform"`
	CredentialProxy json.RawMessage   `json:"credentialProxy"`
	SecureAccess    bool              `json:"secureAccess"`
}

// osbValidation answers FastAPI's 422 for a body that does not match the
// schema.
func osbValidation(w http.ResponseWriter, loc []any, msg string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{{"type": "value_error", "loc": loc, "msg": msg}}})
}

// present reports whether a JSON value was sent and is not null or empty.
func present(raw json.RawMessage) bool {
	v := strings.TrimSpace(string(raw))
	return v != "" && v != "null" && v != "{}" && v != "[]"
}

func (s *Server) osbCreate(w http.ResponseWriter, r *http.Request, conv string) {
	var req osbCreateRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxJSONBodyBytes)).Decode(&req); err != nil {
		osbValidation(w, []any{"body"}, "JSON decode error: "+err.Error())
		return
	}
	hasImage := req.Image != nil && req.Image.URI != ""
	switch {
	case hasImage && req.SnapshotID != "":
		osbValidation(w, []any{"body"}, "give exactly one of image and snapshotId")
		return
	case !hasImage && req.SnapshotID == "":
		osbValidation(w, []any{"body", "image"}, "image.uri is required")
		return
	case len(req.Entrypoint) == 0 || req.Entrypoint[0] == "":
		osbValidation(w, []any{"body", "entrypoint"}, "entrypoint is required with image (e.g. [\"tail\",\"-f\",\"/dev/null\"])")
		return
	case req.Timeout != nil && (*req.Timeout < 60 || *req.Timeout != math.Trunc(*req.Timeout)):
		osbValidation(w, []any{"body", "timeout"}, "Input should be an integer greater than or equal to 60")
		return
	case hasImage && present(req.Image.Auth):
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "image.auth: registry credentials are not supported here; log the backend's engine in instead")
		return
	case present(req.CredentialProxy):
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "credentialProxy: sandboxkit brokers credentials in its egress enforcer, configured by the operator, not through this API")
		return
	case present(req.NetworkPolicy) && s.opts.OSBNoAgentEgress:
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "networkPolicy: this server's operator does not let agents set egress policies ([sandbox.serve] agent_egress = false)")
		return
	case present(req.Platform):
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "platform: set it in the server's config entry instead")
		return
	}
	var vols []backend.Volume
	if present(req.Volumes) {
		var err error
		if vols, err = s.osbVolumes(req.Volumes); err != nil {
			osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "%v", err)
			return
		}
	}
	var policy *backend.Egress
	if present(req.NetworkPolicy) {
		var np osbPolicy
		dec := json.NewDecoder(strings.NewReader(string(req.NetworkPolicy)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&np); err != nil {
			osbValidation(w, []any{"body", "networkPolicy"}, "networkPolicy: "+err.Error())
			return
		}
		e, err := np.egress()
		if err == nil {
			e, err = s.osbWithinOperator(e)
		}
		if err != nil {
			osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "networkPolicy: %v", err)
			return
		}
		policy = &e
	}
	res, err := osbResources(req.ResourceLimits)
	if err != nil {
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "resourceLimits: %v", err)
		return
	}
	for k, v := range req.Metadata {
		if msg := osbMetadataProblem(k, v); msg != "" {
			osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_METADATA_LABEL", "%s", msg)
			return
		}
	}
	// A snapshot's sandbox starts from the image the backend saved.
	image, shown := "", ""
	if hasImage {
		image, shown = req.Image.URI, req.Image.URI
	} else {
		snap, err := s.osbSnapshot(r.Context(), conv, req.SnapshotID)
		if err != nil {
			s.osbSnapshotFail(w, err, "SANDBOX::CREATE_FAILED")
			return
		}
		image, shown = snap.Ref, "snapshot:"+req.SnapshotID
	}
	idle := s.opts.MaxLifetime
	if req.Timeout != nil {
		idle = time.Duration(*req.Timeout) * time.Second
	}
	entry, _ := json.Marshal(req.Entrypoint)
	labels := map[string]string{LabelOSBEntrypoint: string(entry), LabelOSBImage: shown}
	for k, v := range req.Metadata {
		labels[LabelOSBMetadata+k] = v
	}
	if req.Timeout == nil {
		labels[LabelOSBNoTimeout] = "1"
	}
	if tok := req.Env[osbEnvToken]; tok != "" {
		sum := sha256.Sum256([]byte(tok))
		labels[LabelOSBToken] = hex.EncodeToString(sum[:])
	}
	typ := s.opts.Types[0]
	custom := func(spec *backend.Spec) error {
		spec.Image = image
		spec.Build = nil
		spec.Command, spec.ImageCommand = slices.Clone(req.Entrypoint), false
		spec.Env = maps.Clone(spec.Env)
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		maps.Copy(spec.Env, req.Env)
		spec.Volumes = append(slices.Clone(spec.Volumes), vols...)
		if policy != nil {
			// The entry's own policy bounds the agent's as the
			// operator's does.
			p := *policy
			if spec.Egress != nil {
				var err error
				if p, err = withinBound(p, *spec.Egress); err != nil {
					return fmt.Errorf("%w: networkPolicy: %v (the server's config entry's egress policy)", backend.ErrInvalidConfig, err)
				}
			}
			spec.Egress = &p
		}
		return s.osbLimits(spec, res, false)
	}
	if hasImage && policy == nil && vols == nil && s.osbPoolable(typ, req, res) {
		custom = nil // a ready sandbox of the type's pool is this one
	}
	in, err := s.create(r.Context(), conv, typ, idle, custom, labels)
	noteAudit(r.Context(), func(e *AuditEntry) { e.Sandbox, e.Argv = in.ID, slices.Clone(req.Entrypoint) })
	if err != nil {
		s.osbFail(w, err, "SANDBOX::CREATE_FAILED")
		return
	}
	body, err := s.osbSandbox(r.Context(), conv, in.ID)
	if err != nil {
		s.osbFail(w, err, "SANDBOX::CREATE_FAILED")
		return
	}
	writeJSON(w, http.StatusAccepted, body)
}

// osbLimits applies the request's resource limits to spec. SDKs always send
// limits (the API requires them): a limit the backend cannot enforce is
// left out, and the server's log says so.
func (s *Server) osbLimits(spec *backend.Spec, res backend.Resources, quiet bool) error {
	caps := s.opts.Backend.Capabilities()
	var ignored []string
	if res.CPUs > 0 {
		if caps.CPULimit {
			spec.Resources.CPUs = res.CPUs
		} else {
			ignored = append(ignored, "cpu")
		}
	}
	if res.MemoryBytes > 0 {
		if caps.MemoryLimit {
			spec.Resources.MemoryBytes = res.MemoryBytes
		} else {
			ignored = append(ignored, "memory")
		}
	}
	if res.GPUs != "" {
		if !caps.GPUs {
			return fmt.Errorf("%w: resourceLimits.gpu: the %s backend has no GPUs", backend.ErrInvalidConfig, s.opts.Backend.Name())
		}
		spec.Resources.GPUs = res.GPUs
	}
	if len(ignored) > 0 && !quiet {
		s.opts.Logger.Warn("OpenSandbox API: this backend cannot enforce these resource limits; the sandbox runs without them",
			"backend", s.opts.Backend.Name(), "limits", strings.Join(ignored, ","))
	}
	return nil
}

// keepAlive reports whether argv only keeps a sandbox running (the SDKs'
// default entrypoint, or none: the backend's own keep-alive).
func keepAlive(argv []string) bool {
	return len(argv) == 0 || slices.Equal(argv, []string{"tail", "-f", "/dev/null"}) || slices.Equal(argv, []string{"sleep", "infinity"})
}

// osbPoolable reports whether a ready sandbox of typ's pool is the sandbox
// req asks for: the same image, a keep-alive entrypoint where the pool's
// members keep alive (or the same one), no environment but the execd
// token, and the limits the members were made with (as far as the backend
// enforces them).
func (s *Server) osbPoolable(typ string, req osbCreateRequest, res backend.Resources) bool {
	if s.pools[typ] == nil {
		return false
	}
	spec, err := s.typeSpec(typ)
	if err != nil || spec.Image != req.Image.URI || spec.ImageCommand || spec.Build != nil {
		return false
	}
	if !slices.Equal(spec.Command, req.Entrypoint) && !(keepAlive(spec.Command) && keepAlive(req.Entrypoint)) {
		return false
	}
	for k := range req.Env {
		if k != osbEnvToken {
			return false
		}
	}
	want := spec
	if s.osbLimits(&want, res, true) != nil {
		return false
	}
	return want.Resources == spec.Resources
}

// osbResources parses resourceLimits: cpu ("1", "500m"), memory ("512Mi",
// "2Gi", "1G", bytes) and gpu (a count).
func osbResources(m map[string]string) (backend.Resources, error) {
	var res backend.Resources
	for k, v := range m {
		v = strings.TrimSpace(v)
		switch k {
		case "cpu":
			f, err := strconv.ParseFloat(strings.TrimSuffix(v, "m"), 64)
			if err != nil || f <= 0 {
				return res, fmt.Errorf("cpu %q: want cores (\"1\", \"0.5\") or millicores (\"500m\")", v)
			}
			if strings.HasSuffix(v, "m") {
				f /= 1000
			}
			res.CPUs = f
		case "memory":
			n, err := parseQuantity(v)
			if err != nil {
				return res, fmt.Errorf("memory %q: %v", v, err)
			}
			res.MemoryBytes = n
		case "gpu":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return res, fmt.Errorf("gpu %q: want a count", v)
			}
			if n > 0 {
				res.GPUs = strconv.Itoa(n)
			}
		default:
			return res, fmt.Errorf("unknown resource %q (known: cpu, memory, gpu)", k)
		}
	}
	return res, nil
}

// parseQuantity parses a Kubernetes memory quantity.
func parseQuantity(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSuffix(v, u.suffix), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f*mult > math.MaxInt64/2 {
		return 0, errors.New(`want a quantity such as "512Mi" or "2Gi"`)
	}
	return int64(f * mult), nil
}

// osbMetadataProblem applies the real server's rule for metadata (they are
// Kubernetes labels there): a message, or "" when k=v is fine.
func osbMetadataProblem(k, v string) string {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if prefix == "opensandbox.io" {
			return fmt.Sprintf("Metadata key '%s' uses the reserved prefix opensandbox.io/.", k)
		}
		if prefix == "" || len(prefix) > 253 || !labelChars(prefix, ".-") {
			return fmt.Sprintf("Metadata key '%s' is not a valid Kubernetes label key.", k)
		}
		name = n
	}
	if len(name) == 0 || len(name) > 63 || !labelChars(name, "-_.") {
		return fmt.Sprintf("Metadata key '%s' is not a valid Kubernetes label key.", k)
	}
	if v != "" && (len(v) > 63 || !labelChars(v, "-_.")) {
		return fmt.Sprintf("Metadata value '%s' is not a valid Kubernetes label value.", v)
	}
	return ""
}

// labelChars reports whether s is alphanumerics with extra inside and
// alphanumeric ends.
func labelChars(s, extra string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(s); i++ {
		if !alnum(s[i]) && (i == 0 || i == len(s)-1 || strings.IndexByte(extra, s[i]) < 0) {
			return false
		}
	}
	return s != ""
}

// osbFail answers for a failed call: 404 for a sandbox the caller cannot
// see, 400 for what the backend refused, 501 for what it cannot do, 503
// while the server stops, else 500 with code.
func (s *Server) osbFail(w http.ResponseWriter, err error, code string) {
	switch {
	case isGone(err):
		osbError(w, http.StatusNotFound, "SANDBOX::NOT_FOUND", "%s", strings.TrimPrefix(err.Error(), "Error: "))
	case errors.Is(err, backend.ErrInvalidConfig):
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", "%v", err)
	case errors.Is(err, errors.ErrUnsupported):
		osbError(w, http.StatusNotImplemented, "SANDBOX::NOT_SUPPORTED", "%v", err)
	case err == errShutdown:
		osbError(w, http.StatusServiceUnavailable, "SANDBOX::UNAVAILABLE", "%s", strings.TrimPrefix(err.Error(), "Error: "))
	default:
		osbError(w, http.StatusInternalServerError, code, "%v", err)
	}
}

// isGone reports whether err is (or wraps) one of errGone's.
func isGone(err error) bool { return errors.Is(err, errSandboxGone) }

// osbTime is how the real server writes times.
func osbTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.999999-07:00") }

// osbState maps a backend state to OpenSandbox's.
func osbState(st backend.State) string {
	switch st {
	case backend.StateRunning:
		return "Running"
	case backend.StatePaused:
		return "Paused"
	case backend.StateCreating:
		return "Pending"
	case backend.StateExited:
		return "Failed"
	case backend.StateRemoving:
		return "Terminating"
	}
	return "Unknown"
}

// osbMetadata is b's metadata: its labels', or what a PATCH made of them.
// Called with s.mu held.
func osbMetadata(b *box, labels map[string]string) map[string]string {
	if b.osbMeta != nil {
		return maps.Clone(b.osbMeta)
	}
	meta := map[string]string{}
	for k, v := range labels {
		if name, ok := strings.CutPrefix(k, LabelOSBMetadata); ok {
			meta[name] = v
		}
	}
	return meta
}

// osbJSON is sandbox b (info) as the API shows it.
func (s *Server) osbJSON(b *box, info backend.Info) map[string]any {
	info.Labels = maps.Clone(info.Labels)
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	maps.Copy(info.Labels, b.labels)
	s.mu.Lock()
	meta := osbMetadata(b, info.Labels)
	expires := b.expiry()
	if b.osbNoExpiry {
		expires = time.Time{}
	}
	s.mu.Unlock()
	var entry []string
	json.Unmarshal([]byte(info.Labels[LabelOSBEntrypoint]), &entry)
	image := info.Labels[LabelOSBImage]
	if image == "" {
		image = info.Image
	}
	state := osbState(info.State)
	m := map[string]any{
		"id": info.ID,
		"status": map[string]any{
			"state": state, "reason": strings.ToLower(state), "message": "",
			"lastTransitionAt": osbTime(s.now()),
		},
		"metadata":   meta,
		"entrypoint": entry,
		"image":      map[string]string{"uri": image},
		"createdAt":  osbTime(info.CreatedAt),
	}
	if !expires.IsZero() {
		m["expiresAt"] = osbTime(expires)
	}
	return m
}

// osbSandbox describes conv's sandbox id.
func (s *Server) osbSandbox(ctx context.Context, conv, id string) (map[string]any, error) {
	var out map[string]any
	err := s.withBox(ctx, conv, id, func(ctx context.Context, b *box) error {
		info, err := b.sb.Info(ctx)
		if err != nil {
			return err
		}
		out = s.osbJSON(b, info)
		return nil
	})
	return out, err
}

func (s *Server) osbGet(w http.ResponseWriter, r *http.Request, conv string) {
	body, err := s.osbSandbox(r.Context(), conv, r.PathValue("id"))
	if err != nil {
		s.osbFail(w, err, "SANDBOX::QUERY_FAILED")
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) osbDelete(w http.ResponseWriter, r *http.Request, conv string) {
	if err := s.Delete(r.Context(), conv, r.PathValue("id")); err != nil {
		s.osbFail(w, err, "SANDBOX::DELETE_FAILED")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// osbPage reads a list's page and pageSize (1 and 20 when absent;
// pageSize at most maxSize, 0: no bound), answering FastAPI's 422 for a
// bad one; false when it answered.
func osbPage(w http.ResponseWriter, q url.Values, maxSize int) (page, pageSize int, ok bool) {
	page, pageSize = 1, 20
	for _, p := range []struct {
		name string
		v    *int
		max  int
	}{{"page", &page, 0}, {"pageSize", &pageSize, maxSize}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		switch {
		case p.max > 0 && (err != nil || n < 1 || n > p.max):
			osbValidation(w, []any{"query", p.name}, fmt.Sprintf("Input should be between 1 and %d", p.max))
			return 0, 0, false
		case err != nil || n < 1:
			osbValidation(w, []any{"query", p.name}, "Input should be greater than or equal to 1")
			return 0, 0, false
		}
		*p.v = n
	}
	return page, pageSize, true
}

func (s *Server) osbList(w http.ResponseWriter, r *http.Request, conv string) {
	q := r.URL.Query()
	page, pageSize, ok := osbPage(w, q, 200)
	if !ok {
		return
	}
	var want url.Values
	if md := q.Get("metadata"); md != "" {
		for part := range strings.SplitSeq(md, "&") {
			if !strings.Contains(part, "=") {
				osbError(w, http.StatusBadRequest, "INVALID_METADATA_FORMAT", "Invalid metadata format: bad query field: %q", part)
				return
			}
		}
		var err error
		if want, err = url.ParseQuery(md); err != nil {
			osbError(w, http.StatusBadRequest, "INVALID_METADATA_FORMAT", "Invalid metadata format: %v", err)
			return
		}
	}
	states := q["state"]
	infos, err := s.opts.Backend.List(r.Context(), backend.Filter{Labels: map[string]string{
		LabelInstance: s.opts.Instance, LabelConversation: OwnerKey(conv),
	}})
	if err != nil {
		s.osbFail(w, err, "SANDBOX::QUERY_FAILED")
		return
	}
	slices.SortFunc(infos, func(a, b backend.Info) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	now := s.now()
	items := []map[string]any{}
	for _, info := range infos {
		if info.Expired(now) {
			continue
		}
		b, _ := s.register(info, nil)
		if b == nil {
			continue
		}
		s.mu.Lock()
		gone := b.gone
		s.mu.Unlock()
		if gone {
			continue
		}
		item := s.osbJSON(b, info)
		st := item["status"].(map[string]any)["state"].(string)
		if len(states) > 0 && !slices.ContainsFunc(states, func(x string) bool { return strings.EqualFold(x, st) }) {
			continue
		}
		match := true
		meta := item["metadata"].(map[string]string)
		for k, vs := range want {
			if v, ok := meta[k]; !ok || v != vs[len(vs)-1] {
				match = false
			}
		}
		if match {
			items = append(items, item)
		}
	}
	total := len(items)
	from := min((page-1)*pageSize, total)
	to := min(from+pageSize, total)
	pages := (total + pageSize - 1) / pageSize
	writeJSON(w, http.StatusOK, map[string]any{
		"items": items[from:to],
		"pagination": map[string]any{
			"page": page, "pageSize": pageSize, "totalItems": total, "totalPages": pages, "hasNextPage": page < pages,
		},
	})
}

// osbPatchMetadata applies a JSON merge patch to the metadata. The
// server keeps the result (the backends' labels are fixed at creation):
// a restarted server shows the metadata the sandbox was created with.
func (s *Server) osbPatchMetadata(w http.ResponseWriter, r *http.Request, conv string) {
	var patch map[string]*string
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&patch); err != nil {
		osbValidation(w, []any{"body"}, "JSON decode error: "+err.Error())
		return
	}
	for k, v := range patch {
		if v != nil {
			if msg := osbMetadataProblem(k, *v); msg != "" {
				osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_METADATA_LABEL", "%s", msg)
				return
			}
		}
	}
	var out map[string]any
	err := s.withBox(r.Context(), conv, r.PathValue("id"), func(ctx context.Context, b *box) error {
		info, err := b.sb.Info(ctx)
		if err != nil {
			return err
		}
		s.mu.Lock()
		meta := osbMetadata(b, info.Labels)
		for k, v := range patch {
			if v == nil {
				delete(meta, k)
			} else {
				meta[k] = *v
			}
		}
		b.osbMeta = meta
		s.mu.Unlock()
		out = s.osbJSON(b, info)
		return nil
	})
	if err != nil {
		s.osbFail(w, err, "SANDBOX::PATCH_FAILED")
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// osbPause pauses or resumes (by the path's last element).
func (s *Server) osbPause(w http.ResponseWriter, r *http.Request, conv string) {
	resume := strings.HasSuffix(r.URL.Path, "/resume")
	err := s.withBox(r.Context(), conv, r.PathValue("id"), func(ctx context.Context, b *box) error {
		p, ok := backend.As[backend.Pauser](b.sb)
		if !ok {
			return fmt.Errorf("%w: the %s backend cannot pause sandboxes", errors.ErrUnsupported, s.opts.Backend.Name())
		}
		if resume {
			return p.Resume(ctx)
		}
		return p.Pause(ctx)
	})
	if err != nil {
		s.osbFail(w, err, "SANDBOX::PAUSE_FAILED")
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// osbRenew moves the sandbox's expiry to the time asked for (at most its
// hard limit): its idle window then ends there.
func (s *Server) osbRenew(w http.ResponseWriter, r *http.Request, conv string) {
	var req struct {
		ExpiresAt string `json:"expiresAt"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		osbValidation(w, []any{"body"}, "JSON decode error: "+err.Error())
		return
	}
	at, err := time.Parse(time.RFC3339Nano, req.ExpiresAt)
	if err != nil {
		osbValidation(w, []any{"body", "expiresAt"}, "Input should be a valid datetime (RFC 3339)")
		return
	}
	if !at.After(s.now()) {
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_EXPIRATION", "expiresAt %s is not in the future", req.ExpiresAt)
		return
	}
	var got time.Time
	err = s.withBox(r.Context(), conv, r.PathValue("id"), func(ctx context.Context, b *box) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !b.hardDeadline.IsZero() && at.After(b.hardDeadline) {
			at = b.hardDeadline
		}
		b.until = at
		b.osbNoExpiry = false
		got = b.expiry()
		return nil
	})
	if err != nil {
		s.osbFail(w, err, "SANDBOX::RENEW_FAILED")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"expiresAt": osbTime(got)})
}

// osbRouteKey is the secret the direct execd routes are derived from: the
// API key, else one made at start (endpoints handed out before a restart
// then stop working, and clients ask again).
func (s *Server) osbRouteKey() []byte {
	s.osbKeyOnce.Do(func() {
		if s.opts.APIKey != "" {
			s.osbKey = []byte("osb-route:" + s.opts.APIKey)
			return
		}
		s.osbKey = make([]byte, 32)
		rand.Read(s.osbKey)
	})
	return s.osbKey
}

// osbRoute is sandbox id's direct execd route secret.
func (s *Server) osbRoute(id string) string {
	m := hmac.New(sha256.New, s.osbRouteKey())
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *Server) osbEndpoint(w http.ResponseWriter, r *http.Request, conv string) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		osbValidation(w, []any{"path", "port"}, "Input should be a valid integer, unable to parse string as an integer")
		return
	}
	if port < 1 || port > 65535 {
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PORT", "Port must be between 1 and 65535.")
		return
	}
	if r.URL.Query().Has("expires") {
		// What the real server's Docker runtime answers: signed routes
		// need a gateway that checks them.
		osbError(w, http.StatusBadRequest, "SANDBOX::API_NOT_SUPPORTED", "Signed routes (expires parameter) are not supported by sandboxkit's server; ask for a plain endpoint")
		return
	}
	id := r.PathValue("id")
	proxied := r.URL.Query().Get("use_server_proxy")
	useProxy := proxied == "true" || proxied == "1"
	ep := map[string]any{}
	err = s.withBox(r.Context(), conv, id, func(ctx context.Context, b *box) error {
		switch {
		case useProxy:
			ep["endpoint"] = r.Host + "/sandboxes/" + id + "/proxy/" + strconv.Itoa(port)
			return nil
		case port == s.opts.OSBExecdPort:
			ep["endpoint"] = r.Host + "/execd/" + id
			ep["headers"] = map[string]string{OSBHeaderRoute: s.osbRoute(id)}
			return nil
		case port != OSBEgressPort:
			if e, ok := backend.As[backend.Endpointer](b.sb); ok {
				if addr, err := e.Endpoint(ctx, port); err == nil {
					ep["endpoint"] = addr
					return nil
				}
			}
		}
		// As the real server answers for a port it does not publish:
		// through the server, with a per-port route header standing for
		// the API key.
		ep["endpoint"] = r.Host + "/port/" + id + "/" + strconv.Itoa(port)
		ep["headers"] = map[string]string{OSBHeaderRoute: s.osbRoute(id + ":" + strconv.Itoa(port))}
		return nil
	})
	if err != nil {
		s.osbFail(w, err, "SANDBOX::ENDPOINT_FAILED")
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

// portError is a backend's answer about a port. It does not unwrap: a
// port the backend does not know (backend.ErrNotFound) must not make the
// server forget the sandbox.
type portError struct{ err error }

func (e portError) Error() string { return e.err.Error() }

// osbProxy serves the server proxy: execd's port goes to this server's
// execd, the egress sidecar's to its API here, other ports to the address
// the backend publishes them at.
func (s *Server) osbProxy(w http.ResponseWriter, r *http.Request, conv string) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		dropBody(w, r)
		osbError(w, http.StatusBadRequest, "SANDBOX::INVALID_PORT", "Port must be between 1 and 65535.")
		return
	}
	r.Header.Del(osbHeaderAPIKey) // never on to the sandbox
	s.osbPort(w, r, conv, r.PathValue("id"), port, "/"+r.PathValue("path"))
}

// osbDirectPort is a port's endpoint outside the proxy's API-key check:
// the route header of that port stands for the key.
func (s *Server) osbDirectPort(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil {
		dropBody(w, r)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: missing or wrong " + OSBHeaderRoute + " (ask the endpoints API for this port's endpoint)"})
		return
	}
	conv, ok := s.osbRouted(w, r, id+":"+r.PathValue("port"), "this port's")
	if !ok {
		return
	}
	r.Header.Del(OSBHeaderRoute)
	s.osbPort(w, r, conv, id, port, "/"+r.PathValue("path"))
}

// osbRouted checks a direct endpoint's route header against the one
// handed out for key (the sandbox, or sandbox:port), and returns the
// request's conversation; false when it answered the request (401, or
// 400 for a bad conversation) with the body unread.
func (s *Server) osbRouted(w http.ResponseWriter, r *http.Request, key, whose string) (string, bool) {
	got := r.Header.Get(OSBHeaderRoute)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.osbRoute(key))) != 1 {
		dropBody(w, r)
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized: missing or wrong " + OSBHeaderRoute + " (ask the endpoints API for " + whose + " endpoint)"})
		return "", false
	}
	conv, err := osbConv(r)
	if err != nil {
		dropBody(w, r)
		osbError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "%v", err)
		return "", false
	}
	return conv, true
}

// osbPort serves path p of port on conv's sandbox id.
func (s *Server) osbPort(w http.ResponseWriter, r *http.Request, conv, id string, port int, p string) {
	switch port {
	case s.opts.OSBExecdPort:
		s.osbExecd(w, r, conv, id, p)
		return
	case OSBEgressPort:
		if r.Method == http.MethodGet {
			s.osbEgress(w, r, conv, id, p)
			return
		}
		// An egress change is audited.
		e := &AuditEntry{Kind: AuditOpenSandbox, Conversation: conv, Sandbox: id, Route: "egress " + r.Method + " " + p}
		s.auditCall(e, w, r, func(w http.ResponseWriter, r *http.Request) { s.osbEgress(w, r, conv, id, p) })
		return
	}
	var addr string
	err := s.withBox(r.Context(), conv, id, func(ctx context.Context, b *box) error {
		e, ok := backend.As[backend.Endpointer](b.sb)
		if !ok {
			return fmt.Errorf("%w: the %s backend publishes no ports", errors.ErrUnsupported, s.opts.Backend.Name())
		}
		var err error
		if addr, err = e.Endpoint(ctx, port); err != nil {
			return portError{err}
		}
		return nil
	})
	var pe portError
	switch {
	case errors.As(err, &pe), errors.Is(err, errors.ErrUnsupported):
		// Nothing listens there that this server can reach: what the real
		// server's proxy answers for a port nothing listens on.
		dropBody(w, r)
		osbError(w, http.StatusBadGateway, "SANDBOX::PORT_NOT_REACHABLE", "port %d of sandbox %s is not published (sandboxes of this server publish the ports of its config entry): %v", port, id, err)
		return
	case err != nil:
		dropBody(w, r)
		s.osbFail(w, err, "SANDBOX::PROXY_FAILED")
		return
	}
	target := &url.URL{Scheme: "http", Host: addr}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.URL.Path = p
		pr.Out.URL.RawPath = ""
	}}
	rp.ServeHTTP(w, r)
}

// osbDirectExecd is execd at the endpoint handed out for its port: the
// route header stands for the API key, which never comes here.
func (s *Server) osbDirectExecd(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	conv, ok := s.osbRouted(w, r, id, "execd's")
	if !ok {
		return
	}
	s.osbExecd(w, r, conv, id, "/"+r.PathValue("path"))
}
