package lite

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// Config is the [sandbox.lite] table (also accepted as
// [sandbox.agentdocker-lite]). Every field has a working zero value; see the
// package documentation for the TOML form.
type Config struct {
	// Runtime is the OCI runtime binary: "runc" (default), "crun", "runsc"
	// or a path to one of them.
	Runtime string `toml:"runtime"`
	// RuntimeRoot is where the runtime keeps its container state (its
	// --root). Default: /run/sandboxkit/lite/<runtime name>, so the
	// sandboxes never mix with other users of the same runtime.
	RuntimeRoot string `toml:"runtime_root"`
	// StateDir holds one directory per sandbox (meta.json, the OCI bundle,
	// the overlay's upper layer). Default: $XDG_STATE_HOME/sandboxkit/lite,
	// else ~/.local/state/sandboxkit/lite.
	StateDir string `toml:"state_dir"`
	// ImageDir is the cache of unpacked images, one directory per image
	// digest. Default: $XDG_CACHE_HOME/sandboxkit/lite/images, else
	// ~/.cache/sandboxkit/lite/images.
	ImageDir string `toml:"image_dir"`
	// Images maps image names used in sandbox entries to image sources
	// ("dir:/srv/rootfs/ubuntu", "docker-archive:/srv/ubuntu.tar", ...), so
	// an OpenSage config naming "ubuntu:20.04" runs without a registry.
	Images map[string]string `toml:"images"`
	// Rootless is "auto" (default: rootful as root, rootless in a user
	// namespace otherwise), "force" (rootless only: refuse to run as root)
	// or "off" (rootful only).
	Rootless string `toml:"rootless"`
	// Network is the network of an entry that names none: "none" (default,
	// a new network namespace with only loopback) or "host".
	Network string `toml:"network"`
	// PidsLimit applies when a Spec sets none. Zero: 4096; negative: no
	// limit.
	PidsLimit int64 `toml:"pids_limit"`
	// PullPolicy for registry images: "missing" (default: use the cached
	// digest of a tag if there is one), "always" or "never".
	PullPolicy string `toml:"pull_policy"`
	// EngineSocket is where an image name (no transport prefix) is looked
	// up before a registry: "" asks the local engines (DOCKER_HOST when it
	// is a unix socket, /var/run/docker.sock, Podman's rootful and
	// rootless sockets) and exports the image from the first that holds
	// it; a socket path (or unix:// URL) asks that engine alone; "off"
	// asks none. pull_policy "always" skips the engines.
	EngineSocket string `toml:"engine_socket"`
	// InsecureRegistries are registries ("127.0.0.1:5000") spoken to over
	// plain HTTP.
	InsecureRegistries []string `toml:"insecure_registries"`
	// EgressBlock is the IPv4 block whose /30s the sandboxes with an
	// egress policy get (one each: the host end and the sandbox's eth0).
	// Default DefaultEgressBlock; at least a /24, at most a /8.
	EgressBlock string `toml:"egress_block"`
	// EgressDNS is the DNS server ("IP" or "IP:PORT") that the enforcer
	// of a sandbox with an egress policy asks for the names the policy
	// allows. Default: the first nameserver of the host's
	// /etc/resolv.conf.
	EgressDNS string `toml:"egress_dns"`
	// SbxdPath is a static sbxd binary used instead of the embedded one
	// (also: env SBX_SBXD_PATH).
	SbxdPath string `toml:"sbxd_path"`
	// DefaultImage is the image of an entry that names none (the root
	// config fills it from [sandbox] default_image).
	DefaultImage string `toml:"-"`
}

// Rootless modes.
const (
	RootlessAuto  = "auto"
	RootlessForce = "force"
	RootlessOff   = "off"
)

// Network modes.
const (
	NetworkNone = "none"
	NetworkHost = "host"
)

// Pull policies.
const (
	PullMissing = "missing"
	PullAlways  = "always"
	PullNever   = "never"
)

// DefaultPidsLimit is the pids limit of a sandbox whose Spec and Config set
// none, so a fork bomb cannot take the host down.
const DefaultPidsLimit = 4096

