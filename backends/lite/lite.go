package lite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Name is the backend's registry name.
const Name = "lite"

// Paths inside every sandbox.
const (
	sbxdDir  = "/.sbx"
	sbxdPath = "/.sbx/sbxd"
	// agentDir is where the agent that sbxd init starts listens, inside
	// the sandbox (a folder of the sandbox's state directory on the host).
	agentDir    = "/.sbx-run"
	agentSocket = "agent.sock"
	// envExecID is the marker sbxd exec gives a command's processes.
	envExecID = "SBX_EXEC_ID"
)

// containerPrefix starts the runtime's container ID of every sandbox.
const containerPrefix = "sbxlite-"

var errUnsupported = errors.ErrUnsupported

// Backend makes sandboxes as OCI containers run by runc (or crun, runsc)
// with no daemon. It is safe for concurrent use.
type Backend struct {
	cfg      Config
	log      *slog.Logger
	dir      string
	runtime  *ociRuntime
	runtimes []string // names Spec.Runtime may pick
	images   *imageStore
	sbxd     string  // host path of the sbxd binary bind-mounted into sandboxes
	userns   *userNS // rootless: the tools that make user namespaces; nil as root

	// sbxLocks serialise Reset and Destroy of one sandbox in this process
	// (with the lockFile's flock across processes; see Sandbox.lock).
	sbxLocks sync.Map // id -> *sync.Mutex
	// bg counts background work (Reset's standby containers), which Close
	// waits for. bgHold, write-locked by a test, holds it back, so that
	// the test sees what a Reset itself left.
	bg     sync.WaitGroup
	bgHold sync.RWMutex
	// lows are the containers being made at low CPU weight, by the ID
	// of the sandbox they are for (see lowShares); while urgent is above
	// 0 they are hurried (see waitBackground).
	lows   sync.Map // id -> *lowCreate
	urgent atomic.Int32
	// settling holds, by sandbox ID, a channel closed when the background
	// work of the sandbox's last Reset is done (see Sandbox.Settle).
	settling sync.Map // id -> chan struct{}
	// noForkStandby: forks make no container ahead for the next fork
	// (tests and benchmarks of the other way).
	noForkStandby bool
}

// background runs f in a goroutine that Close waits for.
func (b *Backend) background(f func()) {
	b.bg.Go(func() {
		// Waits while something holds bgHold to keep background work
		// from starting (a barrier, not a critical section).
		b.bgHold.RLock()
		//lint:ignore SA2001 the lock is taken only to wait for its holder
		b.bgHold.RUnlock()
		f()
	})
}

var _ backend.Backend = (*Backend)(nil)

// New checks the host (root, an OCI runtime) and prepares the state and
// image folders. It starts nothing.
func New(cfg Config, opts ...Option) (*Backend, error) {
	b := &Backend{cfg: cfg, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(b)
	}
	openErr := func(err error) error { return &backend.OpError{Op: "open", Backend: Name, Err: err} }
	if err := cfg.validate(); err != nil {
		return nil, openErr(err)
	}
	var err error
	if b.userns, err = checkPrivileges(cfg.Rootless); err != nil {
		return nil, openErr(err)
	}
	rt, err := b.lookRuntime(cfg.Runtime, cfg.RuntimeRoot)
	if err != nil {
		return nil, openErr(fmt.Errorf("%w: %v", backend.ErrUnavailable, err))
	}
	b.runtime = rt
	b.runtimes = []string{rt.name}
	for _, n := range []string{"runc", "crun", "runsc"} {
		if n != rt.name {
			if _, err := b.lookRuntime(n, ""); err == nil {
				b.runtimes = append(b.runtimes, n)
			}
		}
	}
	// The runtime level "gvisor" names the configured runtime when that is
	// a gVisor (a pinned release, runsc-SOMETHING), else runsc (see
	// Backend.checkSpec).
	if rt.gvisor() || slices.Contains(b.runtimes, "runsc") {
		b.runtimes = append(b.runtimes, backend.RuntimeGVisor)
	}
	slices.Sort(b.runtimes)

	dir := cfg.StateDir
	if dir == "" {
		if dir, err = DefaultStateDir(); err != nil {
			return nil, openErr(err)
		}
	}
	imgDir := cfg.ImageDir
	if imgDir == "" {
		if imgDir, err = DefaultImageDir(); err != nil {
			return nil, openErr(err)
		}
	}
	if b.dir, err = filepath.Abs(dir); err != nil {
		return nil, openErr(err)
	}
	if imgDir, err = filepath.Abs(imgDir); err != nil {
		return nil, openErr(err)
	}
	for _, d := range []string{b.dir, imgDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, openErr(fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err))
		}
	}
	b.images = &imageStore{dir: imgDir, aliases: cfg.Images, insecure: cfg.InsecureRegistries, pullPolicy: cfg.PullPolicy,
		engineSocket: cfg.EngineSocket, log: b.log}
	if b.sbxd, err = installSbxd(b.dir, cfg.SbxdPath); err != nil {
		return nil, openErr(err)
	}
	return b, nil
}

