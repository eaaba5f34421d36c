package opensandboxtest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// markerEnv is set in every process a fake sandbox starts, so removing the
// sandbox can find them all (even those that left the process group).
const markerEnv = "OPENSANDBOXTEST_SANDBOX"

// routeHeader is the header the endpoints API hands out for execd, and that
// execd requires (as a gateway with secured access would).
const routeHeader = "X-Opensandboxtest-Route"

type sandbox struct {
	srv        *Server
	id         string
	image      string
	entrypoint []string
	env        map[string]string
	metadata   map[string]string
	dir        string // the sandbox's working directory (a host path)
	token      string // EXECD_ACCESS_TOKEN from the create request's env

	// Guarded by srv.mu.
	state, reason, message string
	createdAt              time.Time
	expiresAt              time.Time // zero: no expiry
	readyAt                time.Time // execd answers from then on
	expiry                 *time.Timer
	stateCh                chan struct{} // closed and replaced at every state change
	gone                   chan struct{} // closed when removed
	removing               bool          // being removed: still listed, but going
	commands               map[string]*command
	sessions               map[string]*ptySession // execd's bash sessions

	execd *httptest.Server
	// egress is the egress sidecar of a sandbox created with a
	// networkPolicy (nil without one).
	egress *egressSidecar
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// setStateLocked changes the state and wakes those waiting on it.
func (sb *sandbox) setStateLocked(state, reason, message string) {
	sb.state, sb.reason, sb.message = state, reason, message
	close(sb.stateCh)
	sb.stateCh = make(chan struct{})
}

func (sb *sandbox) json(full bool) map[string]any {
	sb.srv.mu.Lock()
	defer sb.srv.mu.Unlock()
	return sb.jsonLocked(full)
}

func (sb *sandbox) jsonLocked(full bool) map[string]any {
	m := map[string]any{
		"id": sb.id,
		"status": map[string]any{
			"state": sb.state, "reason": sb.reason, "message": sb.message,
			"lastTransitionAt": time.Now().UTC().Format(time.RFC3339Nano),
		},
		"metadata":   maps.Clone(sb.metadata),
		"entrypoint": sb.entrypoint,
		// As the Python server writes them: ISO 8601 with an offset.
		"createdAt": sb.createdAt.UTC().Format("2006-01-02T15:04:05.999999-07:00"),
	}
	if !sb.expiresAt.IsZero() {
		m["expiresAt"] = sb.expiresAt.UTC().Format("2006-01-02T15:04:05.999999-07:00")
	}
	if full {
		m["image"] = map[string]string{"uri": sb.image}
	}
	return m
}

var (
	dnsLabelRE  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomRE = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)*[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	labelNameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// validLabel applies the server's Kubernetes label rules to metadata.
func validLabel(k, v string) string {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if prefix == "" || len(prefix) > 253 || !dnsSubdomRE.MatchString(prefix) {
			return fmt.Sprintf("Metadata key '%s' is not a valid Kubernetes label key.", k)
		}
		if prefix == "opensandbox.io" {
			return fmt.Sprintf("Metadata key '%s' uses the reserved prefix opensandbox.io/.", k)
		}
		name = n
	}
	if len(k) > 253 || len(name) > 63 || !labelNameRE.MatchString(name) {
		return fmt.Sprintf("Metadata key '%s' is not a valid Kubernetes label key.", k)
	}
	if v != "" && (len(v) > 63 || !labelNameRE.MatchString(v)) {
		return fmt.Sprintf("Metadata value '%s' is not a valid Kubernetes label value.", v)
	}
	return ""
}

// create implements POST /sandboxes.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "SANDBOX::INVALID_PARAMETER", err.Error())
		return
	}
	s.mu.Lock()
	s.creates = append(s.creates, json.RawMessage(body))
	s.mu.Unlock()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		write422(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: "JSON decode error: " + err.Error()})
		return
	}
	req, errs := decodeCreate(raw)
	if len(errs) > 0 {
		write422(w, errs...)
		return
	}
	if code, msg := req.check(); code != "" {
		writeError(w, http.StatusBadRequest, code, msg)
		return
	}

	id := newID()
	dir := filepath.Join(s.root, id)
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		writeError(w, http.StatusInternalServerError, "DOCKER::SANDBOX_CREATE_FAILED", err.Error())
		return
	}
	os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
	now := time.Now().UTC()
	sb := &sandbox{
		srv: s, id: id, image: req.image.URI, entrypoint: req.entrypoint, env: req.env, metadata: req.metadata, dir: dir,
		token: req.env["EXECD_ACCESS_TOKEN"], createdAt: now, state: "Pending", reason: "provisioning",
		message: "Sandbox is being provisioned.", stateCh: make(chan struct{}), gone: make(chan struct{}),
		commands: map[string]*command{},
	}
	if sb.metadata == nil {
		sb.metadata = map[string]string{}
	}
	if req.hasTimeout {
		sb.expiresAt = now.Add(time.Duration(req.timeout) * time.Second)
	}
	sb.execd = httptest.NewServer(sb.execdRoutes())
	if req.network != nil {
		sb.egress = newEgressSidecar(*req.network)
	}

	s.mu.Lock()
	s.sandboxes[id] = sb
	s.order = append(s.order, id)
	if !sb.expiresAt.IsZero() {
		sb.expiry = time.AfterFunc(time.Until(sb.expiresAt), func() { s.remove(id, "ttl_expiry") })
	}
	resp := sb.jsonLocked(false)
	s.mu.Unlock()

	sb.startEntrypoint()
	time.AfterFunc(s.opts.PendingFor, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sb.state == "Pending" {
			sb.readyAt = time.Now().Add(s.opts.ReadyAfter)
			sb.setStateLocked("Running", "", "")
		}
	})
	writeJSON(w, http.StatusAccepted, resp)
}

