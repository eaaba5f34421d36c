package session

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// Labels a session puts on its sandboxes, besides backend.LabelSession.
const (
	// LabelMembers lists the entry names of the session, comma-separated,
	// so Resume can tell a sandbox removed behind its back.
	LabelMembers = "sandboxkit.session.members"
	// LabelType is the sandbox's initializer type.
	LabelType = "sandboxkit.type"
	// LabelLauncher is the process launching the session (an owner
	// string, see backend.LabelOwner) on every sandbox of a session with
	// no owner (sbx up): sbx gc reaps such a session when its launcher
	// died before the launch completed (LaunchStateOf).
	LabelLauncher = "sandboxkit.session.launcher"
	// LabelLaunched marks the launch as complete: on the session's marker
	// volume, or on each sandbox where the backend can change labels.
	LabelLaunched = "sandboxkit.session.launched"
)

// EnvFile is the session's environment file inside the shared folder
// (OpenSage's convention): one export line per published variable.
const EnvFile = "bashrc"

// DefaultInitializerTimeout bounds waiting for dependencies, provisioning
// and readiness of one sandbox whose entry sets no
// extra.initializer_timeout_sec.
const DefaultInitializerTimeout = 10 * time.Minute

// Launcher launches sessions: the sandboxes of one agent task, made from
// [sandbox.sandboxes.NAME] entries, sharing volumes and a network, started
// concurrently, provisioned in dependency order and probed for readiness.
// The zero Launcher with Config set works; Launch and Resume are the
// shortcuts for it.
type Launcher struct {
	Config *config.Config
	// Backend to use; nil: Open(ctx, Config, Logger), closed with the
	// session.
	Backend backend.Backend
	// Logger; nil: discard.
	Logger *slog.Logger
	// Initializers; nil: initializers.Default().
	Initializers *initializers.Registry
	// Progress, when set, receives each sandbox's steps (from several
	// goroutines, one call at a time).
	Progress func(Progress)
	// BundleProgress, when set, is told when Restore has loaded a
	// bundle's images into the backend ("loaded", with the bytes of the
	// image archive), from the goroutine that loads them.
	BundleProgress func(step string, bytes int64)
	// Loaded, when set, is called by Restore once the bundle's images are
	// loaded and the session's network and volumes made, right before
	// the sandboxes start (sbx move stops the original's then).
	Loaded func()
	// BashToolsDir and SandboxScriptsDir are host folders whose contents
	// fill the session's bash_tools (read-write) and sandbox_scripts
	// (read-only) volumes; "": [sandbox] bash_tools_path and
	// sandbox_scripts_path, else the volumes start empty.
	BashToolsDir, SandboxScriptsDir string
	// Manifest, when set, starts each sandbox it lists from its checkpoint
	// image instead of the entry's image (see Session.Checkpoint).
	Manifest *Manifest
	// ID is the new session's ID; "" picks a random one.
	ID string
	// Owner is set on every resource (see backend.LabelOwner); "" for
	// sessions meant to outlive their creator (sbx up), which then carry
	// LabelLauncher while they launch.
	Owner string

	launcher string // LabelLauncher's value during Launch
	// fillVolumes, set by Restore on its copy, makes each session volume
	// a Manifest holds with its archive in it (VolumeSpec.FromPath, the
	// shared one with the env file added), while the images load, instead
	// of extracting the archives through a sandbox once it runs.
	fillVolumes bool
	// checkOnly: plan for CheckEntries, which makes nothing on the host
	// (config.Config.CheckSpec instead of Spec).
	checkOnly bool
	// forPool, set by a session Pool on its copy, edits each sandbox's
	// Spec (pool labels, TTL) and makes the shared volumes and network
	// without a TTL: a claimed session lives on past a ready one's TTL,
	// and Docker cannot extend a volume's.
	forPool func(*backend.Spec)
}

// Progress is one step of one sandbox of a launch.
type Progress struct {
	Sandbox string
	// Step is one of the Step* constants.
	Step string
	// Detail says more: a pull's layer status, the dependency waited for,
	// a provisioning sub-step, the probe.
	Detail string
	// Current and Total count a pull's bytes (0: unknown).
	Current, Total int64
	// Elapsed is the time since the sandbox's launch began.
	Elapsed time.Duration
	Err     error
}