// checkPrivileges picks rootful (root) or rootless (any other user; see
// userNS) operation and checks that the host allows the latter. It
// returns nil for rootful operation.
func checkPrivileges(mode string) (*userNS, error) {
	euid := os.Geteuid()
	switch {
	case euid == 0 && mode == RootlessForce:
		return nil, fmt.Errorf("%w: [sandbox.lite] rootless = \"force\" and this process is root: rootless sandboxes are for a regular user (run as one, or set rootless = \"auto\")", backend.ErrInvalidConfig)
	case euid == 0:
		return nil, nil
	case mode == RootlessOff:
		return nil, fmt.Errorf("%w: [sandbox.lite] rootless = \"off\" needs root (uid 0) and this process runs as uid %d (set rootless = \"auto\", or run as root)", backend.ErrUnavailable, euid)
	}
	u, err := probeUserNS()
	if err != nil {
		return nil, fmt.Errorf("%w: the lite backend runs as root, or rootless in a user namespace, and this host does not allow the latter for uid %d: %v", backend.ErrUnavailable, euid, err)
	}
	return u, nil
}

// lookRuntime finds a runtime; its state root defaults to a folder of this
// user when rootless ($XDG_RUNTIME_DIR/sandboxkit/lite/<name>, else
// <tmp>/sandboxkit-lite-<uid>/<name>).
func (b *Backend) lookRuntime(nameOrPath, root string) (*ociRuntime, error) {
	rt, err := lookRuntime(nameOrPath, root)
	if err != nil || root != "" || b.userns == nil {
		return rt, err
	}
	if xdg := os.Getenv("XDG_RUNTIME_DIR"); xdg != "" {
		rt.root = filepath.Join(xdg, "sandboxkit", "lite", rt.name)
	} else {
		rt.root = filepath.Join(os.TempDir(), fmt.Sprintf("sandboxkit-lite-%d", b.userns.uid), rt.name)
	}
	return rt, nil
}

// installSbxd writes the sbxd binary once under dir/bin, named by its
// hash, and returns its path. The embedded binary's hash was recorded at
// build time, so an installed copy costs a stat, not an unpacking.
func installSbxd(dir, override string) (string, error) {
	id, err := sbxdbin.Lookup(override, goruntime.GOARCH)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "bin", "sbxd-"+id.Sum[:16])
	if fi, err := os.Stat(p); err == nil && fi.Size() == id.Size {
		return p, nil
	}
	bin, err := id.Bytes()
	if err != nil {
		return "", err
	}
	if err := statedir.WriteFileAtomic(p, bin); err != nil {
		return "", fmt.Errorf("installing sbxd: %w", err)
	}
	return p, os.Chmod(p, 0o755)
}

// StateDir is the folder holding the sandboxes.
func (b *Backend) StateDir() string { return b.dir }

// Runtime is the path of the default OCI runtime binary and its state root.
func (b *Backend) Runtime() (path, root string) { return b.runtime.path, b.runtime.root }

func (b *Backend) Name() string { return Name }

// Close waits for background work (see Sandbox.Reset); the backend holds
// no connections. Sandboxes keep running.
func (b *Backend) Close() error {
	b.waitBackground()
	return nil
}