func (c Config) validate() error {
	bad := func(key, value string, want ...string) error {
		return fmt.Errorf("%w: [sandbox.lite] %s %q: want %s", backend.ErrInvalidConfig, key, value, strings.Join(want, ", "))
	}
	switch c.Rootless {
	case "", RootlessAuto, RootlessForce, RootlessOff:
	default:
		return bad("rootless", c.Rootless, `"auto"`, `"force"`, `"off"`)
	}
	switch c.Network {
	case "", NetworkNone, NetworkHost:
	default:
		return bad("network", c.Network, `"none"`, `"host"`)
	}
	if c.EgressBlock != "" {
		if _, err := c.egressBlock(); err != nil {
			return err
		}
	}
	if c.EgressDNS != "" {
		if _, err := c.egressDNS(); err != nil {
			return err
		}
	}
	switch c.PullPolicy {
	case "", PullMissing, PullAlways, PullNever:
	default:
		return bad("pull_policy", c.PullPolicy, `"missing"`, `"always"`, `"never"`)
	}
	for _, dir := range []struct{ key, value string }{{"state_dir", c.StateDir}, {"image_dir", c.ImageDir}, {"runtime_root", c.RuntimeRoot}} {
		// Overlay mount options are separated by commas and lower
		// layers by colons.
		if strings.ContainsAny(dir.value, ",:") {
			return fmt.Errorf("%w: [sandbox.lite] %s %q: the path may not contain ',' or ':' (overlayfs mount options cannot hold them)",
				backend.ErrInvalidConfig, dir.key, dir.value)
		}
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

func (c Config) network() string {
	if c.Network == "" {
		return NetworkNone
	}
	return c.Network
}

// DefaultStateDir is $XDG_STATE_HOME/sandboxkit/lite, else
// ~/.local/state/sandboxkit/lite.
func DefaultStateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "sandboxkit", "lite"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: lite backend: no state dir (set [sandbox.lite] state_dir, XDG_STATE_HOME or HOME): %v", backend.ErrInvalidConfig, err)
	}
	return filepath.Join(home, ".local", "state", "sandboxkit", "lite"), nil
}

// DefaultImageDir is $XDG_CACHE_HOME/sandboxkit/lite/images, else
// ~/.cache/sandboxkit/lite/images.
func DefaultImageDir() (string, error) {
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "sandboxkit", "lite", "images"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: lite backend: no image dir (set [sandbox.lite] image_dir, XDG_CACHE_HOME or HOME): %v", backend.ErrInvalidConfig, err)
	}
	return filepath.Join(home, ".cache", "sandboxkit", "lite", "images"), nil
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

// egressBlock is EgressBlock parsed (see there).
func (c Config) egressBlock() (netip.Prefix, error) {
	s := cmp.Or(c.EgressBlock, DefaultEgressBlock)
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		return netip.Prefix{}, fmt.Errorf("%w: [sandbox.lite] egress_block %q: want an IPv4 block such as %q (%v)", backend.ErrInvalidConfig, s, DefaultEgressBlock, err)
	case !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 24:
		return netip.Prefix{}, fmt.Errorf("%w: [sandbox.lite] egress_block %q: want an IPv4 block from /8 to /24, such as %q", backend.ErrInvalidConfig, s, DefaultEgressBlock)
	}
	return p.Masked(), nil
}

// egressDNS is EgressDNS as "IP:PORT", else the host's first nameserver.
func (c Config) egressDNS() (string, error) {
	if c.EgressDNS == "" {
		ns, err := egressctl.Nameserver("/etc/resolv.conf")
		if err != nil {
			return "", fmt.Errorf("%w (set [sandbox.lite] egress_dns)", err)
		}
		return ns, nil
	}
	if ap, ok := egressctl.DNSServer(c.EgressDNS); ok {
		return ap, nil
	}
	return "", fmt.Errorf("%w: [sandbox.lite] egress_dns %q: %s", backend.ErrInvalidConfig, c.EgressDNS, egressctl.DNSServerWant)
}
