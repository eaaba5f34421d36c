package remotedocker

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"

	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
)

// Name is the backend's registry name.
const Name = "remotedocker"

// Backend runs sandboxes on a remote Docker Engine: the native backend's
// engine code over an SSH (or TLS) connection, with its own port endpoints
// and errors that name remotedocker.
type Backend struct {
	cfg        Config
	nat        *native.Backend
	cli        *client.Client // the same engine, for port bindings
	ssh        *sshConn       // nil for tcp://
	remoteHost string
	ports      string
	tunnels    *tunnels
	log        *slog.Logger
}

var (
	_ backend.Backend       = (*Backend)(nil)
	_ backend.VolumeManager = (*Backend)(nil)
	_ backend.Claimer       = (*Backend)(nil)
	_ backend.CachePruner   = (*Backend)(nil)
)

// New returns a backend for the engine cfg.Host (else DOCKER_HOST) names.
// It reads ~/.ssh/config and checks the configuration but does not
// connect: an unreachable host, a refused host key or a missing Docker
// socket shows up as an error from the first call that needs the engine
// (wrapping backend.ErrUnavailable, or backend.ErrInvalidConfig for keys).
func New(cfg Config, opts ...Option) (*Backend, error) {
	o := options{log: slog.New(slog.DiscardHandler)}
	for _, opt := range opts {
		opt(&o)
	}
	fail := func(err error) (*Backend, error) {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: err}
	}
	if err := cfg.validate(); err != nil {
		return fail(err)
	}
	ep, err := parseHost(cfg.Host)
	if err != nil {
		return fail(err)
	}
	b := &Backend{cfg: cfg, log: o.log, ports: cmp(cfg.Ports, PortsRemote), remoteHost: cmp(cfg.RemoteHost, os.Getenv(EnvRemoteHost))}
	nopts := []native.Option{native.WithLogger(o.log)}
	var copts []client.Opt
	switch ep.scheme {
	case "ssh":
		if p := os.Getenv("DOCKER_CERT_PATH"); p != "" {
			// The Docker client would wrap the SSH streams in TLS (and dial
			// attach streams itself, locally) when it finds TLS settings.
			return fail(invalid("docker_host %q is ssh://, but DOCKER_CERT_PATH=%s asks for TLS, which only tcp:// engines speak: unset DOCKER_CERT_PATH (and DOCKER_TLS_VERIFY) for this program", ep.raw, p))
		}
		settings, err := loadSSHSettings(cfg.SSHConfig)
		if err != nil {
			return fail(err)
		}
		target, err := resolveTarget(settings, ep.host, ep.user, ep.port, 0)
		if err != nil {
			return fail(err)
		}
		b.ssh = newSSHConn(target, cfg, o.log)
		if b.remoteHost == "" {
			b.remoteHost = target.host
			if len(target.jumps) > 0 && b.ports == PortsRemote {
				o.log.Warn("remotedocker: docker_host is reached through ProxyJump, but published ports will be dialled at its HostName directly; set docker_remote_host, or ports = \"tunnel\"",
					"host", target.host)
			}
		}
		host := "unix://" + b.ssh.socket
		nopts = append(nopts, native.WithDialContext(b.ssh.dialSocket), native.WithAgentDialer(b.ssh.dialPath), native.WithHostAddrs(b.ssh.hostAddrs))
		copts = []client.Opt{client.WithHost(host), client.WithDialContext(b.ssh.dialSocket)}
		b.nat, err = native.New(cfg.nativeConfig(host), nopts...)
		if err != nil {
			return fail(b.rewrap(err))
		}
	case "tcp":
		if b.ports == PortsTunnel {
			return fail(invalid("ports = %q needs an ssh:// docker_host (the tunnel is the SSH connection); %q is tcp://", PortsTunnel, ep.raw))
		}
		tlsFiles, err := tlsCertDirFiles()
		if err != nil {
			return fail(err)
		}
		if tlsFiles == nil && os.Getenv("DOCKER_CERT_PATH") == "" {
			b.log.Warn("remotedocker: tcp:// engine without TLS (neither DOCKER_TLS_CERTDIR nor DOCKER_CERT_PATH is set): anyone who can reach it controls it", "docker_host", ep.raw)
		}
		if b.remoteHost == "" {
			b.remoteHost = ep.host
		}
		copts = []client.Opt{client.FromEnv, client.WithHost(ep.raw)}
		if tlsFiles != nil {
			copts = append(copts, client.WithTLSClientConfig(tlsFiles[0], tlsFiles[1], tlsFiles[2]))
			nopts = append(nopts, native.WithTLSFiles(tlsFiles[0], tlsFiles[1], tlsFiles[2]))
		}
		b.nat, err = native.New(cfg.nativeConfig(ep.raw), nopts...)
		if err != nil {
			return fail(b.rewrap(err))
		}
	}
	b.cli, err = client.NewClientWithOpts(append(copts, client.WithAPIVersionNegotiation())...)
	if err != nil {
		b.nat.Close()
		return fail(fmt.Errorf("%w: docker client: %s", backend.ErrInvalidConfig, err.Error()))
	}
	b.tunnels = newTunnels(b)
	return b, nil
}

