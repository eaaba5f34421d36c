package remotedocker

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
)

// Config is the [sandbox.remotedocker] table. Only the engine's address is
// required; see the package documentation for the TOML form.
type Config struct {
	// Host is the engine: "ssh://[user@]host[:port]" (host may be a
	// ~/.ssh/config alias) or "tcp://host:2376" (TLS from
	// DOCKER_TLS_CERTDIR, else DOCKER_CERT_PATH and DOCKER_TLS_VERIFY).
	// Empty: DOCKER_HOST. The root config fills it from [sandbox]
	// docker_host.
	Host string `toml:"docker_host"`
	// RemoteHost is the address a host program dials for ports published
	// on the remote in "remote" ports mode. Empty: DOCKER_REMOTE_HOST, else
	// the host of Host (after ~/.ssh/config's HostName). The root config
	// fills it from [sandbox] docker_remote_host.
	RemoteHost string `toml:"docker_remote_host"`
	// Ports is how published ports reach the host program:
	//   - "remote" (default): published on the remote's interfaces with
	//     ports the engine picks, reached at RemoteHost:port;
	//   - "tunnel": published on the remote's 127.0.0.1 and forwarded
	//     through the SSH connection to a 127.0.0.1 listener here (remotes
	//     behind a firewall; ssh:// only).
	Ports string `toml:"ports"`
	// RemoteSocket is the engine's Unix socket on the remote (ssh://).
	// Default /var/run/docker.sock; rootless Docker: /run/user/UID/docker.sock.
	RemoteSocket string `toml:"remote_socket"`
	// KnownHosts is a known_hosts file checked besides ~/.ssh/known_hosts
	// (or ~/.ssh/config's UserKnownHostsFile) and /etc/ssh/ssh_known_hosts.
	KnownHosts string `toml:"known_hosts"`
	// IdentityFile is a private key tried (after the ssh-agent's keys)
	// before ~/.ssh/config's IdentityFile and the default ~/.ssh/id_*.
	IdentityFile string `toml:"identity_file"`
	// SSHConfig is the OpenSSH client config read for the host (HostName,
	// User, Port, IdentityFile, IdentitiesOnly, ProxyJump, HostKeyAlias,
	// UserKnownHostsFile, ConnectTimeout, ServerAliveInterval,
	// ServerAliveCountMax). Default ~/.ssh/config, plus
	// /etc/ssh/ssh_config; "none" reads neither.
	SSHConfig string `toml:"ssh_config"`
	// InsecureIgnoreHostKey accepts any host key: anyone on the path can
	// then impersonate the server. For throwaway hosts only; every
	// connection logs a warning.
	InsecureIgnoreHostKey bool `toml:"insecure_ignore_host_key"`

	// The native backend's settings, applied to the remote engine.
	PullPolicy         string `toml:"pull_policy"`
	PidsLimit          int64  `toml:"pids_limit"`
	AllowNewPrivileges bool   `toml:"allow_new_privileges"`
	Runtime            string `toml:"runtime"`
	SbxdPath           string `toml:"sbxd_path"`
	// EgressDNS: the DNS server enforcers of egress policies ask, as on
	// native (on the remote host's network).
	EgressDNS string `toml:"egress_dns"`
	// EgressSpares: enforcers kept started ahead on the remote engine,
	// as on native.
	EgressSpares int `toml:"egress_spares"`
}

// OpenSage's environment variables, read when the config leaves the
// setting empty (after [sandbox] docker_remote_host; before the standard
// DOCKER_CERT_PATH).
const (
	// EnvRemoteHost is docker_remote_host's fallback.
	EnvRemoteHost = "DOCKER_REMOTE_HOST"
	// EnvTLSCertDir is a folder holding ca.pem, cert.pem and key.pem: a
	// tcp:// engine is then spoken to over TLS with that client
	// certificate, and its certificate is verified against ca.pem. It wins
	// over DOCKER_CERT_PATH; ssh:// engines do not read it.
	EnvTLSCertDir = "DOCKER_TLS_CERTDIR"
)

