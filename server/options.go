package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

// Environment variables the server reads.
const (
	// EnvAPIKey is the API key callers must send; it wins over
	// [sandbox.serve] api_key.
	EnvAPIKey = "SBX_API_KEY"
	// EnvAdminKey is the operator's key for the admin endpoints (egress
	// policies); it wins over [sandbox.serve] admin_key.
	EnvAdminKey = "SBX_ADMIN_KEY"
	// EnvVolumeMounts adds volumes to every sandbox: comma-separated
	// "host:sandbox[:ro|rw]" specs, as mount_host_paths.
	EnvVolumeMounts = "SBX_VOLUME_MOUNTS"
)

// Defaults of Options (and of [sandbox.serve]).
const (
	DefaultListen       = "127.0.0.1:8765"
	DefaultIdleTTL      = 30 * time.Minute
	DefaultMaxLifetime  = 24 * time.Hour
	DefaultOutputLimit  = 256 << 10
	DefaultReapInterval = 30 * time.Second
	DefaultInstance     = "serve"

	// The HTTP server's limits (see Options.MaxConns and below).
	DefaultMaxConns          = 2048
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultBodyTimeout       = 10 * time.Second
	DefaultBodyMinRate       = 16 << 10 // bytes a second
	DefaultBodyBudget        = 128 << 20
	DefaultBodyWait          = 5 * time.Second
)

// Labels the server puts on the sandboxes it makes, next to the backend's
// own. Ownership lives here, in the backend, so it survives a restart of the
// server.
const (
	// LabelInstance names the server (Options.Instance) that made the
	// sandbox; a server adopts only its own sandboxes at start.
	LabelInstance = "sandboxkit.serve.instance"
	// LabelConversation is the owning conversation's OwnerKey.
	LabelConversation = "sandboxkit.serve.conversation"
	// LabelType is the create_sandbox type (the config entry).
	LabelType = "sandboxkit.serve.type"
	// LabelIdleTTL is the sandbox's idle TTL in seconds.
	LabelIdleTTL = "sandboxkit.serve.idle-ttl"
)