// createBody is a create request, decoded.
type createBody struct {
	image      struct{ URI string }
	entrypoint []string
	timeout    int
	hasTimeout bool
	limits     map[string]string
	env        map[string]string
	metadata   map[string]string
	network    *NetworkPolicy
	volumes    []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
		Host      *struct {
			Path string `json:"path"`
		} `json:"host"`
		PVC *struct {
			ClaimName string `json:"claimName"`
		} `json:"pvc"`
	}
}

// decodeCreate decodes a create request's fields as the server's request
// model does, with the validation errors it answers 422 with.
func decodeCreate(raw map[string]json.RawMessage) (createBody, []validationError) {
	var c createBody
	var errs []validationError
	field := func(name string, v any, required bool) bool {
		data, ok := raw[name]
		if !ok || string(data) == "null" {
			if required {
				errs = append(errs, validationError{Type: "missing", Loc: []any{"body", name}, Msg: "Field required"})
			}
			return false
		}
		if err := json.Unmarshal(data, v); err != nil {
			errs = append(errs, validationError{Type: "type_error", Loc: []any{"body", name}, Msg: "Input has the wrong type: " + err.Error(), Input: json.RawMessage(data)})
			return false
		}
		return true
	}
	if field("image", &c.image, false) && c.image.URI == "" {
		errs = append(errs, validationError{Type: "missing", Loc: []any{"body", "image", "uri"}, Msg: "Field required"})
	}
	if _, ok := raw["image"]; !ok {
		errs = append(errs, validationError{Type: "value_error", Loc: []any{"body"}, Msg: "Value error, exactly one of image or snapshotId must be provided"})
	}
	if field("entrypoint", &c.entrypoint, true) && len(c.entrypoint) == 0 {
		errs = append(errs, validationError{Type: "too_short", Loc: []any{"body", "entrypoint"}, Msg: "List should have at least 1 item after validation, not 0"})
	}
	c.hasTimeout = field("timeout", &c.timeout, false)
	if c.hasTimeout && c.timeout < 60 {
		errs = append(errs, validationError{Type: "greater_than_equal", Loc: []any{"body", "timeout"}, Msg: "Input should be greater than or equal to 60", Input: c.timeout})
	}
	field("resourceLimits", &c.limits, true)
	field("env", &c.env, false)
	field("metadata", &c.metadata, false)
	field("volumes", &c.volumes, false)
	if field("networkPolicy", &c.network, false) {
		errs = append(errs, checkPolicy(*c.network)...)
	}
	return c, errs
}