func (b *Backend) Capabilities() backend.Capabilities {
	iso := backend.IsolationContainer
	if b.runtime.gvisor() {
		iso = backend.IsolationGVisor
	}
	rootful := b.userns == nil
	return backend.Capabilities{
		Isolation:        iso,
		Images:           true,
		NetworkModes:     []string{NetworkHost, NetworkNone},
		Egress:           b.userns == nil,
		EgressWhy:        "rootless lite cannot make the host-side network an enforcer needs; run it as root",
		Credentials:      b.userns == nil,
		BindVolumes:      true,
		NamedVolumes:     true,
		User:             rootful,
		CPULimit:         rootful,
		MemoryLimit:      rootful,
		PidsLimit:        rootful,
		ShmSize:          true,
		Privileged:       rootful,
		CapAdd:           true,
		CapDrop:          true,
		SecurityOpt:      true,
		ReadOnlyRootfs:   true,
		Platform:         true,
		Runtimes:         slices.Clone(b.runtimes),
		ImageCommand:     true,
		PauseKeepsMemory: true,
		Persistent:       true,
	}
}

// meta is what meta.json holds: everything Get, List, Exec and Destroy
// need after a restart of the host program.
type meta struct {
	statedir.Lifecycle
	ID string `json:"id"`
	// CredentialCA is the certificate (PEM; public) of the CA the
	// sandbox's enforcer brokers credentials with (credentials.go):
	// installed in every generation's root file system.
	CredentialCA string            `json:"credential_ca,omitempty"`
	Name         string            `json:"name,omitempty"`
	Session      string            `json:"session,omitempty"`
	Image        string            `json:"image,omitempty"`
	ImageDigest  string            `json:"image_digest,omitempty"`
	Owner        string            `json:"owner,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	ExpiresAt    time.Time         `json:"expires_at,omitzero"`
	// WorkDir is the default working directory, inside the sandbox.
	WorkDir string `json:"workdir"`
	// Runtime and RuntimeRoot name the OCI runtime that runs the
	// container, ContainerID its ID there.
	Runtime     string `json:"runtime"`
	RuntimeRoot string `json:"runtime_root"`
	ContainerID string `json:"container_id"`
	// Lower is the overlay's read-only lower layer (the unpacked image).
	Lower    string `json:"lower"`
	Network  string `json:"network"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// Egress is the sandbox's policy as last set, EgressNet the network
	// that enforces it (see egress.go).
	Egress    *backend.Egress `json:"egress,omitempty"`
	EgressNet *egressNet      `json:"egress_net,omitempty"`
	// Volumes are the sandbox's mounts, named volumes resolved to their
	// host folders (Type stays VolumeNamed; see volumes.go).
	Volumes []backend.Volume `json:"volumes,omitempty"`
	// UID and GID own files the backend writes for the sandbox.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// InitPID and InitStart identify the container's first process on the
	// host (0 while it is being created).
	InitPID   int    `json:"init_pid,omitempty"`
	InitStart uint64 `json:"init_start,omitempty"`
	Paused    bool   `json:"paused,omitempty"`
	// Agent: sbxd init also runs the agent, listening on the socket
	// agentSocketPath gives (see Sandbox.DialAgent).
	Agent bool `json:"agent,omitempty"`
	// Rootless: the sandbox runs in a user namespace of its own (see
	// userNS).
	Rootless bool `json:"rootless,omitempty"`
	// Once: the sandbox runs one command as its first process and goes
	// when it ends (Backend.RunOnce); it has no agent.
	Once bool `json:"once,omitempty"`
	// runtimeDeleted: the runtime has deleted the running generation's
	// container itself (RunOnce's runtime in the foreground does): its
	// removal skips the runtime. Not recorded, so that a sandbox whose
	// runner died is removed in full.
	runtimeDeleted bool
	// Gen is the generation of the running container (ContainerID,
	// InitPID). Standby is a created, not yet started container of the
	// next generation that Reset starts instead of making one; Retired
	// are generations whose leftovers are still to be removed.
	Gen     int      `json:"gen,omitempty"`
	Standby *standby `json:"standby,omitempty"`
	Retired []int    `json:"retired,omitempty"`
	// ForkStandby is a sandbox made ahead for this one's next fork;
	// StandbyFor, in that sandbox's record, names this one (see
	// forkstandby.go).
	ForkStandby string `json:"fork_standby,omitempty"`
	StandbyFor  string `json:"standby_for,omitempty"`
}