// Options configure a Server. Backend and Spec are required; every other
// field has a working zero value.
type Options struct {
	// Backend makes and finds the sandboxes. The server does not close it.
	Backend backend.Backend
	// Spec returns the Spec create_sandbox uses for a type (a config
	// entry name, such as "main").
	Spec func(typ string) (backend.Spec, error)
	// Provision, when set, prepares a new sandbox of a type before
	// create_sandbox returns it (the main initializer's packages on first
	// boot); an error removes the sandbox and is the call's error.
	Provision func(ctx context.Context, typ string, sb backend.Sandbox) error
	// Types are the types create_sandbox accepts, the first one being its
	// default. Empty: just "main".
	Types []string
	// Volumes are mounted into every sandbox, after the Spec's own (a
	// target the Spec mounts already is left to the Spec).
	Volumes []backend.Volume
	// Pools are the warm pools the server keeps while it runs, by type (a
	// type of Types): create_sandbox of a pooled type claims a ready
	// sandbox, made from the type's Spec and Provision before any call
	// asked for it, and answers in milliseconds. The backend must be a
	// backend.Claimer. Ready sandboxes are removed in Close.
	Pools map[string]config.PoolConfig

	// IdleTTL: a sandbox without tool calls for this long is removed.
	IdleTTL time.Duration
	// MaxLifetime: a sandbox is removed this long after it was made,
	// however busy; also the backend TTL the sandbox is created with.
	MaxLifetime time.Duration
	// ExecuteTimeout is execute's timeout when the call gives none
	// (fileops.DefaultExecuteTimeout when zero).
	ExecuteTimeout time.Duration
	// OutputLimit caps the bytes one execute or job_output call returns.
	OutputLimit int64
	// DeleteOnShutdown removes every sandbox the server knows in Close.
	DeleteOnShutdown bool
	// OSBEgressBound, when set, bounds the egress policies agents set
	// through OpenSandbox's API (a create's networkPolicy, the egress
	// API): its deny rules are always added, and with a deny-by-default
	// bound only its allowed targets may be allowed.
	OSBEgressBound *backend.Egress
	// OSBNoAgentEgress refuses creates that carry a networkPolicy.
	OSBNoAgentEgress bool
	// OSBAllowedHostPaths are the host folders under which a create's
	// host volumes may lie (none: host volumes are refused).
	OSBAllowedHostPaths []string
	// OSBExecdPort is the sandbox port at which the OpenSandbox API
	// serves execd (default OSBExecdPort, execd's own): clients
	// configured with another execd_port find it there.
	OSBExecdPort int

	// APIKey, when set, is required on every HTTP request but /health. A
	// key callers could not send in a header (whitespace around it, control
	// characters) is refused by New.
	APIKey string
	// AdminKey, when set, opens the operator's endpoints (/admin/...:
	// sandboxes' egress policies) to callers that send it; agents hold
	// APIKey, which does not open them. It must differ from APIKey.
	AdminKey string
	// Instance names this server in its sandboxes' labels (default
	// "serve"). At start a server adopts the sandboxes of its instance
	// (Adopt) and gives them a fresh idle window.
	Instance string

	// The HTTP server's limits, so that callers without the key, and
	// callers that flood, cannot take the connections, file descriptors,
	// memory or time that answers need (/health and the calls of others
	// included). Zero is the default; a negative value turns a limit
	// off. Handler applies the body limits; Serve all of them.

	// MaxConns caps the connections Serve holds at once (default
	// DefaultMaxConns, or half the file descriptors the process may hold
	// if that is fewer, so the cap comes before Accept's "too many open
	// files"). A connection past it closes the one that has
	// waited longest for a request (idle, or still sending its headers),
	// if that one has waited a second; else it is answered 503 Service
	// Unavailable, with Retry-After, and closed.
	MaxConns int
	// MaxConnsPerClient caps the connections of one client address (an
	// IPv6 client's /64) (default a quarter of MaxConns): past it, the
	// client's own connection that has waited longest for a request (a
	// second at least) is closed, else the new one is answered 429 Too
	// Many Requests, with Retry-After, and closed.
	MaxConnsPerClient int
	// ReadHeaderTimeout bounds the time a request's headers may take to
	// arrive (default DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection that has waited this
	// long for its next request (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// BodyTimeout and BodyMinRate bound the time a request body may take
	// to arrive, from when the server starts reading it: BodyTimeout, plus
	// its bytes at BodyMinRate bytes a second (defaults DefaultBodyTimeout,
	// DefaultBodyMinRate). A body that falls behind is cut: the request is
	// answered 408 Request Timeout and the connection closed. Only request
	// bodies are timed: answers, MCP's event streams, WebSocket terminals
	// and long commands are not. Either negative: bodies are not timed.
	BodyTimeout time.Duration
	BodyMinRate int64
	// BodyBudget bounds the bytes of request bodies the server holds at
	// once, over all requests (default DefaultBodyBudget). Before its body
	// is read, an authenticated request reserves its Content-Length (a
	// body sent without one, its route's limit, such as MaxJSONBodyBytes)
	// until it is answered; one that finds no room waits up to BodyWait
	// (default DefaultBodyWait; negative: no wait), then is answered 503
	// Service Unavailable with Retry-After. A body larger than the budget
	// reserves all of it.
	// The heap grows by up to about four times what is reserved (a JSON
	// body and the string decoded from it are live while its tool runs,
	// and the heap runs up to twice what is live between collections):
	// about 500 MiB at the default, measured with 16 bodies of 60 MiB at
	// once. Bodies streamed on (file uploads, the proxy to a sandbox's
	// port) reserve nothing.
	BodyBudget int64
	BodyWait   time.Duration

	// AuditFile, when set, is where the audit trail goes (one JSON line
	// per tool call, terminal, OpenSandbox API change and admin action;
	// see AuditEntry), rotated once it reaches AuditMaxBytes (default
	// DefaultAuditMaxBytes) into AuditFile.1 ... AuditFile.N, keeping
	// AuditKeep old files (default DefaultAuditKeep; negative: none).
	// Without it the latest entries are kept in memory only. Either way
	// GET /admin/audit reads them.
	AuditFile     string
	AuditMaxBytes int64
	AuditKeep     int

	// Logger receives warnings and errors (default: discard).
	Logger *slog.Logger
	// Now is the clock the TTLs use (default time.Now); tests inject one.
	Now func() time.Time
	// ReapInterval is how often the reaper looks for expired sandboxes
	// (default 30s; negative: no reaper goroutine, call Reap yourself).
	ReapInterval time.Duration
	// NoAgent keeps the server from starting sbxd in sandboxes: commands
	// and files take each backend's own path and background jobs run in
	// the server.
	NoAgent bool
	// AgentOptions are passed to sbxd.Wrap.
	AgentOptions []sbxd.Option
}