// check applies the server's checks of metadata and volumes: it returns
// the code and message of its 400 answer, or "".
func (c *createBody) check() (code, msg string) {
	for k, v := range c.metadata {
		if msg := validLabel(k, v); msg != "" {
			return "SANDBOX::INVALID_METADATA_LABEL", msg
		}
	}
	for _, v := range c.volumes {
		switch {
		case !dnsLabelRE.MatchString(v.Name) || len(v.Name) > 63:
			return "SANDBOX::INVALID_VOLUME_NAME", fmt.Sprintf("Volume name '%s' is not a valid DNS label.", v.Name)
		case !strings.HasPrefix(v.MountPath, "/"):
			return "SANDBOX::INVALID_MOUNT_PATH", fmt.Sprintf("Mount path '%s' must be an absolute path starting with '/'.", v.MountPath)
		case (v.Host == nil) == (v.PVC == nil):
			return "SANDBOX::INVALID_VOLUME_BACKEND", fmt.Sprintf("Volume '%s' must specify exactly one backend.", v.Name)
		case v.Host != nil && !filepath.IsAbs(v.Host.Path):
			return "SANDBOX::INVALID_HOST_PATH", fmt.Sprintf("Host path '%s' must be an absolute path.", v.Host.Path)
		case v.PVC != nil && !dnsLabelRE.MatchString(v.PVC.ClaimName):
			return "SANDBOX::INVALID_PVC_NAME", fmt.Sprintf("PVC claim name '%s' is not a valid Kubernetes resource name.", v.PVC.ClaimName)
		}
	}
	return "", ""
}

// processEnv is the environment of every process of the sandbox: the
// host's (for PATH and friends), the create request's env, a TMPDIR of the
// sandbox's own and the marker.
func (sb *sandbox) processEnv(extra map[string]string) []string {
	env := os.Environ()
	for _, k := range slices.Sorted(maps.Keys(sb.env)) {
		env = append(env, k+"="+sb.env[k])
	}
	env = append(env, "TMPDIR="+filepath.Join(sb.dir, "tmp"))
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		env = append(env, k+"="+extra[k])
	}
	return append(env, markerEnv+"="+sb.id)
}

// startEntrypoint runs the sandbox's main process; when it ends the sandbox
// has failed, as a container whose main process exits.
func (sb *sandbox) startEntrypoint() {
	cmd := exec.Command(sb.entrypoint[0], sb.entrypoint[1:]...)
	cmd.Dir = sb.dir
	cmd.Env = sb.processEnv(nil)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	fail := func(reason, msg string) {
		sb.srv.mu.Lock()
		defer sb.srv.mu.Unlock()
		select {
		case <-sb.gone:
			return
		default:
		}
		if sb.state != "Failed" && sb.state != "Terminated" && sb.state != "Stopping" {
			sb.setStateLocked("Failed", reason, msg)
		}
	}
	if err := cmd.Start(); err != nil {
		fail("container_start_failed", fmt.Sprintf("starting entrypoint %q: %v", sb.entrypoint, err))
		return
	}
	go func() {
		err := cmd.Wait()
		fail("container_exited", fmt.Sprintf("the entrypoint %q exited: %v", sb.entrypoint, waitText(err)))
	}()
}

func waitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// remove deletes a sandbox: its processes are killed, its execd stopped
// and its directory removed; meanwhile it is Terminated (and breaks
// listings, see list), afterwards the API answers 404 for it (as the
// Docker runtime does once the container is gone).
func (s *Server) remove(id, reason string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil || sb.removing {
		s.mu.Unlock()
		return
	}
	sb.removing = true
	if sb.expiry != nil {
		sb.expiry.Stop()
	}
	sb.setStateLocked("Terminated", reason, "")
	close(sb.gone)
	s.mu.Unlock()

	procfs.KillByEnv(markerEnv, id)
	sb.execd.CloseClientConnections()
	sb.execd.Close()
	if sb.egress != nil {
		sb.egress.srv.CloseClientConnections()
		sb.egress.srv.Close()
	}
	os.RemoveAll(sb.dir)
	time.Sleep(s.opts.RemovalTime)

	s.mu.Lock()
	delete(s.sandboxes, id)
	s.order = slices.DeleteFunc(s.order, func(x string) bool { return x == id })
	s.mu.Unlock()
}