func (b *Backend) Name() string { return Name }

// RemoteHost is the address published ports are reached at in "remote"
// ports mode.
func (b *Backend) RemoteHost() string { return b.remoteHost }

// Close ends the SSH connection and every tunnel; sandboxes keep running
// on the remote.
func (b *Backend) Close() error {
	b.tunnels.closeAll()
	err := b.nat.Close()
	b.cli.Close()
	if b.ssh != nil {
		b.ssh.Close()
	}
	return err
}

// ready connects (or finds the connection up) before a call goes through
// the Docker client, so that connection failures keep their own message.
func (b *Backend) ready(ctx context.Context) error {
	if b.ssh == nil {
		return nil
	}
	return b.ssh.check(ctx)
}

// rewrap renames native's *backend.OpError as remotedocker's, so errors
// name the backend the caller chose.
func (b *Backend) rewrap(err error) error {
	if err == nil {
		return nil
	}
	if oe, ok := err.(*backend.OpError); ok && oe.Backend == native.Name {
		c := *oe
		c.Backend = Name
		return &c
	}
	return err
}

// opErr wraps err in remotedocker's *backend.OpError; file operations'
// *fs.PathError stay as they are, as the contract asks.
func (b *Backend) opErr(op, id string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(*fs.PathError); ok {
		return err
	}
	return backend.WrapOp(op, Name, id, b.rewrap(err))
}

// Capabilities are native's: the remote engine honours the same options.
// Bind volumes name paths on the remote host.
func (b *Backend) Capabilities() backend.Capabilities {
	return b.nat.Capabilities()
}

// CheckSpec runs Create's checks of spec on the remote engine (native's),
// making nothing (see backend.SpecChecker).
func (b *Backend) CheckSpec(ctx context.Context, spec backend.Spec) error {
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return b.opErr("check", "", err)
	}
	if err := b.ready(ctx); err != nil {
		return b.opErr("check", "", err)
	}
	return b.rewrap(b.nat.CheckSpec(ctx, spec))
}

// Create makes a sandbox on the remote engine. In "remote" ports mode, a
// port whose entry names no host address is published on all the remote's
// interfaces (so RemoteHost reaches it); in "tunnel" mode on its loopback.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return nil, b.opErr("create", "", err)
	}
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("create", "", err)
	}
	if b.ports == PortsRemote && len(spec.Ports) > 0 {
		spec.Ports = slices.Clone(spec.Ports)
		for i := range spec.Ports {
			if spec.Ports[i].HostIP == "" {
				spec.Ports[i].HostIP = "0.0.0.0"
			}
		}
	}
	sb, err := b.nat.Create(ctx, spec)
	if err != nil {
		return nil, b.opErr("create", "", err)
	}
	return b.wrap(sb), nil
}

