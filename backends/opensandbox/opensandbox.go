package opensandbox

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Name is the backend's registry name.
const Name = "opensandbox"

// KeepAliveEntrypoint is the entrypoint of sandboxes whose Spec has no
// Command: the OpenSandbox SDKs' default, which coreutils and busybox
// images both run.
var KeepAliveEntrypoint = []string{"tail", "-f", "/dev/null"}

// Resource limits sent when a Spec sets none: the lifecycle API requires
// resourceLimits, and these are the SDKs' defaults.
const (
	DefaultCPU    = "1"
	DefaultMemory = "2Gi"
)

// envExecdToken is the variable execd reads its access token from.
const envExecdToken = "EXECD_ACCESS_TOKEN"

// Option configures a Backend.
type Option func(*Backend)

// WithLogger sets the logger (default: discard). The API key is never
// logged.
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) {
		if l != nil {
			b.log = l
		}
	}
}

// WithHTTPClient sets the HTTP client used for the lifecycle server and
// execd (default: a client of its own). Its Timeout must be zero: command
// streams last as long as their commands.
func WithHTTPClient(c *http.Client) Option {
	return func(b *Backend) {
		if c != nil {
			b.httpClient = c
			b.ownClient = false
		}
	}
}

// Backend makes sandboxes on an OpenSandbox deployment. It is safe for
// concurrent use.
type Backend struct {
	cfg        Config
	c          *client
	log        *slog.Logger
	httpClient *http.Client
	ownClient  bool
	// cleanups are the commands' scratch-file removals in flight; Close
	// waits for them (bounded), so a program that exits after Close
	// leaves none behind in its sandboxes.
	cleanups sync.WaitGroup
}

var _ backend.Backend = (*Backend)(nil)

// New checks cfg, fills its empty keys from OPEN_SANDBOX_DOMAIN,
// OPEN_SANDBOX_API_KEY and the defaults, and returns a backend. It does
// not contact the server.
func New(cfg Config, opts ...Option) (*Backend, error) {
	b := &Backend{log: slog.New(slog.DiscardHandler), ownClient: true}
	for _, o := range opts {
		o(b)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: err}
	}
	if b.httpClient == nil {
		b.httpClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	c, err := newClient(cfg, b.httpClient)
	if err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: err}
	}
	b.cfg, b.c = cfg, c
	b.log.Debug("opensandbox backend", "config", cfg)
	return b, nil
}

func (b *Backend) Name() string { return Name }

// Config returns the configuration in effect (environment and defaults
// applied), with the API key redacted.
func (b *Backend) Config() Config { return b.cfg.Redacted() }

// closeWait bounds how long Close waits for scratch-file removals.
const closeWait = 10 * time.Second

// Close waits (at most closeWait) for the removal of commands' scratch
// files still in flight, then releases idle connections. Sandboxes keep
// running.
func (b *Backend) Close() error {
	done := make(chan struct{})
	go func() { b.cleanups.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(closeWait):
		b.log.Warn("Close: removing commands' scratch files is still going on; some may be left in their sandboxes' TMPDIR")
	}
	if b.ownClient {
		b.httpClient.CloseIdleConnections()
	}
	return nil
}

// Capabilities says what an OpenSandbox sandbox can honour. Limits map to
// resourceLimits (cpu, memory, gpu by count), volumes to host and pvc
// volumes, ports to the endpoints API and users to execd's uid/gid.
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Isolation:        backend.IsolationContainer,
		RuntimeHint:      "an OpenSandbox server runs every sandbox on one runtime, its [secure_runtime] (gVisor, Kata, Firecracker): set it in the server's config",
		Egress:           true,
		Credentials:      true,
		Images:           true,
		BindVolumes:      true,
		NamedVolumes:     true,
		Ports:            true,
		User:             true,
		CPULimit:         true,
		MemoryLimit:      true,
		GPUs:             true,
		PauseKeepsMemory: b.cfg.pauseKeepsMemory(),
		Persistent:       true,
	}
}

func (b *Backend) opErr(op, id string, err error) error {
	return backend.WrapOp(op, Name, id, err)
}

