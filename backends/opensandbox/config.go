package opensandbox

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Environment variables read when the config leaves the matching key empty
// (the names the OpenSandbox SDKs and auxilia use).
const (
	EnvDomain = "OPEN_SANDBOX_DOMAIN"
	EnvAPIKey = "OPEN_SANDBOX_API_KEY"
)

// Defaults of Config fields left at their zero value.
const (
	DefaultDomain            = "localhost:8080"
	DefaultProtocol          = "http"
	DefaultRequestTimeoutSec = 30
	DefaultTimeoutSec        = 1800
	DefaultExecdPort         = 44772
	DefaultReadyTimeoutSec   = 300
)

// Config is the [sandbox.opensandbox] table. It takes OpenSage's keys
// unchanged, so an OpenSage config file loads as it is; every key is
// optional.
type Config struct {
	// Domain is the lifecycle server's host[:port][/path] (a scheme, if
	// written, sets Protocol). Empty: OPEN_SANDBOX_DOMAIN, else
	// localhost:8080 (the SDKs' default).
	Domain string `toml:"domain"`
	// Protocol is "http" (default) or "https".
	Protocol string `toml:"protocol"`
	// APIKey is sent as OPEN-SANDBOX-API-KEY to the lifecycle server (and
	// to execd only through the server proxy). Empty: OPEN_SANDBOX_API_KEY.
	// It never appears in logs or errors; see Config.Redacted.
	APIKey string `toml:"api_key"`
	// RequestTimeoutSec bounds each non-streaming request (default 30).
	// Command streams and file transfers are bounded by their context only.
	RequestTimeoutSec int `toml:"request_timeout_sec"`
	// UseServerProxy reaches execd through the lifecycle server
	// (/sandboxes/{id}/proxy/{port}) instead of directly, for clients that
	// cannot reach the sandboxes' network.
	UseServerProxy bool `toml:"use_server_proxy"`
	// DefaultTimeoutSec is the sandbox TTL (OpenSandbox's timeout) of
	// entries without a ttl (default 1800). Create sends a sandbox's
	// Spec.TTL as the timeout; the root config fills Spec.TTL from the
	// entry's ttl, else [sandbox] default_ttl when written, else this key
	// (through DefaultTTL). A Spec without TTL gets no expiry.
	DefaultTimeoutSec int `toml:"default_timeout_sec"`
	// ExecdPort is the port execd listens on inside every sandbox (default
	// 44772).
	ExecdPort int `toml:"execd_port"`
	// RequestWorkingDirectory is the working directory of sandboxes whose
	// entry sets no working_dir. Empty: execd's own working directory (the
	// image's WORKDIR, as a probe at Create finds it).
	RequestWorkingDirectory string `toml:"request_working_directory"`
	// ReadyTimeoutSec bounds how long Create waits for a sandbox to reach
	// Running and for its execd to answer /ping (default 300). Not an
	// OpenSage key.
	ReadyTimeoutSec int `toml:"ready_timeout_sec"`

	// The keys below describe the OpenSandbox deployment in OpenSage files
	// (how OpenSage provisions shared storage next to it). They are
	// accepted so those files load, and are informational: the lifecycle
	// API decides where sandboxes run. RuntimeType "kubernetes" only tells
	// Capabilities that pausing does not keep memory.
	RuntimeType      string `toml:"runtime_type"` // "docker" (default) | "kubernetes"
	DockerHost       string `toml:"docker_host"`
	DockerRemoteHost string `toml:"docker_remote_host"`
	Namespace        string `toml:"namespace"`
	Context          string `toml:"context"`
	Kubeconfig       string `toml:"kubeconfig"`
}

