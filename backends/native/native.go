package native

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/embedbin"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// labelCPUSet carries a CPU set from the config (config.LabelCPUSet:
// backend.Spec has no field for it) to HostConfig.CpusetCpus.
const labelCPUSet = backend.LabelPrefix + "cpuset"

// Name is the backend's registry name.
const Name = "native"

// Paths inside every sandbox.
const (
	sbxdDir  = "/.sbx"
	sbxdPath = "/.sbx/sbxd"
	// envExecID is the marker sbxd exec gives a command's processes.
	envExecID = "SBX_EXEC_ID"
	// labelWorkDir records the sandbox's working directory for List.
	labelWorkDir = "sandboxkit.native.workdir"
)

// Backend runs sandboxes as containers on one Docker Engine API.
type Backend struct {
	cfg  Config
	cli  *client.Client
	log  *slog.Logger
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// tlsFiles are the CA, certificate and key files of WithTLSFiles.
	tlsFiles []string
	// agentDial reaches a path on the engine's host (WithAgentDialer).
	agentDial func(ctx context.Context, path string) (net.Conn, error)
	// hostAddrs lists the engine host's addresses (WithHostAddrs).
	hostAddrs hostAddrCache

	probe    factsProbe
	pullLock sync.Map   // image ref -> *sync.Mutex: one pull per image at a time
	builds   buildLocks // one build per tag at a time
	sbxdMu   sync.Mutex // serialises filling sbxd volumes
	sbxdVols sync.Map   // names of sbxd volumes known to be filled
	sbxdCopy bool       // tests: always copy sbxd into containers
	// tests: image saves through the engine only (see storesave.go)
	engineSave bool

	settleMu sync.Mutex
	settled  atomic.Bool // the client's API version is negotiated

	renames sync.WaitGroup // claims' renames, which Close waits for
	spares  *spareSet      // egress enforcers started ahead (nil: none)
}

type daemonFacts struct {
	arch     string // GOARCH name
	runtimes []string
	// defaultRuntime is the runtime of containers that name none;
	// runtimeArgs are the flags the engine gives each runtime.
	defaultRuntime string
	runtimeArgs    map[string][]string
	// podman: the engine is Podman's Docker-compatible API, which (in
	// Podman 4) ignores a container's HostConfig.Runtime: every container
	// runs on defaultRuntime.
	podman bool
	driver string // storage driver ("overlay2")
	root   string // the engine's data folder (/var/lib/docker)
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend for the engine cfg.Host (else DOCKER_HOST, else the
// local socket). It does not contact the engine: an engine that is down
// shows up as an error wrapping backend.ErrUnavailable from the first call
// that needs it.
func New(cfg Config, opts ...Option) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: err}
	}
	b := &Backend{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	if cfg.EgressSpares > 0 {
		b.spares = newSpareSet(cfg.EgressSpares)
	}
	for _, o := range opts {
		o(b)
	}
	copts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		copts = append(copts, client.WithHost(cfg.Host))
	}
	if b.dial != nil {
		copts = append(copts, client.WithDialContext(b.dial))
	}
	if f := b.tlsFiles; len(f) == 3 {
		copts = append(copts, client.WithTLSClientConfig(f[0], f[1], f[2]))
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: fmt.Errorf("%w: docker client: %s", backend.ErrInvalidConfig, err.Error())}
	}
	b.cli = cli
	return b, nil
}

func (b *Backend) Name() string { return Name }

// settle has the client negotiate its API version before a call that may
// run alongside others on a fresh client. The Docker client negotiates on
// its first request, but ContainerList, VolumeList, VolumeRemove,
// NetworkCreate and others read the version before sending theirs (to
// encode filters and options), which races with another goroutine's first
// request. A failed ping leaves it to the next call.
func (b *Backend) settle(ctx context.Context) {
	if b.settled.Load() {
		return
	}
	b.settleMu.Lock()
	defer b.settleMu.Unlock()
	if b.settled.Load() {
		return
	}
	if ping, err := b.cli.Ping(ctx); err == nil {
		b.cli.NegotiateAPIVersionPing(ping)
		b.settled.Store(true)
	}
}

// Close releases the client's connections; sandboxes keep running.
func (b *Backend) Close() error {
	done := make(chan struct{})
	go func() { b.renames.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		b.log.Warn("closing with claims' renames still running")
	}
	b.closeSpares()
	return b.cli.Close()
}

// How long the engine is asked for its facts: a probe runs in the
// background, bounded by factsTimeout, and callers wait for it only as long
// as their own context (Capabilities, which has none, at most capsWait). A
// failed probe is remembered for factsRetryAfter, so that Capabilities with
// the engine down answers at once instead of asking again; work that needs
// the engine (Create, volumes) always starts a fresh probe.
var (
	factsTimeout    = 30 * time.Second
	capsWait        = 2 * time.Second
	factsRetryAfter = 30 * time.Second
)