// Create makes a sandbox and returns it once it is Running and its execd
// answers. Anything it made is removed again if a later step fails.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return nil, b.opErr("create", "", err)
	}
	// Credentials: checked and read before anything is made; the values
	// go to the vault once the sandbox runs (credentials.go).
	var vaultCreds []vaultCredentialJSON
	var vaultBinds []vaultBindingJSON
	if len(spec.Credentials) > 0 {
		if spec.Egress == nil {
			return nil, b.opErr("create", "", fmt.Errorf("%w: credentials need an egress policy (its sidecar's vault applies them): set egress in the entry", backend.ErrInvalidConfig))
		}
		var err error
		if vaultBinds, err = vaultBindings(spec.Credentials); err != nil {
			return nil, b.opErr("create", "", err)
		}
		if vaultCreds, err = vaultCredentials(ctx, spec.Credentials); err != nil {
			return nil, b.opErr("create", "", err)
		}
		if spec.Env, err = credentialEnv(spec); err != nil {
			return nil, b.opErr("create", "", err)
		}
	}
	req, meta, err := b.createRequest(spec)
	if err != nil {
		return nil, b.opErr("create", "", err)
	}
	var created sandboxJSON
	if err := b.c.lifecycle(ctx, http.MethodPost, "/sandboxes", nil, req, &created); err != nil {
		return nil, b.opErr("create", "", err)
	}
	if created.ID == "" {
		return nil, b.opErr("create", "", errors.New("the server accepted the sandbox but returned no id"))
	}
	b.log.Debug("sandbox accepted", "id", created.ID, "name", spec.Name, "state", created.Status.State)
	sb := b.newSandbox(created.ID, meta)
	err = sb.start(ctx, created, spec.Progress)
	if err == nil && vaultBinds != nil {
		err = b.openVault(ctx, created.ID, vaultCreds, vaultBinds)
	}
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if derr := sb.Destroy(cctx); derr != nil {
			b.log.Warn("removing a sandbox that failed to start", "id", created.ID, "err", derr)
		}
		return nil, b.opErr("create", created.ID, err)
	}
	b.log.Debug("sandbox ready", "id", created.ID, "name", spec.Name)
	return sb, nil
}

// createRequest turns spec into the lifecycle API's request and the labels
// the sandbox carries.
func (b *Backend) createRequest(spec backend.Spec) (createRequest, map[string]string, error) {
	var req createRequest
	if spec.Image == "" {
		return req, nil, fmt.Errorf("%w: no image: the opensandbox backend runs every sandbox from an image (set image or [sandbox] default_image)", backend.ErrInvalidConfig)
	}
	req.Image = imageSpec{URI: spec.Image}
	req.Entrypoint = slices.Clone(spec.Command)
	if len(req.Entrypoint) == 0 {
		req.Entrypoint = slices.Clone(KeepAliveEntrypoint)
	}
	if spec.TTL > 0 {
		secs := int(math.Ceil(spec.TTL.Seconds()))
		if secs < 60 {
			b.log.Warn("OpenSandbox timeouts are at least 60 s; using 60 s", "sandbox", spec.Name, "ttl", spec.TTL)
			secs = 60
		}
		req.Timeout = &secs
	}
	limits, err := resourceLimits(spec.Resources)
	if err != nil {
		return req, nil, err
	}
	req.ResourceLimits = limits
	vols, err := volumes(spec.Volumes)
	if err != nil {
		return req, nil, err
	}
	req.Volumes = vols
	if spec.Egress != nil {
		if req.NetworkPolicy, err = networkPolicy(*spec.Egress); err != nil {
			return req, nil, err
		}
	}
	ports, err := b.checkPorts(spec)
	if err != nil {
		return req, nil, err
	}
	nonce, err := randomHex(16)
	if err != nil {
		return req, nil, err
	}
	req.Env = maps.Clone(spec.Env)
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if _, ok := req.Env[envExecdToken]; ok {
		b.log.Warn("the entry's environment sets "+envExecdToken+"; the backend's own token replaces it", "sandbox", spec.Name)
	}
	req.Env[envExecdToken] = b.execdToken(nonce)

	labels := b.sandboxLabels(spec, nonce, ports)
	if spec.Egress != nil {
		labels[labelEgress] = "1"
	}
	md, err := encodeLabels(labels)
	if err != nil {
		return req, nil, err
	}
	req.Metadata = md
	return req, labels, nil
}