// hostOwner is the host uid and gid of the sandbox's user: its own IDs,
// or for a rootless sandbox (root inside) this process's.
func (m *meta) hostOwner() (int, int) {
	if m.Rootless {
		return os.Geteuid(), os.Getegid()
	}
	return int(m.UID), int(m.GID)
}

// standby is a container made with the runtime's create and not started:
// its namespaces, cgroup and mounts are ready, its first process waits.
type standby struct {
	Gen int `json:"gen"`
	// InitPID and InitStart are 0 until the container is created.
	InitPID   int    `json:"init_pid,omitempty"`
	InitStart uint64 `json:"init_start,omitempty"`
}

// ready reports whether the standby can be started.
func (sb *standby) ready() bool {
	return sb != nil && sb.InitPID != 0 && procfs.Alive(sb.InitPID, sb.InitStart)
}

// agentHostDir is the host side of the sandbox's agentDir.
func agentHostDir(dir string) string { return filepath.Join(dir, "agent") }

// maxSocketPath is the longest Unix socket path the kernel takes (108
// bytes with the terminating NUL).
const maxSocketPath = 107

func (m *meta) info() backend.Info {
	state := m.Lifecycle.State()
	switch {
	case state != "":
	case m.InitPID == 0:
		state = backend.StateCreating
	case !procfs.Alive(m.InitPID, m.InitStart):
		state = backend.StateExited
	case m.Paused:
		state = backend.StatePaused
	default:
		state = backend.StateRunning
	}
	i := backend.Info{
		ID: m.ID, Backend: Name, Name: m.Name, Session: m.Session, Image: m.Image,
		State: state, Owner: m.Owner,
		CreatedAt: m.CreatedAt, ExpiresAt: m.ExpiresAt, WorkDir: m.WorkDir,
	}
	if m.Runtime != "" {
		// Each sandbox's own: Spec.Runtime may differ from the default.
		i.Isolation = backend.RuntimeIsolation(filepath.Base(m.Runtime))
	}
	i.Labels = statedir.Labels(m.Labels, i)
	m.Lifecycle.Label(i.Labels)
	if m.StandbyFor != "" {
		i.Labels[labelStandbyFor] = m.StandbyFor
	}
	return i
}

func (m *meta) runtime() *ociRuntime {
	return &ociRuntime{path: m.Runtime, name: filepath.Base(m.Runtime), root: m.RuntimeRoot}
}

// Folders and files of one sandbox, under <state>/<id>.
// A sandbox's container, bundle, writable layer and cgroup belong to a
// generation: 0 from Create, one more for each standby container that
// Reset prepares (see Sandbox.Reset). Generation 0 has the plain names.
func genSuffix(gen int) string {
	if gen == 0 {
		return ""
	}
	return "." + strconv.Itoa(gen)
}

// lockFile is the file in a sandbox's folder that Sandbox.lock locks.
const lockFile = "lock"

func bundleDir(dir string, gen int) string { return filepath.Join(dir, "bundle"+genSuffix(gen)) }
func rootfsDir(dir string, gen int) string { return filepath.Join(bundleDir(dir, gen), "rootfs") }
func upperDir(dir string, gen int) string  { return filepath.Join(dir, "upper"+genSuffix(gen)) }
func workDir(dir string, gen int) string   { return filepath.Join(dir, "work"+genSuffix(gen)) }

// containerID is the ID, in runtime rt, of sandbox id's container of
// generation gen; cgroupName is its cgroup under cgroupParent.
//
// gVisor's runsc takes any unique prefix of an ID for the ID, and so
// refuses an ID that is the prefix of another one (sbxlite-X of
// sbxlite-X.1, sbxlite-X.1 of sbxlite-X.10) as ambiguous: there a later
// generation's ID puts the generation first (sbxlite-g1-X), which no
// other ID begins with (sandbox IDs are hex, and the dash ends the
// generation). Generation 0 has the same ID in every runtime.
func containerID(rt *ociRuntime, id string, gen int) string {
	if gen != 0 && rt.gvisor() {
		return containerPrefix + "g" + strconv.Itoa(gen) + "-" + id
	}
	return containerPrefix + id + genSuffix(gen)
}