// Steps of Progress, in the order a sandbox goes through them.
const (
	StepCreating     = "creating"
	StepPulling      = "pulling"
	StepStarted      = "started"
	StepWaiting      = "waiting"
	StepProvisioning = "provisioning"
	StepProbing      = "probing"
	StepReady        = "ready"
	StepFailed       = "failed"
)

// Launch launches a session of the named entries (default: all) with the
// config's backend; see Launcher.
func Launch(ctx context.Context, cfg *config.Config, names ...string) (*Session, error) {
	return (&Launcher{Config: cfg}).Launch(ctx, names...)
}

// Resume reattaches to a running session; see Launcher.Resume.
func Resume(ctx context.Context, cfg *config.Config, id string) (*Session, error) {
	return (&Launcher{Config: cfg}).Resume(ctx, id)
}

// member is one sandbox of a launch.
type member struct {
	name, typ string
	spec      backend.Spec
	init      initializers.Initializer
	cfg       any
	timeout   time.Duration
	deps      []string // entry names
	ready     chan struct{}
	sb        backend.Sandbox
	handle    any
	env       map[string]string
	// cached: the entry's using_cached; its sandbox starts from an image
	// already provisioned, so only readiness runs (OpenSage).
	cached bool
	// mcp waits for the entry's mcp_services after Ready (nil: none);
	// mcpURLs are their SSE URLs once ready.
	mcp     *initializers.MCPServicesProbe
	mcpURLs map[string]string
	// warnings name the entry's [extra] keys nothing of this launch reads
	// (config.Config.ExtraWarnings).
	warnings []string
}