// checkPorts checks spec's ports and returns their numbers.
func (b *Backend) checkPorts(spec backend.Spec) ([]string, error) {
	var ports []string
	for _, p := range spec.Ports {
		switch {
		case p.Port < 1 || p.Port > 65535:
			return nil, fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, p.Port)
		case p.Protocol != "" && !strings.EqualFold(p.Protocol, "tcp"):
			return nil, fmt.Errorf("%w: the %s backend cannot honour ports over %s (the endpoints API is TCP only)", errors.ErrUnsupported, Name, p.Protocol)
		case p.HostPort != 0 || p.HostIP != "":
			b.log.Warn("OpenSandbox chooses where a port is reachable; the host address and port are ignored (Endpoint reports the real one)",
				"sandbox", spec.Name, "port", p.Port, "host_ip", p.HostIP, "host_port", p.HostPort)
		}
		ports = append(ports, strconv.Itoa(p.Port))
	}
	return ports, nil
}

// sandboxLabels is the metadata a sandbox carries: the entry's labels and
// ours (the execd token's nonce, the user, the ports, the working
// directory), without those the server's own fields give.
func (b *Backend) sandboxLabels(spec backend.Spec, nonce string, ports []string) map[string]string {
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	ours := map[string]string{
		backend.LabelBackend: Name,
		backend.LabelName:    spec.Name,
		backend.LabelSession: spec.Session,
		backend.LabelOwner:   spec.Owner,
		labelTokenNonce:      nonce,
		labelUser:            spec.User,
		labelPorts:           strings.Join(ports, "."),
	}
	if wd := b.workDirOf(spec); wd != "" {
		ours[labelWorkDir] = wd
	}
	for k, v := range ours {
		if v != "" {
			labels[k] = v
		} else {
			delete(labels, k)
		}
	}
	// Derived from the server's own fields on read.
	delete(labels, backend.LabelID)
	delete(labels, backend.LabelExpiresAt)
	return labels
}

// workDirOf is the working directory a spec asks for: working_dir (relative
// to request_working_directory, else /), else request_working_directory;
// "" leaves it to execd.
func (b *Backend) workDirOf(spec backend.Spec) string {
	wd := spec.WorkingDir
	switch {
	case wd == "":
		return b.cfg.RequestWorkingDirectory
	case path.IsAbs(wd):
		return path.Clean(wd)
	case b.cfg.RequestWorkingDirectory != "":
		return path.Join(b.cfg.RequestWorkingDirectory, wd)
	default:
		return path.Join("/", wd)
	}
}

// execdToken derives a sandbox's execd access token from the API key and
// the nonce kept in its metadata: any backend holding the key can talk to
// the sandbox's execd, and metadata readers (who may see Kubernetes labels
// without the key) cannot.
func (b *Backend) execdToken(nonce string) string {
	if nonce == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(b.cfg.APIKey))
	m.Write([]byte("sandboxkit execd token\x00" + nonce))
	return hex.EncodeToString(m.Sum(nil))
}

func resourceLimits(r backend.Resources) (map[string]string, error) {
	limits := map[string]string{"cpu": DefaultCPU, "memory": DefaultMemory}
	switch {
	case r.CPUs < 0:
		return nil, fmt.Errorf("%w: cpus %v must not be negative", backend.ErrInvalidConfig, r.CPUs)
	case r.CPUs > 0 && r.CPUs == math.Trunc(r.CPUs):
		limits["cpu"] = strconv.FormatFloat(r.CPUs, 'f', 0, 64)
	case r.CPUs > 0:
		limits["cpu"] = strconv.FormatInt(int64(math.Round(r.CPUs*1000)), 10) + "m"
	}
	if r.MemoryBytes < 0 {
		return nil, fmt.Errorf("%w: mem_limit %d must not be negative", backend.ErrInvalidConfig, r.MemoryBytes)
	}
	if m := r.MemoryBytes; m > 0 {
		switch {
		case m%(1<<30) == 0:
			limits["memory"] = strconv.FormatInt(m>>30, 10) + "Gi"
		case m%(1<<20) == 0:
			limits["memory"] = strconv.FormatInt(m>>20, 10) + "Mi"
		case m%(1<<10) == 0:
			limits["memory"] = strconv.FormatInt(m>>10, 10) + "Ki"
		default:
			limits["memory"] = strconv.FormatInt(m, 10)
		}
	}
	if g := r.GPUs; g != "" {
		n, err := strconv.Atoi(g)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: the %s backend cannot honour gpus %q (OpenSandbox takes a number of GPUs)", errors.ErrUnsupported, Name, g)
		}
		limits["gpu"] = g
	}
	return limits, nil
}