// factsProbe is the engine's facts, asked once: at most one Info call is in
// flight, and no lock is held while it runs.
type factsProbe struct {
	mu       sync.Mutex
	facts    *daemonFacts  // nil until an answer came
	err      error         // the last probe's failure
	failedAt time.Time     // when it failed
	running  chan struct{} // closed when the probe in flight ends; nil: none
	// slow: a Capabilities call gave up waiting for the probe in flight;
	// the next ones do not wait for it again.
	slow bool
}

// errProbeSlow: Capabilities does not wait for a probe that is slow.
var errProbeSlow = errors.New("the engine has not answered yet")

// facts returns what Create needs to know about the engine, asking it once.
// A failure is not kept for this caller: it asks again (once per probe,
// whoever else is waiting).
func (b *Backend) facts(ctx context.Context) (*daemonFacts, error) {
	return b.waitFacts(ctx, false)
}

// waitFacts waits for the engine's facts until ctx ends. useFailure: a
// failure younger than factsRetryAfter is the answer, no new probe.
func (b *Backend) waitFacts(ctx context.Context, useFailure bool) (*daemonFacts, error) {
	p := &b.probe
	p.mu.Lock()
	switch {
	case p.facts != nil:
		f := p.facts
		p.mu.Unlock()
		return f, nil
	case p.running != nil && useFailure && p.slow:
		p.mu.Unlock()
		return nil, errProbeSlow
	case p.running != nil:
	case useFailure && p.err != nil && time.Since(p.failedAt) < factsRetryAfter:
		err := p.err
		p.mu.Unlock()
		return nil, err
	default:
		p.running, p.slow = make(chan struct{}), false
		go b.runProbe(p.running)
	}
	running := p.running
	p.mu.Unlock()
	select {
	case <-running:
	case <-ctx.Done():
		if useFailure {
			p.mu.Lock()
			if p.running == running {
				p.slow = true
			}
			p.mu.Unlock()
		}
		return nil, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.facts != nil {
		return p.facts, nil
	}
	return nil, p.err
}

// runProbe asks the engine for its facts and records the answer.
func (b *Backend) runProbe(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), factsTimeout)
	defer cancel()
	var f *daemonFacts
	info, err := b.cli.Info(ctx)
	if err == nil {
		f = &daemonFacts{arch: sbxdbin.NormalizeArch(info.Architecture), driver: info.Driver, root: info.DockerRootDir,
			defaultRuntime: info.DefaultRuntime}
		f.runtimeArgs = map[string][]string{}
		for name, rt := range info.Runtimes {
			f.runtimes = append(f.runtimes, name)
			f.runtimeArgs[name] = rt.Args
		}
		sort.Strings(f.runtimes)
		if v, verr := b.cli.ServerVersion(ctx); verr == nil {
			f.podman = slices.ContainsFunc(v.Components, func(c types.ComponentVersion) bool { return c.Name == "Podman Engine" })
		}
	} else {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: the Docker engine at %s did not answer within %s", backend.ErrUnavailable, b.cli.DaemonHost(), factsTimeout)
		}
		err = b.translate(err)
		b.log.Debug("asking the engine for its facts", "err", err)
	}
	p := &b.probe
	p.mu.Lock()
	defer p.mu.Unlock()
	p.facts, p.err, p.failedAt, p.running = f, err, time.Now(), nil
	close(done)
}

func (b *Backend) Capabilities() backend.Capabilities {
	caps := backend.Capabilities{
		Isolation:        backend.IsolationContainer,
		Egress:           true,
		Credentials:      true,
		Images:           true,
		NetworkModes:     []string{"none", "bridge", "host", "*"},
		BindVolumes:      true,
		NamedVolumes:     true,
		Ports:            true,
		User:             true,
		CPULimit:         true,
		MemoryLimit:      true,
		PidsLimit:        true,
		GPUs:             true,
		ShmSize:          true,
		Privileged:       true,
		CapAdd:           true,
		CapDrop:          true,
		SecurityOpt:      true,
		ReadOnlyRootfs:   true,
		Platform:         true,
		ContainerName:    true,
		Hostname:         true,
		ExtraHosts:       true,
		ImageCommand:     true,
		Build:            true,
		AttachExisting:   true,
		PauseKeepsMemory: true,
		Persistent:       true,
	}
	// The runtimes are the engine's; without an answer (soon), allow the
	// usual default so a Spec naming none is still accepted.
	ctx, cancel := context.WithTimeout(context.Background(), capsWait)
	defer cancel()
	caps.RuntimeHint = runtimeHint
	if f, err := b.waitFacts(ctx, true); err == nil {
		caps.Isolation = backend.RuntimeIsolation(f.defaultRuntime)
		caps.Runtimes = offeredRuntimes(f.runtimes)
		if f.podman {
			// It would run every container on its default runtime
			// whatever the Spec says: offer no choice.
			caps.Runtimes, caps.RuntimeHint = nil, podmanRuntimeHint
		}
	} else {
		caps.Runtimes = []string{"runc"}
	}
	return caps
}