func (o *Options) setDefaults() error {
	if o.Backend == nil {
		return fmt.Errorf("server: Options.Backend is nil: %w", backend.ErrInvalidConfig)
	}
	if o.Spec == nil {
		return fmt.Errorf("server: Options.Spec is nil: %w", backend.ErrInvalidConfig)
	}
	if len(o.Types) == 0 {
		o.Types = []string{"main"}
	}
	for _, typ := range slices.Sorted(maps.Keys(o.Pools)) {
		if !slices.Contains(o.Types, typ) {
			return fmt.Errorf("server: Options.Pools has a pool of type %q, which is not one of Types (%s): %w",
				typ, strings.Join(o.Types, ", "), backend.ErrInvalidConfig)
		}
	}
	o.IdleTTL = cmp.Or(o.IdleTTL, DefaultIdleTTL)
	o.MaxLifetime = cmp.Or(o.MaxLifetime, DefaultMaxLifetime)
	o.OutputLimit = cmp.Or(o.OutputLimit, DefaultOutputLimit)
	o.Instance = cmp.Or(o.Instance, DefaultInstance)
	o.OSBExecdPort = cmp.Or(o.OSBExecdPort, OSBExecdPort)
	o.ReapInterval = cmp.Or(o.ReapInterval, DefaultReapInterval)
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
		if n := fileLimit() / 2; n > 0 && n < DefaultMaxConns {
			o.MaxConns = int(n)
		}
	}
	if o.MaxConnsPerClient == 0 {
		o.MaxConnsPerClient = max(o.MaxConns/4, 1) // no cap with MaxConns off (negative)
	}
	o.ReadHeaderTimeout = cmp.Or(o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, DefaultIdleTimeout)
	o.BodyTimeout = cmp.Or(o.BodyTimeout, DefaultBodyTimeout)
	o.BodyMinRate = cmp.Or(o.BodyMinRate, DefaultBodyMinRate)
	o.BodyBudget = cmp.Or(o.BodyBudget, DefaultBodyBudget)
	o.BodyWait = cmp.Or(o.BodyWait, DefaultBodyWait)
	o.AuditMaxBytes = cmp.Or(o.AuditMaxBytes, DefaultAuditMaxBytes)
	o.AuditKeep = cmp.Or(o.AuditKeep, DefaultAuditKeep)
	o.AuditKeep = max(o.AuditKeep, 0)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	switch {
	case o.IdleTTL < 0:
		return fmt.Errorf("server: idle_ttl must be positive, got %s: %w", o.IdleTTL, backend.ErrInvalidConfig)
	case o.MaxLifetime < 0:
		return fmt.Errorf("server: max_lifetime must be positive, got %s: %w", o.MaxLifetime, backend.ErrInvalidConfig)
	case o.IdleTTL > o.MaxLifetime:
		return fmt.Errorf("server: idle_ttl (%s) is longer than max_lifetime (%s): raise max_lifetime or lower idle_ttl: %w",
			o.IdleTTL, o.MaxLifetime, backend.ErrInvalidConfig)
	case apiKeyProblem(o.APIKey) != "":
		return fmt.Errorf("server: Options.APIKey %s: no caller could send it: %w", apiKeyProblem(o.APIKey), backend.ErrInvalidConfig)
	case apiKeyProblem(o.AdminKey) != "":
		return fmt.Errorf("server: Options.AdminKey %s: no caller could send it: %w", apiKeyProblem(o.AdminKey), backend.ErrInvalidConfig)
	case o.AdminKey != "" && o.AdminKey == o.APIKey:
		return fmt.Errorf("server: the admin key is the API key, so every agent would hold it: set $%s (or [sandbox.serve] admin_key) to another key: %w", EnvAdminKey, backend.ErrInvalidConfig)
	case o.OSBExecdPort < 1 || o.OSBExecdPort > 65535 || o.OSBExecdPort == OSBEgressPort:
		return fmt.Errorf("server: Options.OSBExecdPort %d: want a port other than the egress API's %d: %w", o.OSBExecdPort, OSBEgressPort, backend.ErrInvalidConfig)
	case !validInstance(o.Instance):
		return fmt.Errorf("server: instance %q: want 1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (it is a label value on every backend): %w",
			o.Instance, backend.ErrInvalidConfig)
	}
	return nil
}