var dnsLabelUnsafe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-z0-9-]+`) })
var claimNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`) })

// volumes maps the spec's volumes: a bind of an absolute path to a host
// volume (a path on the OpenSandbox server's machine, allowed by its
// allowlist), a named volume to a pvc volume (a PersistentVolumeClaim on
// Kubernetes, a Docker named volume on Docker; created when missing).
func volumes(vs []backend.Volume) ([]volumeJSON, error) {
	var out []volumeJSON
	for i, v := range vs {
		name := fmt.Sprintf("v%d-%s", i, dnsLabelUnsafe().ReplaceAllString(strings.ToLower(strings.Trim(v.Target, "/")), "-"))
		name = strings.Trim(name, "-")
		if len(name) > 63 {
			name = strings.TrimRight(name[:63], "-")
		}
		vol := volumeJSON{Name: name, MountPath: v.Target, ReadOnly: v.ReadOnly}
		switch {
		case !path.IsAbs(v.Target):
			return nil, fmt.Errorf("%w: volume %q: the sandbox path must be absolute", backend.ErrInvalidConfig, v.Source+":"+v.Target)
		case v.Type == backend.VolumeNamed:
			if len(v.Source) > 253 || !claimNameRE().MatchString(v.Source) {
				return nil, fmt.Errorf("%w: volume %q: OpenSandbox volume names are lowercase letters, digits and '-' (a DNS label)",
					backend.ErrInvalidConfig, v.Source+":"+v.Target)
			}
			vol.PVC = &pvcVol{ClaimName: v.Source}
		case path.IsAbs(v.Source):
			vol.Host = &hostVol{Path: path.Clean(v.Source)}
		default:
			return nil, fmt.Errorf("%w: volume %q: a bind source must be an absolute path", backend.ErrInvalidConfig, v.Source+":"+v.Target)
		}
		out = append(out, vol)
	}
	return out, nil
}

// Get reattaches to a sandbox by ID. A sandbox that is gone or Terminated
// is backend.ErrNotFound.
func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return nil, b.opErr("get", id, fmt.Errorf("%w: malformed sandbox ID %q", backend.ErrNotFound, id))
	}
	sj, err := b.fetch(ctx, id)
	if err != nil {
		return nil, b.opErr("get", id, err)
	}
	return b.newSandbox(id, decodeLabels(sj.Metadata)), nil
}

// fetch returns the server's record of a sandbox; a Terminated one counts as
// gone.
func (b *Backend) fetch(ctx context.Context, id string) (sandboxJSON, error) {
	var sj sandboxJSON
	if err := b.c.lifecycle(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &sj); err != nil {
		return sj, err
	}
	if sj.Status.State == stateTerminated {
		return sj, fmt.Errorf("%w: sandbox %s is terminated (%s)", backend.ErrNotFound, id, statusText(sj.Status))
	}
	return sj, nil
}

// listPageSize is how many sandboxes List asks for per page (the server
// allows up to 200).
var listPageSize = 100

// maxListPages stops a server that always says there is a next page.
const maxListPages = 10000