// Error is a failed launch: which sandbox, at which step, and the
// last lines its container wrote.
type Error struct {
	Session string
	Sandbox string
	Step    string
	Err     error
	// Logs are the last lines of the sandbox's output, when the backend
	// can read them.
	Logs string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "session %s: sandbox %q: %s: %v", e.Session, e.Sandbox, e.Step, e.Err)
	if e.Logs != "" {
		fmt.Fprintf(&b, "\nlast lines of %s's output:\n%s", e.Sandbox, strings.TrimRight(e.Logs, "\n"))
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

func newSessionID() string {
	var buf [6]byte
	rand.Read(buf[:])
	return hex.EncodeToString(buf[:])
}

func (l *Launcher) logger() *slog.Logger {
	if l.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l.Logger
}

func (l *Launcher) registry() *initializers.Registry {
	if l.Initializers == nil {
		return initializers.Default()
	}
	return l.Initializers
}

// open returns the backend and whether the session owns it.
func (l *Launcher) open(ctx context.Context) (backend.Backend, bool, error) {
	if l.Backend != nil {
		return l.Backend, false, nil
	}
	if l.Config == nil {
		return nil, false, backend.InvalidConfigf("session: Launcher without Config")
	}
	b, err := l.Config.Open(ctx, l.logger())
	return b, true, err
}

// plan checks every entry and builds the members, before anything is made.
func (l *Launcher) plan(names []string, id string) ([]*member, error) {
	cfg := l.Config
	if len(names) == 0 {
		names = cfg.SandboxNames()
	}
	if len(names) == 0 {
		return nil, cfg.NothingToLaunch()
	}
	names = slices.Sorted(slices.Values(names))
	var errs []error
	var ms []*member
	for i, name := range names {
		if i > 0 && names[i-1] == name {
			continue
		}
		m, err := l.planMember(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ms = append(ms, m)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := resolveDeps(ms); err != nil {
		return nil, err
	}
	for _, m := range ms {
		if l.forPool != nil {
			l.forPool(&m.spec)
		}
		m.spec.Session = id
		m.spec.Owner = l.Owner
		m.spec.Labels = withLabels(m.spec.Labels, map[string]string{
			LabelMembers: strings.Join(names, ","),
			LabelType:    m.typ,
		})
	}
	return ms, nil
}

func withLabels(base, add map[string]string) map[string]string {
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}

// planMember decodes one entry's initializer config and builds its Spec.
func (l *Launcher) planMember(name string) (*member, error) {
	cfg := l.Config
	e, err := cfg.Entry(name)
	if err != nil {
		return nil, err
	}
	specOf := cfg.Spec
	if l.checkOnly {
		specOf = cfg.CheckSpec
	}
	spec, err := specOf(name)
	if err != nil {
		return nil, err
	}
	typ := cmp.Or(e.Type, name)
	f, fallback, err := l.registry().Lookup(typ)
	if err != nil {
		return nil, backend.InvalidConfigf("%s: %s.type: %v", cfg.Describe(), config.EntryKey(name), err)
	}
	if fallback && e.Type != "" && e.Type != name {
		// An explicit type must name an initializer; a bare entry name
		// without one gets the generic initializer, as in OpenSage.
		return nil, backend.InvalidConfigf("%s: %s.type: unknown initializer type %q (known: %s)%s", cfg.Describe(), config.EntryKey(name), e.Type,
			strings.Join(l.registry().Names(), ", "), config.DidYouMean(e.Type, l.registry().Names()))
	}
	var icfg any
	if f.NewConfig != nil {
		icfg = f.NewConfig()
		if err := cfg.DecodeExtra(e, icfg); err != nil {
			return nil, err
		}
	}
	init, err := f.New(icfg)
	if err != nil {
		return nil, backend.InvalidConfigf("%s: %s.extra: %v", cfg.Describe(), config.EntryKey(name), stripSentinel(err))
	}
	m := &member{name: name, typ: typ, init: init, cfg: icfg, cached: e.UsingCached, ready: make(chan struct{})}
	reader := "the " + typ + " initializer"
	if fallback {
		reader = "the " + initializers.GenericType + " initializer"
	}
	m.warnings = cfg.ExtraWarnings(name, reader, keysOf(icfg), l.extraReaders(typ))
	m.timeout = cmp.Or(initializers.TimeoutOf(icfg), DefaultInitializerTimeout)
	m.spec = mergeSpec(init.Spec(), spec, e)
	if l.Manifest != nil {
		if s, ok := l.Manifest.Sandboxes[name]; ok && s.Image != "" {
			m.spec.Image = s.Image
			m.spec.Build = nil
		}
	}
	if p, ok := init.(initializers.Planner); ok {
		p.Plan(m.spec)
	}
	if err := l.planMCP(m, e); err != nil {
		return nil, err
	}
	return m, nil
}

// keysOf is the [extra] keys an initializer's config takes (none for nil).
func keysOf(icfg any) []string {
	if icfg == nil {
		return nil
	}
	return config.Keys(icfg)
}

// extraReaders maps each [extra] key an initializer other than typ reads
// to its readers ("the main initializer"), for config.Config.ExtraWarnings.
func (l *Launcher) extraReaders(typ string) map[string][]string {
	reg := l.registry()
	out := map[string][]string{}
	for _, other := range reg.Names() {
		f, _, err := reg.Lookup(other)
		if other == typ || other == initializers.GenericType || err != nil || f.NewConfig == nil {
			continue
		}
		for _, k := range config.Keys(f.NewConfig()) {
			out[k] = append(out[k], "the "+other+" initializer")
		}
	}
	return out
}

// checkHostPaths checks, before anything is made, that the host files the
// launch reads exist: the shared data and the Dockerfiles of members that
// are built (not started from a Manifest's image).
func (l *Launcher) checkHostPaths(ms []*member) error {
	errs := []error{l.Config.CheckSharedData()}
	for _, m := range ms {
		if m.spec.Build != nil {
			errs = append(errs, l.Config.CheckBuild(m.name))
		}
	}
	return errors.Join(errs...)
}

// stripSentinel drops the "invalid configuration: " prefix an initializer's
// error carries, since the message is wrapped in one again.
func stripSentinel(err error) string {
	return strings.TrimPrefix(err.Error(), backend.ErrInvalidConfig.Error()+": ")
}

// mergeSpec lays the entry's Spec over the initializer's default: keys the
// entry sets win; environment and ports are merged.
func mergeSpec(def, entry backend.Spec, e *config.Entry) backend.Spec {
	out := entry
	if e.Image == "" && def.Image != "" && e.DockerfilePath() == "" {
		out.Image = def.Image
	}
	if e.Command == nil {
		out.Command, out.ImageCommand = def.Command, def.ImageCommand
	}
	out.WorkingDir = cmp.Or(entry.WorkingDir, def.WorkingDir)
	out.User = cmp.Or(entry.User, def.User)
	env := maps.Clone(def.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, entry.Env)
	out.Env = env
	ports := slices.Clone(entry.Ports)
	for _, p := range def.Ports {
		if !slices.ContainsFunc(ports, func(q backend.Port) bool {
			return q.Port == p.Port && cmp.Or(q.Protocol, "tcp") == cmp.Or(p.Protocol, "tcp")
		}) {
			ports = append(ports, p)
		}
	}
	out.Ports = ports
	out.Volumes = append(slices.Clone(def.Volumes), entry.Volumes...)
	out.Labels = withLabels(def.Labels, entry.Labels)
	return out
}

// resolveDeps turns each initializer's DependsOn into entry names and
// refuses missing required dependencies and cycles.
func resolveDeps(ms []*member) error {
	var errs []error
	for _, m := range ms {
		for _, d := range m.init.DependsOn() {
			var found []string
			for _, o := range ms {
				if o != m && (o.typ == d.Name || o.name == d.Name) {
					found = append(found, o.name)
				}
			}
			if len(found) == 0 && !d.Optional {
				errs = append(errs, backend.InvalidConfigf("sandbox %q (type %s) depends on %s, which is not in the session (add a [sandbox.sandboxes.%s] entry, or launch it too)",
					m.name, m.typ, d.Name, d.Name))
			}
			for _, f := range found {
				if !slices.Contains(m.deps, f) {
					m.deps = append(m.deps, f)
				}
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	byName := map[string]*member{}
	for _, m := range ms {
		byName[m.name] = m
	}
	// Depth-first search for a cycle.
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string, path []string) error
	visit = func(n string, path []string) error {
		switch state[n] {
		case 1:
			return backend.InvalidConfigf("sandboxes depend on each other in a cycle: %s", strings.Join(append(path, n), " -> "))
		case 2:
			return nil
		}
		state[n] = 1
		for _, d := range byName[n].deps {
			if err := visit(d, append(path, n)); err != nil {
				return err
			}
		}
		state[n] = 2
		return nil
	}
	for _, m := range ms {
		if err := visit(m.name, nil); err != nil {
			return err
		}
	}
	return nil
}

// Launch launches the named entries (default: every entry) as one
// session. On any failure everything the launch made is removed and the
// error (a *Error when one sandbox failed) names the sandbox, the
// step and the sandbox's last output lines.
func (l *Launcher) Launch(ctx context.Context, names ...string) (*Session, error) {
	p, err := l.prepare(ctx, names)
	if err != nil {
		return nil, err
	}
	return p.run(ctx)
}

// launch is a session whose network and volumes are made and whose
// sandboxes are planned but not created: what Launch does before it needs
// the images, so that Restore does it while they load.
type launch struct {
	l  *Launcher
	s  *Session
	ms []*member
}

// prepare plans the members and makes the session's network and volumes;
// run (or abort) goes on from there. On failure it removes what it made.
func (l *Launcher) prepare(ctx context.Context, names []string) (*launch, error) {
	if l.Config == nil {
		return nil, backend.InvalidConfigf("session: Launcher without Config")
	}
	id := cmp.Or(l.ID, newSessionID())
	ms, err := l.plan(names, id)
	if err != nil {
		return nil, err
	}
	if err := l.checkHostPaths(ms); err != nil {
		return nil, err
	}
	if l.Manifest != nil {
		if err := l.Manifest.checkVolumeArchives(); err != nil {
			return nil, err
		}
	}
	b, owned, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	if l.Owner == "" && canMarkLaunched(b) {
		// A session meant to outlive this process holds a lease while it
		// launches: if this process dies first, gc knows the launch was cut.
		l.launcher = owner.Self()
		for _, m := range ms {
			m.spec.Labels[LabelLauncher] = l.launcher
		}
	}
	p := &launch{l: l, s: &Session{ID: id, backend: b, ownsBackend: owned, log: l.logger()}, ms: ms}
	for _, m := range ms {
		p.s.Warnings = append(p.s.Warnings, m.warnings...)
	}
	p.s.Warnings = append(p.s.Warnings, l.scriptWarnings(ms)...)
	if err := l.makeShared(ctx, p.s, ms); err != nil {
		p.abort(ctx)
		return nil, err
	}
	if err := l.checkManifestVolumes(p.s); err != nil {
		p.abort(ctx)
		return nil, err
	}
	return p, nil
}

// run creates, provisions and probes the sandboxes. On failure everything
// the launch made is removed.
func (p *launch) run(ctx context.Context) (*Session, error) {
	if err := p.l.start(ctx, p.s, p.ms); err != nil {
		p.abort(ctx)
		return nil, err
	}
	if p.l.launcher != "" {
		if err := markLaunched(ctx, p.s, p.ms, p.l.Owner); err != nil {
			p.abort(ctx)
			return nil, fmt.Errorf("session %s: recording that the launch completed: %w", p.s.ID, err)
		}
	}
	p.s.finish(p.ms)
	return p.s, nil
}

// abort removes everything the launch made (also when ctx is done).
func (p *launch) abort(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := p.s.Destroy(cctx); err != nil {
		p.s.log.Warn("removing a failed session", "session", p.s.ID, "err", err)
	}
}

// progress reports one step.
type reporter struct {
	mu    sync.Mutex
	f     func(Progress)
	start time.Time
}

func (r *reporter) report(p Progress) {
	if r.f == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p.Elapsed = time.Since(r.start)
	r.f(p)
}

// start creates every sandbox concurrently, writes the env file, then
// provisions and probes each in dependency order.
func (l *Launcher) start(ctx context.Context, s *Session, ms []*member) error {
	rep := &reporter{f: l.Progress, start: time.Now()}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	// Phase 1: create, all at once.
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			rep.report(Progress{Sandbox: m.name, Step: StepCreating, Detail: m.spec.Image})
			spec := m.spec
			spec.Progress = func(p backend.Progress) {
				rep.report(Progress{Sandbox: m.name, Step: StepPulling, Detail: progressDetail(p), Current: p.Current, Total: p.Total})
			}
			sb, err := s.backend.Create(ctx, spec)
			if err != nil {
				errs[i] = &Error{Session: s.ID, Sandbox: m.name, Step: "create", Err: err}
				rep.report(Progress{Sandbox: m.name, Step: StepFailed, Err: err})
				cancel(errs[i])
				return
			}
			m.sb = sb
			s.addMember(m)
			rep.report(Progress{Sandbox: m.name, Step: StepStarted, Detail: sb.ID()})
		})
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return err
	}

	// A checkpoint's volumes, then the env file (its addresses are this
	// session's), once, before anyone is provisioned.
	if err := l.restoreVolumes(ctx, s); err != nil {
		return err
	}
	if s.shared != "" && !s.envFileFilled() {
		if err := sbfiles.WriteFile(ctx, ms[0].sb, s.shared+"/"+EnvFile, strings.NewReader(envFileText(s.ID, s.Env)), 0o644); err != nil {
			return &Error{Session: s.ID, Sandbox: ms[0].name, Step: "write " + s.shared + "/" + EnvFile, Err: err}
		}
	}

	byName := map[string]*member{}
	for _, m := range ms {
		byName[m.name] = m
	}
	openVolumeModes(ctx, s, byName)

	// Phase 2: provision and probe, each after its dependencies are ready.
	for i, m := range ms {
		wg.Go(func() {
			err := l.bringUp(ctx, s, m, byName, rep)
			if err != nil {
				errs[i] = err
				rep.report(Progress{Sandbox: m.name, Step: StepFailed, Err: err})
				cancel(err)
			}
		})
	}
	wg.Wait()
	return firstError(errs)
}

// openVolumeModes makes the session's read-write volumes (shared,
// bash_tools) writable by every user (mode 0777), as OpenSage does: the
// tools in a sandbox may run as another user than root. It runs chmod in
// the first member that mounts each, as root where the backend can choose
// the user; a failure (an image without chmod) is a warning in
// s.Warnings, not a failed launch.
func openVolumeModes(ctx context.Context, s *Session, byName map[string]*member) {
	targets := map[string][]string{} // member -> targets
	var order []string
	for _, v := range s.volumes {
		if v.readOnly || len(v.members) == 0 || byName[v.members[0]] == nil {
			continue
		}
		m := v.members[0]
		if targets[m] == nil {
			order = append(order, m)
		}
		targets[m] = append(targets[m], v.target)
	}
	for _, name := range order {
		req := backend.ExecRequest{Cmd: append([]string{"chmod", "0777"}, targets[name]...), Timeout: 30 * time.Second}
		if s.backend.Capabilities().User {
			req.User = "0"
		}
		res, err := byName[name].sb.Exec(ctx, req)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stdout)+string(res.Stderr)))
		}
		if err != nil {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s stay writable by root only: chmod 0777 in sandbox %q failed: %v",
				strings.Join(targets[name], " and "), name, err))
		}
	}
}