func cgroupName(id string, gen int) string { return id + genSuffix(gen) }

func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	sb, m, fail, err := b.makeBundle(ctx, spec, nil)
	if err != nil {
		return nil, err
	}
	if err := sb.startCreate(ctx, m, spec.Ahead); err != nil {
		return nil, fail(err)
	}
	if err := b.update(m, func(cur *meta) { cur.Creator = "" }); err != nil {
		return nil, fail(err)
	}
	b.log.Debug("created sandbox", "id", sb.id, "name", spec.Name, "image", m.Image)
	return sb, nil
}

// makeBundle does Create's work up to the container's start: the sandbox's
// record, folder, root file system, egress network and OCI bundle. A
// one-shot sandbox (RunOnce, once not nil) runs spec.Command as its first
// process, with no agent, and may have its runtime started while the
// bundle is made (see oneShot). fail removes what was made and returns
// err as Create's error; so are makeBundle's own errors.
func (b *Backend) makeBundle(ctx context.Context, spec backend.Spec, once *oneShot) (sb *Sandbox, m *meta, fail func(error) error, err error) {
	createErr := func(err error) error { return &backend.OpError{Op: "create", Backend: Name, Err: err} }
	rt, ref, img, err := b.checkCreate(ctx, spec)
	if err != nil {
		return nil, nil, nil, createErr(err)
	}
	id, err := statedir.NewID()
	if err != nil {
		return nil, nil, nil, createErr(err)
	}
	// Held until the bundle is made, so that RemoveVolume, which waits
	// for it, finds the record that names the volumes.
	vols, release, err := b.holdVolumes(ctx, spec.Volumes)
	if err != nil {
		return nil, nil, nil, createErr(err)
	}
	defer release()
	spec.Volumes = vols
	network := spec.Network
	if network == "" {
		network = b.cfg.network()
	}
	m = &meta{
		ID: id, Name: spec.Name, Session: spec.Session, Image: ref, ImageDigest: img.config.Digest, Once: once != nil,
		Owner: spec.Owner, Labels: maps.Clone(spec.Labels),
		Lifecycle: statedir.Lifecycle{Creator: owner.Self()},
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
		Runtime:   rt.path, RuntimeRoot: rt.root, ContainerID: containerID(rt, id, 0),
		Lower: img.rootfs, Network: network, ReadOnly: spec.ReadOnlyRootfs, Volumes: spec.Volumes,
		Rootless: b.userns != nil,
	}
	if spec.TTL > 0 {
		m.ExpiresAt = m.CreatedAt.Add(spec.TTL)
	}
	if spec.Egress != nil {
		e := cloneEgress(*spec.Egress)
		m.Egress = &e
	}
	dir := filepath.Join(b.dir, id)
	sb = &Sandbox{b: b, id: id, dir: dir}
	// The egress network is made while the root file system is: it
	// records itself in the meta file, which m catches up with below.
	var egressDone chan error
	waitEgress := func() error {
		if egressDone == nil {
			return nil
		}
		err := <-egressDone
		egressDone = nil
		if cur, merr := sb.meta(); merr == nil {
			*m = *cur
		}
		return err
	}
	fail = func(err error) error {
		waitEgress()
		once.abort()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := sb.teardown(cctx, m); derr != nil {
			b.log.Warn("cleaning up a failed create", "sandbox", id, "err", derr)
		}
		return createErr(err)
	}
	failed := func(err error) (*Sandbox, *meta, func(error) error, error) { return nil, nil, nil, fail(err) }
	// The meta file comes first, so that a crash from here on leaves a
	// sandbox that List shows and Destroy removes.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return failed(err)
	}
	if err := os.WriteFile(filepath.Join(dir, lockFile), nil, 0o600); err != nil {
		return failed(err)
	}
	if err := writeMeta(dir, m); err != nil {
		return failed(err)
	}
	if err := once.start(sb, m); err != nil {
		return failed(err)
	}
	if len(spec.Credentials) > 0 {
		// Before the enforcer starts: it reads them then.
		env, caPEM, err := prepareCredentials(ctx, id, dir, spec.Credentials)
		if err != nil {
			return failed(err)
		}
		spec.Env = maps.Clone(spec.Env)
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		maps.Copy(spec.Env, env)
		if err := b.update(m, func(cur *meta) { cur.CredentialCA = caPEM }); err != nil {
			return failed(err)
		}
	}
	if m.Egress != nil {
		egressDone = make(chan error, 1)
		em := *m
		go func() { egressDone <- b.setupEgress(ctx, &em, dir) }()
	}
	if err := b.makeRootfs(m, dir, 0); err != nil {
		return failed(err)
	}
	in, err := b.prepare(m, spec, img, dir)
	if err != nil {
		return failed(err)
	}
	if err := waitEgress(); err != nil {
		return failed(err)
	}
	in.egress = egressInput(m, dir)
	ociSpec, err := buildSpec(in)
	if err != nil {
		return failed(err)
	}
	if m.Rootless {
		rootlessSpec(ociSpec)
	}
	if err := writeConfig(bundleDir(dir, 0), ociSpec); err != nil {
		return failed(err)
	}
	if err := once.feed(ociSpec); err != nil {
		return failed(err)
	}
	return sb, m, fail, nil
}