func newID() string {
	var buf [6]byte
	rand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}

var notNameChar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-zA-Z0-9_.-]+`) })

// containerName is spec.ContainerName, else sbx-<session>-<name>-<id>, with
// characters Docker does not allow in names replaced.
func containerName(spec backend.Spec, id string) string {
	if spec.ContainerName != "" {
		return spec.ContainerName
	}
	parts := []string{"sbx"}
	for _, p := range []string{spec.Session, spec.Name} {
		if p = strings.Trim(notNameChar().ReplaceAllString(p, "-"), "-."); p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(append(parts, id), "-")
}

func (b *Backend) labels(spec backend.Spec, id string, now time.Time) map[string]string {
	l := maps.Clone(spec.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[backend.LabelID] = id
	l[backend.LabelBackend] = Name
	set := func(k, v string) {
		if v != "" {
			l[k] = v
		} else {
			delete(l, k)
		}
	}
	set(backend.LabelName, spec.Name)
	set(backend.LabelSession, spec.Session)
	set(backend.LabelOwner, spec.Owner)
	delete(l, labelWorkDir)
	if spec.TTL > 0 {
		l[backend.LabelExpiresAt] = now.Add(spec.TTL).UTC().Format(time.RFC3339)
	} else {
		delete(l, backend.LabelExpiresAt)
	}
	return l
}

// Create makes and starts a container for spec. The container's PID 1 is
// sbxd init, copied in before the start: it keeps the sandbox alive (no
// command), or runs the entry's command or the image's own one.
func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	fail := func(err error) (backend.Sandbox, error) { return nil, b.opErr("create", "", err) }
	if err := b.checkSpec(spec); err != nil {
		return fail(err)
	}
	if spec.Existing != "" {
		return b.attachExisting(ctx, spec)
	}
	runtime, err := b.runtimeFor(ctx, spec)
	if err != nil {
		return fail(err)
	}
	spec.Runtime = runtime
	if spec.Build != nil && spec.Image == "" {
		return fail(fmt.Errorf("%w: Spec.Build needs Spec.Image, the name to give the built image", backend.ErrInvalidConfig))
	}
	if spec.Image == "" {
		return fail(fmt.Errorf("%w: the native backend needs an image (set image in the sandbox entry or [sandbox] default_image)", backend.ErrInvalidConfig))
	}
	if spec.Command != nil && spec.ImageCommand {
		return fail(fmt.Errorf("%w: Spec sets both Command and ImageCommand", backend.ErrInvalidConfig))
	}
	facts, err := b.facts(ctx)
	if err != nil {
		return fail(err)
	}
	if spec.Runtime == "" {
		// Named, so the sandbox's label (and isolation) says what it
		// runs on.
		spec.Runtime = facts.defaultRuntime
	}
	bin, err := sbxdbin.Lookup(b.cfg.SbxdPath, facts.arch)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err))
	}
	img, err := b.specImage(ctx, spec)
	if err != nil {
		return fail(err)
	}
	id := newID()
	now := time.Now()
	var brokered *backendkit.Brokered
	if len(spec.Credentials) > 0 {
		if spec.ReadOnlyRootfs {
			return fail(fmt.Errorf("%w: credentials and read_only: the credential broker's CA goes into the image's trust store, which a read-only root file system keeps out", backend.ErrInvalidConfig))
		}
		if brokered, err = backendkit.PrepareCredentials(ctx, id, spec.Credentials); err != nil {
			return fail(err)
		}
		spec.Env = maps.Clone(spec.Env)
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		maps.Copy(spec.Env, brokered.Env)
	}
	cfg, hc, err := b.containerConfig(spec, img, id, now, facts)
	if err != nil {
		return fail(err)
	}
	var ecfg *container.Config
	var ehc *container.HostConfig
	if spec.Egress != nil {
		if ecfg, ehc, err = b.joinEnforcer(ctx, spec, id, cfg, hc); err != nil {
			return fail(err)
		}
	}
	verr := b.mountSbxd(ctx, hc, bin, spec.Image, cfg.Labels)
	// The enforcer starts (or a spare is claimed) while the sandbox's
	// container is made; the sandbox starts once the enforcer is ready
	// (or not at all).
	enforcer := func() error { return nil }
	refill := func() {}
	if ecfg != nil {
		everr := b.mountSbxd(ctx, ehc, bin, spec.Image, ecfg.Labels)
		var files map[string]fileInTar
		if brokered != nil {
			files = brokerEnforcer(ecfg, brokered)
		}
		inject := func(ctx context.Context, ecid string) error {
			if err := b.injectSbxd(ctx, ecid, bin, ehc, everr); err != nil {
				return err
			}
			if files == nil {
				return nil
			}
			if err := b.cli.CopyToContainer(ctx, ecid, "/", filesTar(files), container.CopyToContainerOptions{}); err != nil {
				return fmt.Errorf("egress enforcer: its credentials: %w", b.translate(err))
			}
			return nil
		}
		key := b.spareKey(spec, ecfg, ehc)
		if brokered != nil {
			key = "" // a spare has no credentials
		}
		started := make(chan error, 1)
		go func() {
			if key != "" && b.claimSpare(ctx, key, enforcerName(id)) {
				started <- nil
				return
			}
			_, err := b.runEnforcer(ctx, spec, enforcerName(id), ecfg, ehc, inject)
			started <- err
		}()
		enforcer = sync.OnceValue(func() error { return <-started })
		// After this create, not during it: the spare's start would slow
		// the sandbox's.
		refill = func() { b.refillSpares(spec, key, ecfg, ehc, inject) }
	}
	defer refill()
	// dropEnforcer removes a started enforcer (a failed one removed
	// itself).
	dropEnforcer := func() {
		if ecfg == nil || enforcer() != nil {
			return
		}
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := b.removeEnforcer(rmCtx, enforcerName(id)); rerr != nil {
			b.log.Warn("removing a half-created sandbox's egress enforcer failed", "err", rerr)
		}
	}
	name := containerName(spec, id)
	var created container.CreateResponse
	switch {
	case ecfg != nil:
		// The enforcer publishes the ports (on loopback too).
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, platformOf(spec), name)
	case b.cfg.Ports == PortsLoopback && len(spec.Ports) > 0:
		created, err = b.createOnLoopback(ctx, spec, id, cfg, hc, name)
	default:
		created, err = b.cli.ContainerCreate(ctx, cfg, hc, networkingConfig(spec), platformOf(spec), name)
	}
	if err != nil {
		dropEnforcer()
		if spec.ContainerName != "" && cerrdefs.IsConflict(err) {
			return fail(fmt.Errorf("%w: container_name %q: a container of that name exists (remove it, or drop container_name so each sandbox gets a name of its own): %v",
				backend.ErrAlreadyExists, spec.ContainerName, err))
		}
		return fail(b.explainCreate(err))
	}
	cid := created.ID
	// From here on a failure must not leave the containers behind.
	cleanup := func(err error) (backend.Sandbox, error) {
		dropEnforcer()
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if rerr := b.cli.ContainerRemove(rmCtx, cid, container.RemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil {
			b.log.Warn("removing a half-created container failed", "container", cid, "err", rerr)
		}
		return fail(err)
	}
	if err := b.injectSbxd(ctx, cid, bin, hc, verr); err != nil {
		return cleanup(err)
	}
	if brokered != nil {
		if err := b.installCA(ctx, cid, brokered.CAPEM); err != nil {
			return cleanup(err)
		}
	}
	if err := enforcer(); err != nil {
		return cleanup(err)
	}
	if err := b.cli.ContainerStart(ctx, cid, container.StartOptions{}); err != nil {
		return cleanup(b.explainCreate(err))
	}
	wd := cfg.WorkingDir
	if wd == "" {
		wd = "/"
	}
	b.log.Debug("created sandbox", "id", id, "container", cid, "name", name, "image", spec.Image)
	return &Sandbox{b: b, id: id, cid: cid, workDir: wd, pool: spec.Labels[backend.LabelPool] != "",
		autoRemove: hc.AutoRemove, bareInit: !slices.Contains(cfg.Entrypoint, "--"), egress: cfg.Labels[labelEgress], runtime: hc.Runtime}, nil
}

// injectSbxd copies bin into container cid when mountSbxd could not mount
// the shared volume (verr).
func (b *Backend) injectSbxd(ctx context.Context, cid string, bin embedbin.Binary, hc *container.HostConfig, verr error) error {
	if verr == nil {
		return nil
	}
	dir, prefix := "/", ".sbx/"
	if hc.ReadonlyRootfs {
		dir, prefix = sbxdDir, ""
	}
	tr, err := sbxdTar(bin, prefix)
	if err != nil {
		return err
	}
	if err := b.cli.CopyToContainer(ctx, cid, dir, tr, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("injecting sbxd: %w", b.translate(err))
	}
	return nil
}

// specImage builds spec's image, or makes sure the engine has it, and
// inspects it. With a Build it takes the image as OpenSage does (see
// builtImage).
func (b *Backend) specImage(ctx context.Context, spec backend.Spec) (image.InspectResponse, error) {
	report := progressFunc(spec)
	if spec.Build == nil {
		return b.ensureImage(ctx, spec.Image, spec.Platform, report)
	}
	if img, ok, err := b.existingBuildImage(ctx, spec, report); ok || err != nil {
		return img, err
	}
	if err := b.build(ctx, spec, report); err != nil {
		return image.InspectResponse{}, err
	}
	img, err := b.cli.ImageInspect(ctx, spec.Image)
	return img, b.translate(err)
}

// mountSbxd mounts the shared sbxd volume (holding bin) into hc. Without
// one it returns why: then Create copies sbxd into the container, into an
// anonymous volume (labelled with labels) that it mounts here when the root
// is read-only, as the engine does not copy into a read-only root.
func (b *Backend) mountSbxd(ctx context.Context, hc *container.HostConfig, bin embedbin.Binary, image string, labels map[string]string) error {
	vol, verr := "", errSbxdCopyForced
	if !b.sbxdCopy {
		vol, verr = b.sbxdVolume(ctx, bin, image)
	}
	switch {
	case verr == nil:
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Source: vol, Target: sbxdDir,
			ReadOnly: true, VolumeOptions: &mount.VolumeOptions{NoCopy: true}})
	case hc.ReadonlyRootfs:
		b.log.Warn("no shared sbxd volume; copying sbxd into the sandbox", "err", verr)
		hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeVolume, Target: sbxdDir,
			VolumeOptions: &mount.VolumeOptions{Labels: labels}})
	default:
		b.log.Warn("no shared sbxd volume; copying sbxd into the sandbox", "err", verr)
	}
	return verr
}

// explainCreate adds the likely cause to errors the engine gives for
// options it rejects, so the message names the option.
func (b *Backend) explainCreate(err error) error {
	err = b.translate(err)
	msg := err.Error()
	for _, hint := range []struct{ needle, option string }{
		{"runtime", "runtime"},
		{"network", "network"},
		{"memory", "mem_limit"},
		{"cpu", "cpus"},
		{"device", "gpus"},
		{"capabilit", "cap_add/cap_drop"},
		{"seccomp", "security_opt"},
		{"apparmor", "security_opt"},
		{"security", "security_opt"},
		{"port", "ports"},
		{"mount", "volumes"},
		{"bind", "volumes"},
		{"shm", "shm_size"},
	} {
		if strings.Contains(strings.ToLower(msg), hint.needle) {
			return fmt.Errorf("the engine rejected the sandbox entry's %s: %w", hint.option, err)
		}
	}
	return err
}

// containerConfig turns spec into the engine's create request.
func (b *Backend) containerConfig(spec backend.Spec, img image.InspectResponse, id string, now time.Time, facts *daemonFacts) (*container.Config, *container.HostConfig, error) {
	labels := b.labels(spec, id, now)
	cfg := &container.Config{
		Image:      spec.Image,
		Labels:     labels,
		WorkingDir: spec.WorkingDir,
		User:       spec.User,
		Hostname:   spec.Hostname,
	}
	if cfg.WorkingDir == "" && img.Config != nil {
		cfg.WorkingDir = img.Config.WorkingDir
	}
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = "/"
	}
	if !path.IsAbs(cfg.WorkingDir) {
		return nil, nil, fmt.Errorf("%w: working_dir %q: want an absolute path inside the sandbox", backend.ErrInvalidConfig, cfg.WorkingDir)
	}
	// List reads container summaries, which lack the working directory.
	labels[labelWorkDir] = cfg.WorkingDir
	// A container inherits its image's labels, and a checkpoint image
	// carries the labels of the sandbox it was committed from: blank every
	// sandboxkit label this sandbox does not set, so it does not inherit
	// another's owner or expiry.
	if img.Config != nil {
		for k := range img.Config.Labels {
			if _, ok := labels[k]; !ok && strings.HasPrefix(k, backend.LabelPrefix) {
				labels[k] = ""
			}
		}
	}
	keys := slices.Sorted(maps.Keys(spec.Env))
	for _, k := range keys {
		cfg.Env = append(cfg.Env, k+"="+spec.Env[k])
	}
	var err error
	if cfg.Entrypoint, cfg.Cmd, err = initCommand(spec, img); err != nil {
		return nil, nil, err
	}
	hc, err := b.hostConfig(spec)
	if err != nil {
		return nil, nil, err
	}
	if hc.Runtime != "" {
		labels[backend.LabelRuntime] = hc.Runtime
	}
	if cfg.ExposedPorts, hc.PortBindings, err = portBindings(spec.Ports); err != nil {
		return nil, nil, err
	}
	withAgent(spec, img, id, cfg, hc, facts.runtimeArgs[hc.Runtime])
	return cfg, hc, nil
}

// initCommand is the container's ENTRYPOINT and CMD. sbxd init is PID 1 in
// every mode; what it runs follows Docker's ENTRYPOINT + CMD rules with
// OpenSage's entry semantics.
func initCommand(spec backend.Spec, img image.InspectResponse) (entrypoint, cmd []string, err error) {
	var imgEntry, imgCmd []string
	if img.Config != nil {
		imgEntry, imgCmd = img.Config.Entrypoint, img.Config.Cmd
	}
	switch {
	case spec.ImageCommand:
		if len(imgEntry)+len(imgCmd) == 0 {
			return nil, nil, fmt.Errorf("%w: command = \"\" runs the image's own command, but image %s has no ENTRYPOINT or CMD", backend.ErrInvalidConfig, spec.Image)
		}
		return append([]string{sbxdPath, "init", "--"}, imgEntry...), imgCmd, nil
	case spec.Command != nil:
		if len(imgEntry)+len(spec.Command) == 0 {
			return nil, nil, fmt.Errorf("%w: empty command", backend.ErrInvalidConfig)
		}
		return append([]string{sbxdPath, "init", "--"}, imgEntry...), spec.Command, nil
	default:
		return []string{sbxdPath, "init"}, []string{}, nil // not the image's CMD
	}
}

// hostConfig is the engine's host config for spec: privileges, limits,
// devices, network and volumes (not yet its ports).
func (b *Backend) hostConfig(spec backend.Spec) (*container.HostConfig, error) {
	hc := &container.HostConfig{
		Privileged:     spec.Privileged,
		CapAdd:         spec.CapAdd,
		CapDrop:        spec.CapDrop,
		ReadonlyRootfs: spec.ReadOnlyRootfs,
		Runtime:        cmp(spec.Runtime, b.cfg.Runtime),
		ShmSize:        spec.Resources.ShmBytes,
		AutoRemove:     spec.AutoRemove,
		ExtraHosts:     slices.Clone(spec.ExtraHosts),
	}
	hc.SecurityOpt = slices.Clone(spec.SecurityOpt)
	if !b.cfg.AllowNewPrivileges && !slices.ContainsFunc(hc.SecurityOpt, func(s string) bool {
		return strings.HasPrefix(s, "no-new-privileges")
	}) {
		hc.SecurityOpt = append(hc.SecurityOpt, "no-new-privileges:true")
	}
	hc.NanoCPUs = int64(spec.Resources.CPUs * 1e9)
	// A CPU set (an entry's cpus = "0,1", OpenSage's cpuset_cpus) comes as
	// a label; Resources.CPUs is then its size.
	hc.CpusetCpus = spec.Labels[labelCPUSet]
	hc.Memory = spec.Resources.MemoryBytes
	if pl := spec.Resources.PidsLimit; pl > 0 {
		hc.PidsLimit = &pl
	} else if pl := b.cfg.pidsLimit(); pl > 0 {
		hc.PidsLimit = &pl
	}
	if spec.Resources.GPUs != "" {
		req, err := gpuRequest(spec.Resources.GPUs)
		if err != nil {
			return nil, err
		}
		hc.DeviceRequests = []container.DeviceRequest{req}
	}
	if spec.Network != "" {
		hc.NetworkMode = container.NetworkMode(spec.Network)
	}
	for _, v := range spec.Volumes {
		m := mount.Mount{Source: v.Source, Target: v.Target, ReadOnly: v.ReadOnly}
		switch v.Type {
		case backend.VolumeNamed:
			m.Type = mount.TypeVolume
		default:
			m.Type = mount.TypeBind
		}
		hc.Mounts = append(hc.Mounts, m)
	}
	return hc, nil
}

// portBindings is the container's exposed ports and their host bindings
// (127.0.0.1 unless the entry names an address); nil for no ports.
func portBindings(ports []backend.Port) (nat.PortSet, nat.PortMap, error) {
	if len(ports) == 0 {
		return nil, nil, nil
	}
	exposed, bindings := nat.PortSet{}, nat.PortMap{}
	for _, p := range ports {
		proto := cmp(p.Protocol, "tcp")
		port, err := nat.NewPort(proto, strconv.Itoa(p.Port))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: port %d/%s: %s", backend.ErrInvalidConfig, p.Port, proto, err.Error())
		}
		exposed[port] = struct{}{}
		bind := nat.PortBinding{HostIP: cmp(p.HostIP, "127.0.0.1")}
		if p.HostPort > 0 {
			bind.HostPort = strconv.Itoa(p.HostPort)
		}
		bindings[port] = append(bindings[port], bind)
	}
	return exposed, bindings, nil
}

// gpuRequest turns "all", a count or comma-separated device IDs into a
// device request, as docker run --gpus does.
func gpuRequest(s string) (container.DeviceRequest, error) {
	req := container.DeviceRequest{Driver: "", Capabilities: [][]string{{"gpu"}}}
	switch n, err := strconv.Atoi(s); {
	case s == "all":
		req.Count = -1
	case err == nil && n > 0:
		req.Count = n
	case err == nil:
		return req, fmt.Errorf("%w: gpus %q: want \"all\", a positive count or device IDs", backend.ErrInvalidConfig, s)
	default:
		req.DeviceIDs = strings.Split(s, ",")
	}
	return req, nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// progressFunc returns spec.Progress with the sandbox's name filled in, or
// a no-op.
func progressFunc(spec backend.Spec) func(backend.Progress) {
	if spec.Progress == nil {
		return func(backend.Progress) {}
	}
	return func(p backend.Progress) {
		p.Sandbox = spec.Name
		spec.Progress(p)
	}
}

// ensureImage applies the pull policy and returns the image's config. With
// a platform ("os/arch[/variant]"), an image on the engine counts only if it
// is of that platform; otherwise that platform's variant is pulled.
func (b *Backend) ensureImage(ctx context.Context, ref, platform string, report func(backend.Progress)) (image.InspectResponse, error) {
	policy := cmp(b.cfg.PullPolicy, PullMissing)
	if policy != PullAlways {
		img, err := b.cli.ImageInspect(ctx, ref)
		if err == nil && !platformMatches(img, platform) {
			err = fmt.Errorf("%w: image %s on the engine is %s/%s, not %s", backend.ErrNotFound, ref, img.Os, img.Architecture, platform)
		}
		if err == nil {
			return img, nil
		}
		err = b.translate(err)
		if !errors.Is(err, backend.ErrNotFound) {
			return img, err
		}
		if policy == PullNever {
			return img, fmt.Errorf("%w: image %s is not on the engine and pull_policy is \"never\" (build or pull it, or change [sandbox.native] pull_policy): %v", backend.ErrNotFound, ref, err)
		}
	}
	// One pull per image at a time: concurrent Creates of a session wait
	// for the first instead of pulling the same layers again.
	lock, _ := b.pullLock.LoadOrStore(ref, &sync.Mutex{})
	if !lock.(*sync.Mutex).TryLock() {
		report(backend.Progress{Step: "pull", Status: "waiting for another pull of " + ref})
		lock.(*sync.Mutex).Lock()
	}
	defer lock.(*sync.Mutex).Unlock()
	if policy != PullAlways {
		if img, err := b.cli.ImageInspect(ctx, ref); err == nil && platformMatches(img, platform) {
			report(backend.Progress{Step: "pull", Status: "pulled " + ref, Done: true})
			return img, nil
		}
	}
	if err := b.pull(ctx, ref, platform, report); err != nil {
		return image.InspectResponse{}, err
	}
	img, err := b.cli.ImageInspect(ctx, ref)
	if err == nil && !platformMatches(img, platform) {
		return img, fmt.Errorf("%w: platform %q: pulling %s gave a %s/%s image (the registry has no %s variant)",
			backend.ErrNotFound, platform, ref, img.Os, img.Architecture, platform)
	}
	return img, b.translate(err)
}

// platformOf is spec's platform for the engine's create call (nil: the
// engine's own).
func platformOf(spec backend.Spec) *ocispec.Platform {
	if spec.Platform == "" {
		return nil
	}
	p := parsePlatform(spec.Platform)
	return &p
}

// parsePlatform splits "os/arch[/variant]"; the config package has checked
// the form.
func parsePlatform(s string) ocispec.Platform {
	parts := strings.SplitN(s, "/", 3)
	p := ocispec.Platform{OS: parts[0]}
	if len(parts) > 1 {
		p.Architecture = parts[1]
	}
	if len(parts) > 2 {
		p.Variant = parts[2]
	}
	return p
}

// platformMatches reports whether img is of platform ("" matches any).
func platformMatches(img image.InspectResponse, platform string) bool {
	if platform == "" {
		return true
	}
	p := parsePlatform(platform)
	return strings.EqualFold(img.Os, p.OS) && strings.EqualFold(img.Architecture, p.Architecture) &&
		(p.Variant == "" || strings.EqualFold(img.Variant, p.Variant))
}

// pull pulls ref (of platform, when not ""), reporting each layer's
// progress and, at the end, one Done report.
func (b *Backend) pull(ctx context.Context, ref, platform string, report func(backend.Progress)) error {
	b.log.Info("pulling image", "image", ref, "platform", platform)
	rc, err := b.cli.ImagePull(ctx, ref, image.PullOptions{Platform: platform})
	if err != nil {
		return fmt.Errorf("pulling %s: %w", ref, b.translate(err))
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			ID             string `json:"id"`
			Status         string `json:"status"`
			ProgressDetail struct {
				Current int64 `json:"current"`
				Total   int64 `json:"total"`
			} `json:"progressDetail"`
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			report(backend.Progress{Step: "pull", Status: "pulled " + ref, Done: true})
			return nil
		} else if err != nil {
			return fmt.Errorf("pulling %s: %w", ref, b.translate(err))
		}
		if m.Error != "" {
			// The engine reports registry failures in the stream.
			if strings.Contains(m.Error, "not found") || strings.Contains(m.Error, "manifest unknown") {
				return fmt.Errorf("%w: pulling %s: %s", backend.ErrNotFound, ref, m.Error)
			}
			return fmt.Errorf("%w: pulling %s: %s", backend.ErrUnavailable, ref, m.Error)
		}
		report(backend.Progress{Step: "pull", ID: m.ID, Status: m.Status,
			Current: m.ProgressDetail.Current, Total: m.ProgressDetail.Total})
	}
}

// Get reattaches to the sandbox with this ID.
func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	if cid, ok := strings.CutPrefix(id, adoptedPrefix); ok && cid != "" {
		s, err := b.adopt(ctx, cid, "sandbox "+id)
		if err != nil {
			return nil, b.opErr("get", id, err)
		}
		return s, nil
	}
	c, err := b.find(ctx, id)
	if err != nil {
		return nil, b.opErr("get", id, err)
	}
	s := &Sandbox{b: b, id: id, cid: c.ID, workDir: workDirOf(c)}
	s.pool = c.Config != nil && c.Config.Labels[backend.LabelPool] != ""
	s.autoRemove = c.HostConfig != nil && c.HostConfig.AutoRemove
	if c.HostConfig != nil {
		s.runtime = c.HostConfig.Runtime
	}
	s.bareInit = c.Config != nil && !slices.Contains(c.Config.Entrypoint, "--")
	if c.Config != nil {
		s.egress = c.Config.Labels[labelEgress]
	}
	s.setAgent(c)
	return s, nil
}

// find returns the container of sandbox id.
func (b *Backend) find(ctx context.Context, id string) (container.InspectResponse, error) {
	ctr, err := b.summary(ctx, id)
	if err != nil {
		return container.InspectResponse{}, err
	}
	c, err := b.cli.ContainerInspect(ctx, ctr.ID)
	return c, b.translate(err)
}

func workDirOf(c container.InspectResponse) string {
	if c.Config != nil && c.Config.WorkingDir != "" {
		return c.Config.WorkingDir
	}
	return "/"
}

// List finds sandboxes by their labels, filtering on the engine what no
// claim record can change (see listFilter), with a pool member's claim
// merged over its container's labels before filter is matched.
func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	b.settle(ctx)
	claims, err := b.claimRecords(ctx)
	if err != nil {
		return nil, b.opErr("list", "", err)
	}
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: listFilter(filter, claims)})
	if err != nil {
		return nil, b.opErr("list", "", err)
	}
	var out []backend.Info
	for _, c := range list {
		name := strings.TrimPrefix(firstName(c.Names), "/")
		labels := withClaim(c.Labels, name, claims[c.Labels[backend.LabelID]])
		info := infoFrom(labels, c.Image, c.State, time.Unix(c.Created, 0), cmp(labels[labelWorkDir], "/"))
		markMaking(&info, name)
		if info.ID == "" || !filter.Match(info) {
			continue
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b backend.Info) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// listFilter is the engine's filter for List. A claimed member's session
// and labels are its claim record's, not its container's: the filter asks
// for the session and labels only when no claim record matches filter (so
// no claimed member can be missing from what the engine returns), and
// otherwise only for the name and the labels no claim changes. The pool
// state is never asked for: a member's container says ready for ever.
// List matches the whole filter again on what comes back.
func listFilter(filter backend.Filter, claims map[string]map[string]string) filters.Args {
	loose := false
	for _, rec := range claims {
		if filter.Match(infoFrom(withClaim(rec, "", rec), "", "", time.Time{}, "")) {
			loose = true
			break
		}
	}
	f := backend.Filter{Name: filter.Name, Labels: map[string]string{}}
	if !loose {
		f.Session = filter.Session
	}
	for k, v := range filter.Labels {
		if k != backend.LabelPoolState && (!loose || !claimable(k)) {
			f.Labels[k] = v
		}
	}
	args := labelFilter(f)
	if f.Name != "" {
		args.Add("label", backend.LabelName+"="+f.Name)
	}
	return args
}

func infoFrom(labels map[string]string, img, state string, created time.Time, workDir string) backend.Info {
	info := backend.Info{
		ID:        labels[backend.LabelID],
		Backend:   Name,
		Name:      labels[backend.LabelName],
		Session:   labels[backend.LabelSession],
		Owner:     labels[backend.LabelOwner],
		Image:     img,
		State:     stateOf(state),
		Labels:    map[string]string{},
		CreatedAt: created.UTC(),
		WorkDir:   workDir,
		Isolation: backend.RuntimeIsolation(labels[backend.LabelRuntime]),
	}
	for k, v := range labels {
		// Blanked labels (see containerConfig) are not there.
		if v != "" || !strings.HasPrefix(k, backend.LabelPrefix) {
			info.Labels[k] = v
		}
	}
	if exp, err := time.Parse(time.RFC3339, labels[backend.LabelExpiresAt]); err == nil {
		info.ExpiresAt = exp
	}
	return info
}

func stateOf(s string) backend.State {
	switch s {
	case "created":
		return backend.StateCreating
	case "running", "restarting":
		return backend.StateRunning
	case "paused":
		return backend.StatePaused
	case "exited", "dead", "removing":
		return backend.StateExited
	}
	return backend.StateUnknown
}

// hostOf is the address a host program dials for ports the engine
// publishes: the engine's host for a tcp:// engine, else loopback.
func (b *Backend) hostOf(ip string) string {
	if ip != "" && ip != "0.0.0.0" && ip != "::" {
		return ip
	}
	if u, err := url.Parse(b.cli.DaemonHost()); err == nil && (u.Scheme == "tcp" || u.Scheme == "http" || u.Scheme == "https") {
		if h := u.Hostname(); h != "" {
			return h
		}
	}
	return "127.0.0.1"
}