// firstError returns the error that caused the others: a *Error not
// caused by cancellation, else the first one.
func firstError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, errDependencyFailed) {
			return err
		}
	}
	return first
}

var errDependencyFailed = errors.New("a dependency failed")

func progressDetail(p backend.Progress) string {
	d := p.Status
	if p.ID != "" {
		d = p.ID + ": " + d
	}
	return d
}

// skippedCached is the Progress detail of a provisioning step skipped
// because the entry sets using_cached.
const skippedCached = "skipped: using_cached (the image is already provisioned)"

// bringUp waits for m's dependencies, provisions it (unless its entry sets
// using_cached) and waits for it to be ready.
func (l *Launcher) bringUp(ctx context.Context, s *Session, m *member, byName map[string]*member, rep *reporter) error {
	fail := func(step string, err error) error {
		return &Error{Session: s.ID, Sandbox: m.name, Step: step, Err: err, Logs: lastLogs(m.sb)}
	}
	tctx, tcancel := context.WithTimeoutCause(ctx, m.timeout,
		fmt.Errorf("initializer_timeout_sec (%s) ran out", m.timeout))
	defer tcancel()
	for _, d := range m.deps {
		rep.report(Progress{Sandbox: m.name, Step: StepWaiting, Detail: "for " + d})
		select {
		case <-byName[d].ready:
		case <-tctx.Done():
			if ctx.Err() != nil {
				return fmt.Errorf("sandbox %q: waiting for %s: %w", m.name, d, errDependencyFailed)
			}
			return fail("waiting for "+d, context.Cause(tctx))
		}
	}
	in := &initializers.Instance{
		Name: m.name, Type: m.typ, Session: s.ID, Sandbox: m.sb,
		Shared: s.shared, BashTools: s.bashTools, SandboxScripts: s.scripts,
		Env:    maps.Clone(s.Env),
		Logger: l.logger().With("session", s.ID, "sandbox", m.name),
		Status: func(st string) { rep.report(Progress{Sandbox: m.name, Step: StepProvisioning, Detail: st}) },
	}
	if m.cached {
		rep.report(Progress{Sandbox: m.name, Step: StepProvisioning, Detail: skippedCached})
	} else {
		rep.report(Progress{Sandbox: m.name, Step: StepProvisioning})
		if err := m.init.Provision(tctx, in); err != nil {
			if tctx.Err() != nil && ctx.Err() == nil {
				err = fmt.Errorf("%w (%v)", err, context.Cause(tctx))
			}
			return fail("provision", err)
		}
	}
	if probe := m.init.Ready(); probe != nil {
		rep.report(Progress{Sandbox: m.name, Step: StepProbing, Detail: probe.String()})
		if err := probe.WaitUntilReady(tctx, m.sb); err != nil {
			return fail("ready", err)
		}
	}
	if m.mcp != nil {
		rep.report(Progress{Sandbox: m.name, Step: StepProbing, Detail: m.mcp.String()})
		if err := m.mcp.WaitUntilReady(tctx, m.sb); err != nil {
			return fail("ready", err)
		}
		m.mcpURLs = m.mcp.URLs()
	}
	if h, ok := m.init.(initializers.Handler); ok {
		handle, err := h.Handle(tctx, in)
		if err != nil {
			return fail("handle", err)
		}
		m.handle = handle
	}
	// Reported before dependents are released, so progress shows the
	// order things happened in.
	rep.report(Progress{Sandbox: m.name, Step: StepReady})
	close(m.ready)
	return nil
}

// lastLogs returns the last lines the sandbox wrote, when its backend can
// read them.
func lastLogs(sb backend.Sandbox) string {
	if sb == nil {
		return ""
	}
	lr, ok := backend.As[backend.LogReader](sb)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := lr.Logs(ctx, 20)
	if err != nil {
		return ""
	}
	return string(out)
}

// envFileText is /shared/bashrc: one export per variable, sorted, quoted
// for sh.
func envFileText(id string, env map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sandboxkit session %s: service addresses as seen from inside the session.\n", id)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
	}
	return b.String()
}