// checkCreate checks spec before Create makes anything, and resolves the
// OCI runtime and the image (ref, the entry's or the default) it names.
// checkSpec is Create's check of spec that reads nothing but the host's
// runtimes: its capabilities, its runtime and its volumes; it returns the
// runtime to run it with.
func (b *Backend) checkSpec(spec backend.Spec) (*ociRuntime, error) {
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return nil, err
	}
	rt := b.runtime
	name := spec.Runtime
	if name == backend.RuntimeGVisor {
		name = "runsc"
		if rt.gvisor() {
			name = rt.name
		}
	}
	if name != "" && name != rt.name {
		var err error
		if rt, err = b.lookRuntime(name, ""); err != nil {
			return nil, fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err)
		}
	}
	for _, v := range spec.Volumes {
		if err := b.checkVolume(v); err != nil {
			return nil, err
		}
	}
	return rt, nil
}

// CheckSpec runs Create's checks of spec, making nothing (see
// backend.SpecChecker): its egress policy, capabilities, runtime and
// volumes; the image is resolved only by Create.
func (b *Backend) CheckSpec(ctx context.Context, spec backend.Spec) error {
	if err := b.checkEgress(spec); err != nil {
		return &backend.OpError{Op: "check", Backend: Name, Err: err}
	}
	if _, err := b.checkSpec(spec); err != nil {
		return &backend.OpError{Op: "check", Backend: Name, Err: err}
	}
	return nil
}

var _ backend.SpecChecker = (*Backend)(nil)

func (b *Backend) checkCreate(ctx context.Context, spec backend.Spec) (rt *ociRuntime, ref string, img *image, err error) {
	// First: it says why better than Check's "egress" would.
	if err := b.checkEgress(spec); err != nil {
		return nil, "", nil, err
	}
	if spec.Build != nil {
		// lite builds no images; as OpenSage uses an image on hand before
		// building it, one a local engine or the cache holds will do.
		if err := b.images.onHand(ctx, spec.Image, spec.Platform, spec.Build); err != nil {
			return nil, "", nil, err
		}
		spec.Build = nil
	}
	if rt, err = b.checkSpec(spec); err != nil {
		return nil, "", nil, err
	}
	ref = spec.Image
	if ref == "" {
		ref = b.cfg.DefaultImage
	}
	if ref == "" {
		return nil, "", nil, fmt.Errorf("%w: the lite backend needs an image (set image in the sandbox entry or [sandbox] default_image; e.g. dir:/path/to/rootfs)", backend.ErrInvalidConfig)
	}
	if img, err = b.images.resolve(ctx, ref, spec.Platform); err != nil {
		return nil, "", nil, err
	}
	if img.source != "" {
		// Which of a name's sources was used (a local engine, the
		// cache, a registry) is worth saying: they may differ.
		b.log.Info("image source", "image", ref, "from", img.source)
		if spec.Progress != nil {
			spec.Progress(backend.Progress{Sandbox: spec.Name, Step: "pull", Status: "image from " + img.source, Done: true})
		}
	}
	if b.userns != nil {
		if err := b.userns.checkImage(ref, img.rootfs); err != nil {
			return nil, "", nil, fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err)
		}
	}
	if spec.ImageCommand && len(img.config.Entrypoint)+len(img.config.Cmd) == 0 {
		return nil, "", nil, fmt.Errorf("%w: command = \"\" runs the image's own command, and image %q has none", backend.ErrInvalidConfig, ref)
	}
	return rt, ref, img, nil
}