// validInstance reports whether s is a label value every backend takes
// (Kubernetes' rules are the strictest).
func validInstance(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return alnum(s[0]) && alnum(s[len(s)-1])
}

// ConfigOptions returns the Options a config gives: its [sandbox.serve]
// settings, $SBX_API_KEY, the execute timeout of [sandbox.tools], the
// entries as types ("main" first when there is one) with the pools of
// those that have a [pool] table, and the volumes of $SBX_VOLUME_MOUNTS (mount_host_paths are in every entry's Spec already).
// Volume specs whose host path is missing are skipped: warnings says so.
// The caller sets Backend.
func ConfigOptions(cfg *config.Config) (opts Options, warnings []string, err error) {
	sc := cfg.Sandbox.Serve
	// Each type is its entry as its initializer makes it, provisioned
	// (main: pip packages) before create_sandbox answers.
	l := &session.Launcher{Config: cfg}
	opts = Options{
		Spec: func(typ string) (backend.Spec, error) {
			spec, _, err := l.Standalone(typ)
			return spec, err
		},
		Provision: func(ctx context.Context, typ string, sb backend.Sandbox) error {
			_, provision, err := l.Standalone(typ)
			if err != nil {
				return err
			}
			return provision(ctx, sb)
		},
		IdleTTL:          sc.IdleTTL,
		MaxLifetime:      sc.MaxLifetime,
		ExecuteTimeout:   cfg.Sandbox.ExecuteTimeout,
		OutputLimit:      int64(sc.OutputLimit),
		DeleteOnShutdown: sc.DeleteOnShutdown,
		Instance:         sc.Instance,
		OSBNoAgentEgress: sc.AgentEgress != nil && !*sc.AgentEgress,
		AuditMaxBytes:    int64(sc.AuditMaxSize),
		AuditKeep:        sc.AuditKeep,
	}
	if sc.AuditFile != "" {
		opts.AuditFile = sc.AuditFile
		if !filepath.IsAbs(opts.AuditFile) {
			opts.AuditFile = filepath.Join(cfg.Dir, opts.AuditFile)
		}
	}
	for _, p := range sc.AllowedHostPaths {
		if !filepath.IsAbs(p) {
			return opts, warnings, fmt.Errorf("[sandbox.serve] allowed_host_paths: %q is not an absolute path", p)
		}
		opts.OSBAllowedHostPaths = append(opts.OSBAllowedHostPaths, filepath.Clean(p))
	}
	if l := sc.AgentEgressLimit; l != nil {
		opts.OSBEgressBound = &backend.Egress{Default: cmp.Or(l.Default, "deny"), Allow: slices.Clone(l.Allow), Deny: slices.Clone(l.Deny)}
	}
	key, source := os.Getenv(EnvAPIKey), "$"+EnvAPIKey
	if key == "" {
		key, source = sc.APIKey, "[sandbox.serve] api_key"
		if cfg.Path != "" {
			source += " in " + cfg.Path
		}
	}
	opts.APIKey, warnings, err = cleanAPIKey(key, source)
	if err != nil {
		return opts, warnings, err
	}
	key, source = os.Getenv(EnvAdminKey), "$"+EnvAdminKey
	if key == "" {
		key, source = sc.AdminKey, "[sandbox.serve] admin_key"
	}
	var more []string
	opts.AdminKey, more, err = cleanAPIKey(key, source)
	warnings = append(warnings, more...)
	if err != nil {
		return opts, warnings, err
	}
	types := cfg.SandboxNames()
	if i := slices.Index(types, "main"); i > 0 {
		types = slices.Concat([]string{"main"}, slices.Delete(slices.Clone(types), i, i+1))
	}
	opts.Types = types
	for _, typ := range types {
		e, err := cfg.Entry(typ)
		if err != nil {
			return opts, warnings, err
		}
		if set := e.PoolSettings(); set != nil {
			if opts.Pools == nil {
				opts.Pools = map[string]config.PoolConfig{}
			}
			opts.Pools[typ] = *set
		}
	}
	vols, volWarnings, err := ParseVolumeMounts(os.Getenv(EnvVolumeMounts), cfg.Dir)
	opts.Volumes, warnings = vols, append(warnings, volWarnings...)
	if err != nil {
		return opts, warnings, fmt.Errorf("$%s: %w", EnvVolumeMounts, err)
	}
	return opts, warnings, nil
}