// tlsCertDirFiles returns the CA, certificate and key files of
// DOCKER_TLS_CERTDIR (nil when it is unset), checking that each exists.
func tlsCertDirFiles() ([]string, error) {
	dir := os.Getenv(EnvTLSCertDir)
	if dir == "" {
		return nil, nil
	}
	var files []string
	for _, name := range []string{"ca.pem", "cert.pem", "key.pem"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return nil, invalid("%s=%s: want ca.pem, cert.pem and key.pem in it: %v (unset it to speak plain TCP, or DOCKER_CERT_PATH's TLS)", EnvTLSCertDir, dir, err)
		}
		files = append(files, p)
	}
	return files, nil
}

// Port modes.
const (
	PortsRemote = "remote"
	PortsTunnel = "tunnel"
)

// DefaultRemoteSocket is the engine's socket on the remote host.
const DefaultRemoteSocket = "/var/run/docker.sock"

// Option configures a Backend (wiring, as opposed to Config's data).
type Option func(*options)

type options struct {
	log *slog.Logger
}

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.log = l
		}
	}
}

// endpoint is a parsed docker_host.
type endpoint struct {
	scheme string // "ssh" or "tcp"
	user   string // ssh: as written ("" lets ~/.ssh/config or $USER decide)
	host   string // as written: an address or an ~/.ssh/config alias
	port   int    // 0: not written
	raw    string
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: [sandbox.remotedocker] "+format, append([]any{backend.ErrInvalidConfig}, args...)...)
}

// parseHost reads docker_host (or DOCKER_HOST when it is empty).
func parseHost(h string) (endpoint, error) {
	from := "docker_host"
	if h == "" {
		h, from = os.Getenv("DOCKER_HOST"), "DOCKER_HOST"
	}
	if h == "" {
		return endpoint{}, invalid(`docker_host is not set (and neither is DOCKER_HOST): want "ssh://user@host" or "tcp://host:2376"`)
	}
	u, err := url.Parse(h)
	if err == nil && (u.Scheme == "unix" || u.Scheme == "npipe") {
		return endpoint{}, invalid("%s %q is a local engine: use the native backend, or ssh://user@host for a remote one", from, h)
	}
	if err != nil || u.Host == "" || u.Opaque != "" {
		return endpoint{}, invalid(`%s %q: want "ssh://[user@]host[:port]" or "tcp://host:2376"`, from, h)
	}
	ep := endpoint{scheme: u.Scheme, host: u.Hostname(), raw: h}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return endpoint{}, invalid("%s %q: bad port %q", from, h, p)
		}
		ep.port = n
	}
	switch u.Scheme {
	case "ssh":
		if u.Path != "" && u.Path != "/" {
			return endpoint{}, invalid("%s %q: an ssh:// host has no path (set remote_socket for the engine's socket on the remote)", from, h)
		}
		if u.User != nil {
			ep.user = u.User.Username()
			if _, has := u.User.Password(); has {
				return endpoint{}, invalid("%s %q: passwords are not supported; use ssh-agent or an identity file", from, h)
			}
		}
	case "tcp":
		if u.User != nil {
			return endpoint{}, invalid("%s %q: a tcp:// host has no user", from, h)
		}
	default:
		return endpoint{}, invalid(`%s %q: unsupported scheme %q (want "ssh" or "tcp")`, from, h, u.Scheme)
	}
	return ep, nil
}

// hostPort joins a host and port for dialing and for messages.
func hostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func (c Config) validate() error {
	// The engine's settings are native's, checked by native's rules.
	if err := native.CheckEngineSettings("[sandbox.remotedocker]", c.nativeConfig("")); err != nil {
		return err
	}
	switch c.Ports {
	case "", PortsRemote, PortsTunnel:
	default:
		return invalid("ports %q: want %q or %q", c.Ports, PortsRemote, PortsTunnel)
	}
	if c.RemoteSocket != "" && !strings.HasPrefix(c.RemoteSocket, "/") {
		return invalid("remote_socket %q: want an absolute path on the remote host", c.RemoteSocket)
	}
	return nil
}

// nativeConfig is the native backend's config for the remote engine at
// host: the settings native and remotedocker share, passed on.
func (c Config) nativeConfig(host string) native.Config {
	return native.Config{
		Host:               host,
		PullPolicy:         c.PullPolicy,
		Ports:              native.PortsDynamic,
		PidsLimit:          c.PidsLimit,
		AllowNewPrivileges: c.AllowNewPrivileges,
		Runtime:            c.Runtime,
		SbxdPath:           c.SbxdPath,
		EgressDNS:          c.EgressDNS,
		EgressSpares:       c.EgressSpares,
	}
}