// prepare resolves the user and working directory in the mounted root
// file system, writes /etc/hosts and /etc/hostname, and assembles what the
// OCI config is made from.
func (b *Backend) prepare(m *meta, spec backend.Spec, img *image, dir string) (bundleInput, error) {
	// Nothing is written yet, so the image shows what the sandbox will.
	// (A rootless sandbox's overlay is mounted only in its namespaces.)
	v := newViewAt(m, m.Lower)
	defer v.close()
	userSpec := spec.User
	if userSpec == "" {
		userSpec = img.config.User
	}
	user, home, err := lookupUser(v, userSpec)
	if err != nil {
		return bundleInput{}, err
	}
	if m.Rootless && (user.UID != 0 || user.GID != 0) {
		return bundleInput{}, fmt.Errorf("%w: the image runs as user %q (uid %d), and a rootless sandbox maps only root; set user = \"root\" in the sandbox entry", backend.ErrInvalidConfig, userSpec, user.UID)
	}
	m.UID, m.GID = user.UID, user.GID
	wd := spec.WorkingDir
	if wd == "" {
		wd = img.config.WorkingDir
	}
	if wd == "" {
		wd = "/"
	}
	if !path.IsAbs(wd) {
		return bundleInput{}, fmt.Errorf("%w: working_dir %q: want an absolute path inside the sandbox", backend.ErrInvalidConfig, wd)
	}
	m.WorkDir = path.Clean(wd)
	// Docker makes a missing working directory; so does lite (rootless:
	// the runtime does, as it makes a missing cwd).
	if !m.Rootless {
		w := newView(m, dir)
		err := w.mkdirAll(m.WorkDir)
		w.close()
		if err != nil {
			return bundleInput{}, fmt.Errorf("working_dir %q: %w", spec.WorkingDir, err)
		}
	}
	// The agent starts with the sandbox when it can run commands as any
	// user (root) and its socket's host path fits a socket address.
	m.Agent = !m.Once && m.UID == 0 && len(filepath.Join(agentHostDir(dir), agentSocket)) <= maxSocketPath
	var agentHost string
	if m.Agent {
		agentHost = agentHostDir(dir)
		if err := os.MkdirAll(agentHost, 0o700); err != nil {
			return bundleInput{}, err
		}
	}
	uid, gid, wd, agent := m.UID, m.GID, m.WorkDir, m.Agent
	if err := b.update(m, func(cur *meta) { cur.UID, cur.GID, cur.WorkDir, cur.Agent = uid, gid, wd, agent }); err != nil {
		return bundleInput{}, err
	}
	envLayers := []map[string]string{{"HOSTNAME": m.ID, "HOME": home}, envMap(img.config.Env), spec.Env}
	args := initArgs(m, spec, img)
	hosts, hostname, err := writeHostFiles(dir, m.ID)
	if err != nil {
		return bundleInput{}, err
	}
	env := processEnv(envLayers...)
	if m.Once {
		if err := lookCommand(newView(m, dir), args[0], m.WorkDir, env); err != nil {
			return bundleInput{}, err
		}
	}
	pids := b.cfg.pidsLimit()
	if m.Rootless {
		pids = 0 // no cgroup
	}
	return bundleInput{
		id: m.ID, spec: spec, image: &img.config, network: m.Network, pids: pids,
		user: user, env: env, cwd: m.WorkDir, args: args,
		sbxdPath: b.sbxd, hosts: hosts, hostname: hostname, agentDir: agentHost,
	}, nil
}