// headerSpace is the whitespace HTTP strips around a header value (and
// that a key read from a file often ends with).
const headerSpace = " \t\r\n\v\f"

// apiKeyProblem says why callers could never send key in a header, or
// returns "".
func apiKeyProblem(key string) string {
	switch {
	case strings.Trim(key, headerSpace) != key:
		return "has leading or trailing whitespace, which HTTP strips from a header"
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }):
		return "contains control characters, which a header cannot carry"
	}
	return ""
}

// cleanAPIKey returns the key a config gives, from source ($SBX_API_KEY or
// api_key): whitespace around it (a newline from a key file) is trimmed
// with a warning, since no caller could send it; a key that is only
// whitespace, or has control characters inside, is an error.
func cleanAPIKey(key, source string) (string, []string, error) {
	var warnings []string
	if trimmed := strings.Trim(key, headerSpace); trimmed != key {
		if trimmed == "" {
			return "", nil, fmt.Errorf("%s is only whitespace: set a key, or leave it empty to serve without one: %w", source, backend.ErrInvalidConfig)
		}
		warnings = append(warnings, fmt.Sprintf("%s has whitespace around it (%d bytes), which HTTP clients cannot send: using it trimmed",
			source, len(key)-len(trimmed)))
		key = trimmed
	}
	if p := apiKeyProblem(key); p != "" {
		return "", warnings, fmt.Errorf("%s %s: no caller could send it; fix the key: %w", source, p, backend.ErrInvalidConfig)
	}
	return key, warnings, nil
}

// ParseVolumeMounts parses comma-separated "host:sandbox[:ro|rw]" specs
// ("~" expanded, relative host paths against dir). Specs whose host path
// does not exist are left out with a warning; a malformed spec is an error.
func ParseVolumeMounts(list, dir string) (vols []backend.Volume, warnings []string, err error) {
	targets := map[string]string{}
	for raw := range strings.SplitSeq(list, ",") {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		v, skip, err := config.ParseVolumeSpec(raw, dir)
		switch {
		case err != nil:
			return nil, warnings, fmt.Errorf("volume %q: %v: %w", raw, err, backend.ErrInvalidConfig)
		case skip != "":
			warnings = append(warnings, fmt.Sprintf("volume %q: %s (skipped)", raw, skip))
		case targets[v.Target] != "":
			return nil, warnings, fmt.Errorf("volume %q: %s is already mounted by %q: %w", raw, v.Target, targets[v.Target], backend.ErrInvalidConfig)
		default:
			targets[v.Target] = raw
			vols = append(vols, v)
		}
	}
	return vols, warnings, nil
}

// OwnerKey is the value of LabelConversation for a conversation ("mcp:" and
// the MCP session ID, "conv:" and an X-Conversation-Id, ...): a hash, so
// it suits every backend's label rules and does not show the conversation's
// name to whoever can list the backend.
func OwnerKey(conv string) string {
	sum := sha256.Sum256([]byte(conv))
	return hex.EncodeToString(sum[:16])
}