func (s *Server) patchMetadata(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	var patch map[string]*string
	if err := json.NewDecoder(r.Body).Decode(&patch); err != nil {
		write422(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: "JSON decode error: " + err.Error()})
		return
	}
	for k, v := range patch {
		if v != nil {
			if msg := validLabel(k, *v); msg != "" {
				writeError(w, http.StatusBadRequest, "SANDBOX::INVALID_METADATA_LABEL", msg)
				return
			}
		}
	}
	s.mu.Lock()
	for k, v := range patch {
		if v == nil {
			delete(sb.metadata, k)
		} else {
			sb.metadata[k] = *v
		}
	}
	resp := sb.jsonLocked(true)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// pause stops every process of the sandbox (as docker pause freezes a
// container), passing through Pausing.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	if sb.state != "Running" {
		state := sb.state
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "DOCKER::SANDBOX_NOT_RUNNING", fmt.Sprintf("Sandbox %s is %s; only a Running sandbox can be paused.", sb.id, state))
		return
	}
	sb.setStateLocked("Pausing", "pause_requested", "")
	s.mu.Unlock()
	signalAll(sb.id, syscall.SIGSTOP)
	time.AfterFunc(50*time.Millisecond, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sb.state == "Pausing" {
			sb.setStateLocked("Paused", "", "")
		}
	})
	w.WriteHeader(http.StatusAccepted)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	if sb.state != "Paused" {
		state := sb.state
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "DOCKER::SANDBOX_NOT_PAUSED", fmt.Sprintf("Sandbox %s is %s; only a Paused sandbox can be resumed.", sb.id, state))
		return
	}
	sb.setStateLocked("Resuming", "resume_requested", "")
	s.mu.Unlock()
	signalAll(sb.id, syscall.SIGCONT)
	time.AfterFunc(50*time.Millisecond, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if sb.state == "Resuming" {
			sb.setStateLocked("Running", "", "")
		}
	})
	w.WriteHeader(http.StatusAccepted)
}

func signalAll(id string, sig syscall.Signal) {
	for _, pid := range procfs.FindByEnv(markerEnv, id) {
		syscall.Kill(pid, sig)
	}
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ExpiresAt *string `json:"expiresAt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		write422(w, validationError{Type: "json_invalid", Loc: []any{"body"}, Msg: "JSON decode error: " + err.Error()})
		return
	}
	if body.ExpiresAt == nil {
		write422(w, validationError{Type: "missing", Loc: []any{"body", "expiresAt"}, Msg: "Field required"})
		return
	}
	exp, err := time.Parse(time.RFC3339Nano, *body.ExpiresAt)
	if err != nil {
		write422(w, validationError{Type: "datetime_from_date_parsing", Loc: []any{"body", "expiresAt"}, Msg: "Input should be a valid datetime", Input: *body.ExpiresAt})
		return
	}
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case sb.expiresAt.IsZero():
		writeError(w, http.StatusConflict, "DOCKER::INVALID_EXPIRATION", fmt.Sprintf("Sandbox %s is missing expiration metadata and cannot be renewed safely.", sb.id))
		return
	case !exp.After(time.Now()):
		writeError(w, http.StatusBadRequest, "DOCKER::INVALID_EXPIRATION", "New expiration time must be in the future.")
		return
	}
	sb.expiresAt = exp.UTC()
	if sb.expiry != nil {
		sb.expiry.Reset(time.Until(exp))
	}
	writeJSON(w, http.StatusOK, map[string]string{"expiresAt": sb.expiresAt.Format(time.RFC3339Nano)})
}