// List returns the sandboxes this backend made that match filter, sorted by
// ID. Terminated ones are left out; Failed ones are listed (as exited) so a
// reaper can remove them. The server filters by the labels it can; the rest
// are matched here.
func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	want := maps.Clone(filter.Labels)
	if want == nil {
		want = map[string]string{}
	}
	want[backend.LabelBackend] = Name
	if filter.Session != "" {
		want[backend.LabelSession] = filter.Session
	}
	if filter.Name != "" {
		want[backend.LabelName] = filter.Name
	}
	q := url.Values{}
	q.Set("metadata", metadataFilter(want))
	q.Set("pageSize", strconv.Itoa(listPageSize))
	var out []backend.Info
	retry := listRetry{}
	for page := 1; page <= maxListPages; page++ {
		q.Set("page", strconv.Itoa(page))
		var resp listResponse
		err := b.c.lifecycle(ctx, http.MethodGet, "/sandboxes", q, nil, &resp)
		if err != nil && retry.again(ctx, err) {
			// The pages moved under us: start over.
			b.log.Debug("a sandbox vanished while the server listed them; listing again", "err", err)
			out, page = nil, 0
			continue
		}
		if err != nil {
			return nil, b.opErr("list", "", err)
		}
		for _, sj := range resp.Items {
			if sj.Status.State == stateTerminated {
				continue
			}
			info := b.info(sj, decodeLabels(sj.Metadata))
			if info.Labels[backend.LabelBackend] == Name && filter.Match(info) {
				out = append(out, info)
			}
		}
		if !resp.Pagination.HasNextPage || len(resp.Items) == 0 {
			break
		}
	}
	slices.SortFunc(out, func(x, y backend.Info) int { return strings.Compare(x.ID, y.ID) })
	out = slices.CompactFunc(out, func(x, y backend.Info) bool { return x.ID == y.ID })
	return out, nil
}

// listAttempts bounds how often List asks again after a listing raced a
// removal.
const listAttempts = 8

// listRetry paces List's retries of a listing that raced a removal: the
// Docker runtime lists the containers, then inspects each, and answers 500
// DOCKER::SANDBOX_QUERY_FAILED ("No such container") when one was removed
// in between. Asking again a moment later gets a listing.
type listRetry struct {
	attempt int
}

// again reports whether err is that race and there are attempts left, and
// waits before the next one (false when ctx ends meanwhile).
func (lr *listRetry) again(ctx context.Context, err error) bool {
	ae, ok := errors.AsType[*APIError](err)
	if !ok || ae.Status != http.StatusInternalServerError ||
		!(strings.HasSuffix(ae.Code, "SANDBOX_QUERY_FAILED") || strings.Contains(ae.Message, "No such container")) {
		return false
	}
	lr.attempt++
	if lr.attempt >= listAttempts {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(min(25*time.Millisecond<<lr.attempt, time.Second)):
		return true
	}
}

// info turns the server's record into an Info.
func (b *Backend) info(sj sandboxJSON, decoded map[string]string) backend.Info {
	labels := map[string]string{}
	for k, v := range decoded {
		if !strings.HasPrefix(k, labelPrefix) {
			labels[k] = v
		}
	}
	labels[backend.LabelID] = sj.ID
	if !sj.ExpiresAt.IsZero() {
		labels[backend.LabelExpiresAt] = sj.ExpiresAt.UTC().Format(time.RFC3339)
	}
	info := backend.Info{
		ID:        sj.ID,
		Backend:   Name,
		Name:      labels[backend.LabelName],
		Session:   labels[backend.LabelSession],
		Owner:     labels[backend.LabelOwner],
		State:     stateOf(sj.Status.State),
		Labels:    labels,
		CreatedAt: sj.CreatedAt.Time,
		ExpiresAt: sj.ExpiresAt.Time,
		WorkDir:   decoded[labelWorkDir],
	}
	if sj.Image != nil {
		info.Image = sj.Image.URI
	}
	return info
}

func stateOf(s string) backend.State {
	switch s {
	case statePending:
		return backend.StateCreating
	case stateRunning, statePausing:
		return backend.StateRunning
	case statePaused, stateResuming:
		return backend.StatePaused
	case stateStopping, stateTerminated, stateFailed:
		return backend.StateExited
	}
	return backend.StateUnknown
}

func statusText(st sandboxStatus) string {
	parts := []string{"state " + st.State}
	if st.Reason != "" {
		parts = append(parts, "reason "+st.Reason)
	}
	if st.Message != "" {
		parts = append(parts, st.Message)
	}
	return strings.Join(parts, ": ")
}

func randomHex(n int) (string, error) {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf), nil
}