// initArgs is the container's command line: sbxd's init (with the agent
// when m has one), running the entry's command, or the image's, if any.
func initArgs(m *meta, spec backend.Spec, img *image) []string {
	var cmd []string
	switch {
	case m.Once:
		// The command itself, as a bare runc run or docker run runs it
		// (and not as the image's entrypoint's arguments): sbxd's start
		// would cost more than the rest of what lite adds (see
		// Backend.RunOnce).
		return slices.Clone(spec.Command)
	case spec.ImageCommand:
		cmd = append(slices.Clone(img.config.Entrypoint), img.config.Cmd...)
	case spec.Command != nil:
		cmd = append(slices.Clone(img.config.Entrypoint), spec.Command...)
	}
	args := []string{sbxdPath, "init"}
	if m.Agent {
		args = append(args, "--agent", agentDir+"/"+agentSocket, "--sandbox", m.ID)
	}
	if len(cmd) > 0 {
		args = append(append(args, "--"), cmd...)
	}
	return args
}

// writeHostFiles writes the sandbox's /etc/hosts and /etc/hostname into its
// folder dir (the bundle mounts them) and returns their paths.
func writeHostFiles(dir, id string) (hosts, hostname string, err error) {
	hosts = filepath.Join(dir, "hosts")
	hostname = filepath.Join(dir, "hostname")
	if err := os.WriteFile(hosts, fmt.Appendf(nil, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t%s\n", id), 0o644); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(hostname, []byte(id+"\n"), 0o644); err != nil {
		return "", "", err
	}
	return hosts, hostname, nil
}

// checkVolume checks one of a Spec's mounts: a bind volume's host path
// exists, a named volume (see volumes.go) exists.
func (b *Backend) checkVolume(v backend.Volume) error {
	name := v.Source + ":" + v.Target
	if !path.IsAbs(v.Target) {
		return fmt.Errorf("%w: volume %q: the sandbox path must be absolute", backend.ErrInvalidConfig, name)
	}
	if v.Type == backend.VolumeNamed {
		return b.checkNamedVolume(v)
	}
	if !filepath.IsAbs(v.Source) {
		return fmt.Errorf("%w: volume %q: the host path must be absolute", backend.ErrInvalidConfig, name)
	}
	if _, err := os.Stat(v.Source); err != nil {
		return fmt.Errorf("%w: volume %q: host path does not exist", backend.ErrInvalidConfig, name)
	}
	return nil
}

func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	dir, err := statedir.Get[meta](b.dir, Name, id)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{b: b, id: id, dir: dir}
	sb.thawOrphan(ctx)
	return sb, nil
}

func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	infos, err := statedir.List(b.dir, Name, filter, (*meta).info)
	return withoutStandbys(infos), err
}

func readMeta(dir string) (*meta, error) { return statedir.Read[meta](dir) }

// update applies f to sandbox m.ID's record under the record's lock
// (statedir.Update), so that a change another process makes meanwhile (a
// claim, SetLabels, Renew, Pause) is never lost, and leaves m as the
// record now is. Every change to an existing record goes through here or
// statedir.Update; only Create's first write, of a record nobody else
// knows yet, does not.
func (b *Backend) update(m *meta, f func(*meta)) error {
	var cur *meta
	err := statedir.Update(b.dir, m.ID, func(c *meta) error {
		f(c)
		cur = c
		return nil
	})
	if err != nil {
		return err
	}
	*m = *cur
	return nil
}

func writeMeta(dir string, m *meta) error { return statedir.WriteMeta(dir, m) }

// processTemplate reads the process of a sandbox's OCI config: what every
// exec starts from.
func processTemplate(bundle string) (*specs.Process, error) {
	s, err := readConfig(bundle)
	if err != nil {
		return nil, err
	}
	if s.Process == nil {
		return nil, errors.New("the sandbox's OCI config has no process")
	}
	return s.Process, nil
}

// readConfig reads a bundle's OCI config.
func readConfig(bundle string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, backend.ErrNotFound
		}
		return nil, err
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// writeConfig writes a bundle's OCI config.
func writeConfig(bundle string, s *specs.Spec) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600)
}
