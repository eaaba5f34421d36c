package native

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// Config is the [sandbox.native] table. Every field has a working zero
// value; see the package documentation for the TOML form.
type Config struct {
	// Host is the engine's address ("unix:///var/run/docker.sock",
	// "tcp://host:2376", ...). Empty: DOCKER_HOST, else the local socket.
	// The root config fills it from [sandbox] docker_host.
	Host string `toml:"docker_host"`
	// PullPolicy is "missing" (default: pull only images the engine lacks),
	// "always" or "never".
	PullPolicy string `toml:"pull_policy"`
	// Ports is how Spec.Ports are published, unless an entry gives a host
	// address or port itself:
	//   - "dynamic" (default): on 127.0.0.1 with ports the engine picks;
	//   - "loopback": each session gets an address of its own in
	//     127.0.0.0/8 (never 127.0.0.x) and its sandboxes publish their
	//     ports there unchanged (OpenSage's scheme, over the whole /8). A
	//     local engine only: the address is on the engine's host.
	Ports string `toml:"ports"`
	// PidsLimit applies when a Spec sets none. Zero: 4096; negative: no
	// limit.
	PidsLimit int64 `toml:"pids_limit"`
	// AllowNewPrivileges turns off the default no-new-privileges security
	// option (setuid programs such as sudo need it off).
	AllowNewPrivileges bool `toml:"allow_new_privileges"`
	// Runtime is the OCI runtime used when a Spec names none ("": the
	// engine's default, normally runc).
	Runtime string `toml:"runtime"`
	// SbxdPath is a static sbxd binary for the engine's architecture, used
	// instead of the embedded one (also: env SBX_SBXD_PATH).
	SbxdPath string `toml:"sbxd_path"`
	// EgressDNS is the DNS server ("IP" or "IP:PORT") that the enforcer
	// of a sandbox with an egress policy asks for the names the policy
	// allows. Default: the first nameserver the engine gives the
	// enforcer's container (the engine's host's, or its embedded DNS
	// server on a user-defined network).
	EgressDNS string `toml:"egress_dns"`
	// EgressSpares is how many enforcers of sandboxes with an egress
	// policy are kept started ahead, per enforcer config (image, policy,
	// network, ports, host name), for creates to claim: a create with a
	// policy then costs about what one without does. For long-running
	// processes (sbx serve, programs using the library): Close removes
	// them, and gc those of a process that died. 0 (default): none.
	EgressSpares int `toml:"egress_spares"`
}

// Pull policies.
const (
	PullMissing = "missing"
	PullAlways  = "always"
	PullNever   = "never"
)

// Port publishing modes.
const (
	PortsDynamic  = "dynamic"
	PortsLoopback = "loopback"
)

// DefaultPidsLimit is the pids limit of a sandbox whose Spec and Config set
// none, so a fork bomb cannot take the host down.
const DefaultPidsLimit = 4096

// CheckEngineSettings checks the settings of c that every backend driving
// a Docker engine through this package shares (pull_policy, egress_dns,
// egress_spares; remotedocker passes its own on), naming table (such as
// "[sandbox.remotedocker]") in its errors.
func CheckEngineSettings(table string, c Config) error {
	switch c.PullPolicy {
	case "", PullMissing, PullAlways, PullNever:
	default:
		return fmt.Errorf("%w: %s pull_policy %q: want %q, %q or %q",
			backend.ErrInvalidConfig, table, c.PullPolicy, PullMissing, PullAlways, PullNever)
	}
	if _, ok := egressctl.DNSServer(c.EgressDNS); c.EgressDNS != "" && !ok {
		return fmt.Errorf("%w: %s egress_dns %q: %s", backend.ErrInvalidConfig, table, c.EgressDNS, egressctl.DNSServerWant)
	}
	if c.EgressSpares < 0 || c.EgressSpares > MaxEgressSpares {
		return fmt.Errorf("%w: %s egress_spares = %d: want 0 (none) to %d", backend.ErrInvalidConfig, table, c.EgressSpares, MaxEgressSpares)
	}
	return nil
}

func (c Config) validate() error {
	if err := CheckEngineSettings("[sandbox.native]", c); err != nil {
		return err
	}
	switch c.Ports {
	case "", PortsDynamic, PortsLoopback:
	default:
		return fmt.Errorf("%w: [sandbox.native] ports %q: want %q or %q", backend.ErrInvalidConfig, c.Ports, PortsDynamic, PortsLoopback)
	}
	if strings.HasPrefix(c.Host, "ssh://") {
		return fmt.Errorf("%w: [sandbox.native] docker_host %q: the native backend speaks to unix:// and tcp:// engines; use the remotedocker backend for ssh://",
			backend.ErrInvalidConfig, c.Host)
	}
	if c.Host != "" && !strings.Contains(c.Host, "://") {
		return fmt.Errorf("%w: [sandbox.native] docker_host %q: want a URL such as unix:///var/run/docker.sock or tcp://host:2376",
			backend.ErrInvalidConfig, c.Host)
	}
	return nil
}

func (c Config) pidsLimit() int64 {
	switch {
	case c.PidsLimit == 0:
		return DefaultPidsLimit
	case c.PidsLimit < 0:
		return 0
	}
	return c.PidsLimit
}

// Option configures a Backend (wiring, as opposed to Config's data).
type Option func(*Backend)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) {
		if l != nil {
			b.log = l
		}
	}
}

// WithTLSFiles makes the client speak TLS to a tcp:// engine with the CA
// certificate, client certificate and key in these files (verifying the
// engine's certificate), over what DOCKER_CERT_PATH says; remotedocker
// passes OpenSage's DOCKER_TLS_CERTDIR this way.
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(b *Backend) { b.tlsFiles = []string{caFile, certFile, keyFile} }
}

// WithDialContext makes the client reach the engine through dial (for
// instance over SSH), the way remotedocker reuses this package.
func WithDialContext(dial func(ctx context.Context, network, addr string) (net.Conn, error)) Option {
	return func(b *Backend) { b.dial = dial }
}