func (b *Backend) wrap(sb backend.Sandbox) *Sandbox {
	s := &Sandbox{b: b, in: sb}
	if c, ok := sb.(interface{ ContainerID() string }); ok {
		s.cid = c.ContainerID()
	}
	return s
}

// Get reattaches to a sandbox on the remote engine by ID.
func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("get", id, err)
	}
	sb, err := b.nat.Get(ctx, id)
	if err != nil {
		return nil, b.opErr("get", id, err)
	}
	return b.wrap(sb), nil
}

// List finds sandboxes on the remote engine by their labels.
func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("list", "", err)
	}
	infos, err := b.nat.List(ctx, filter)
	if err != nil {
		return nil, b.opErr("list", "", err)
	}
	for i := range infos {
		infos[i].Backend = Name
	}
	return infos, nil
}

// Claim hands a pool member on the remote engine to one claimer, as
// native.Backend.Claim does (a claim record, then a rename).
func (b *Backend) Claim(ctx context.Context, id string, c backend.Claim) (backend.Info, error) {
	if err := b.ready(ctx); err != nil {
		return backend.Info{}, b.opErr("claim", id, err)
	}
	info, err := b.nat.Claim(ctx, id, c)
	if err != nil {
		return backend.Info{}, b.opErr("claim", id, err)
	}
	info.Backend = Name
	return info, nil
}

// CreateVolume makes a volume on the remote engine (through native's
// engine code over the SSH link); a FromPath on this machine is uploaded
// into it through the Engine API.
func (b *Backend) CreateVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	if err := b.ready(ctx); err != nil {
		return "", b.opErr("create volume", "", err)
	}
	name, err := b.nat.CreateVolume(ctx, spec)
	return name, b.opErr("create volume", "", err)
}

func (b *Backend) RemoveVolume(ctx context.Context, name string) error {
	if err := b.ready(ctx); err != nil {
		return b.opErr("remove volume", "", err)
	}
	return b.opErr("remove volume", "", b.nat.RemoveVolume(ctx, name))
}

// PruneCaches removes the remote engine's unused sbxd volumes of other
// builds and the fork images no container uses any more; see
// native.Backend.PruneCaches.
func (b *Backend) PruneCaches(ctx context.Context, dryRun bool) ([]string, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("prune caches", "", err)
	}
	names, err := b.nat.PruneCaches(ctx, dryRun)
	return names, b.opErr("prune caches", "", err)
}

var _ backend.EgressController = (*Backend)(nil)

// SetEgress replaces the policy of sandbox id on the remote engine
// (native.Backend.SetEgress: an exec in its enforcer's container).
// RotateCredentials is native's, on the remote engine (see
// backend.CredentialRotator).
func (b *Backend) RotateCredentials(ctx context.Context, id string, creds []backend.Credential) error {
	if err := b.ready(ctx); err != nil {
		return b.opErr("rotate credentials", id, err)
	}
	return b.rewrap(b.nat.RotateCredentials(ctx, id, creds))
}

var _ backend.CredentialRotator = (*Backend)(nil)

func (b *Backend) SetEgress(ctx context.Context, id string, policy backend.Egress) error {
	if err := b.ready(ctx); err != nil {
		return b.opErr("set egress", id, err)
	}
	return b.rewrap(b.nat.SetEgress(ctx, id, policy))
}

// EgressStatus returns the policy and latest denials of sandbox id on the
// remote engine.
func (b *Backend) EgressStatus(ctx context.Context, id string) (backend.EgressStatus, error) {
	if err := b.ready(ctx); err != nil {
		return backend.EgressStatus{}, b.opErr("egress status", id, err)
	}
	st, err := b.nat.EgressStatus(ctx, id)
	return st, b.rewrap(err)
}

func (b *Backend) ListVolumes(ctx context.Context, filter backend.Filter) ([]backend.VolumeInfo, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("list volumes", "", err)
	}
	vols, err := b.nat.ListVolumes(ctx, filter)
	return vols, b.opErr("list volumes", "", err)
}