// withDefaults fills empty keys from the environment and the defaults and
// checks the result.
func (c Config) withDefaults() (Config, error) {
	if c.Domain == "" {
		c.Domain = os.Getenv(EnvDomain)
	}
	if c.APIKey == "" {
		c.APIKey = os.Getenv(EnvAPIKey)
	}
	if c.Domain == "" {
		c.Domain = DefaultDomain
	}
	if scheme, rest, ok := strings.Cut(c.Domain, "://"); ok {
		if c.Protocol != "" && !strings.EqualFold(c.Protocol, scheme) {
			return c, fmt.Errorf("%w: [sandbox.opensandbox] domain %q has scheme %s but protocol is %q",
				backend.ErrInvalidConfig, c.Domain, scheme, c.Protocol)
		}
		c.Protocol, c.Domain = scheme, rest
	}
	c.Domain = strings.TrimRight(c.Domain, "/")
	c.Protocol = strings.ToLower(c.Protocol)
	if c.Protocol == "" {
		c.Protocol = DefaultProtocol
	}
	if c.Protocol != "http" && c.Protocol != "https" {
		return c, fmt.Errorf("%w: [sandbox.opensandbox] protocol %q: want http or https", backend.ErrInvalidConfig, c.Protocol)
	}
	if _, err := url.Parse(c.Protocol + "://" + c.Domain); err != nil || c.Domain == "" {
		return c, fmt.Errorf("%w: [sandbox.opensandbox] domain %q: want host[:port] (from the key or %s)", backend.ErrInvalidConfig, c.Domain, EnvDomain)
	}
	if c.RequestTimeoutSec == 0 {
		c.RequestTimeoutSec = DefaultRequestTimeoutSec
	}
	if c.DefaultTimeoutSec == 0 {
		c.DefaultTimeoutSec = DefaultTimeoutSec
	}
	if c.ExecdPort == 0 {
		c.ExecdPort = DefaultExecdPort
	}
	if c.ReadyTimeoutSec == 0 {
		c.ReadyTimeoutSec = DefaultReadyTimeoutSec
	}
	switch {
	case c.RequestTimeoutSec < 0:
		return c, fmt.Errorf("%w: [sandbox.opensandbox] request_timeout_sec %d: want a positive number of seconds", backend.ErrInvalidConfig, c.RequestTimeoutSec)
	case c.ReadyTimeoutSec < 0:
		return c, fmt.Errorf("%w: [sandbox.opensandbox] ready_timeout_sec %d: want a positive number of seconds", backend.ErrInvalidConfig, c.ReadyTimeoutSec)
	case c.ExecdPort < 1 || c.ExecdPort > 65535:
		return c, fmt.Errorf("%w: [sandbox.opensandbox] execd_port %d: want 1-65535", backend.ErrInvalidConfig, c.ExecdPort)
	}
	if wd := c.RequestWorkingDirectory; wd != "" && !strings.HasPrefix(wd, "/") {
		return c, fmt.Errorf("%w: [sandbox.opensandbox] request_working_directory %q: want an absolute path inside the sandbox", backend.ErrInvalidConfig, wd)
	}
	switch strings.ToLower(c.RuntimeType) {
	case "", "docker", "kubernetes", "k8s":
	default:
		return c, fmt.Errorf("%w: [sandbox.opensandbox] runtime_type %q: want docker or kubernetes", backend.ErrInvalidConfig, c.RuntimeType)
	}
	return c, nil
}

// DefaultTTL is default_timeout_sec as a duration (1800 s when unset): the
// TTL OpenSage gives sandboxes of this backend.
func (c Config) DefaultTTL() time.Duration {
	if c.DefaultTimeoutSec <= 0 {
		return DefaultTimeoutSec * time.Second
	}
	return time.Duration(c.DefaultTimeoutSec) * time.Second
}

const redacted = "[redacted]"

// Redacted returns a copy of c whose APIKey is replaced by "[redacted]"
// when set, for printing (sbx config check) and logging.
func (c Config) Redacted() Config {
	if c.APIKey != "" {
		c.APIKey = redacted
	}
	return c
}

// String describes c without its API key.
func (c Config) String() string {
	r := c.Redacted()
	key := "(none)"
	if r.APIKey != "" {
		key = r.APIKey
	}
	return fmt.Sprintf("opensandbox{domain=%q protocol=%q api_key=%s request_timeout_sec=%d use_server_proxy=%t default_timeout_sec=%d execd_port=%d request_working_directory=%q runtime_type=%q}",
		r.Domain, r.Protocol, key, r.RequestTimeoutSec, r.UseServerProxy, r.DefaultTimeoutSec, r.ExecdPort, r.RequestWorkingDirectory, r.RuntimeType)
}

// GoString keeps %#v from printing the API key.
func (c Config) GoString() string { return c.String() }

// LogValue keeps slog from logging the API key.
func (c Config) LogValue() slog.Value {
	r := c.Redacted()
	return slog.GroupValue(
		slog.String("domain", r.Domain),
		slog.String("protocol", r.Protocol),
		slog.String("api_key", r.APIKey),
		slog.Bool("use_server_proxy", r.UseServerProxy),
		slog.Int("execd_port", r.ExecdPort),
	)
}

func (c Config) baseURL() string { return c.Protocol + "://" + c.Domain }

func (c Config) requestTimeout() time.Duration {
	return time.Duration(c.RequestTimeoutSec) * time.Second
}

func (c Config) readyTimeout() time.Duration {
	return time.Duration(c.ReadyTimeoutSec) * time.Second
}

func (c Config) pauseKeepsMemory() bool {
	switch strings.ToLower(c.RuntimeType) {
	case "kubernetes", "k8s":
		return false
	}
	return true
}
