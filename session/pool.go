package session

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// A Pool keeps ready sandboxes of one config entry so that a task gets one
// in milliseconds: Acquire claims a ready member (atomically, across
// processes, through the backend's Claimer), binds the task's settings to
// it and returns it; with no ready member it makes one, as without a pool.
// Keep runs the keeper that refills the pool.
//
// Members are ordinary sandboxes of the entry, labelled
// backend.LabelPool (the pool's key: the entry's name and Spec) and
// backend.LabelPoolState (ready, then claimed), owned by the keeper
// process while ready (so sbx gc reaps them when it dies) and by the
// task's owner once claimed. A keeper hands out its own members first,
// whose agents are already connected; members of other keepers (another
// sbx serve, sbx pool keep) come next, found with List.
type Pool struct {
	o       PoolOptions
	key     string
	claimer backend.Claimer
	self    string // this process, as a keeper (owner string)
	reuse   bool
	memTTL  time.Duration

	mu     sync.Mutex
	ready  []*warm // this process's ready members, oldest first
	making int
	// returning counts used sandboxes on their way back (released, being
	// reset): the keeper makes no replacement for them.
	returning int
	keeping   bool
	kick      chan struct{}
	changed   chan struct{}   // closed and replaced when ready grows
	out       map[string]bool // sandboxes this process handed to tasks
	st        counters
	bg        sync.WaitGroup
	firsts    firstRuns // tasks' first commands running now
}

// firstRuns counts the first commands of tasks running now, so that
// bookkeeping (recording private claims) waits until the machine is theirs
// no more.
type firstRuns struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0 (nil: never busy yet)
}

func (f *firstRuns) start() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *firstRuns) end() {
	f.mu.Lock()
	if f.n--; f.n == 0 {
		close(f.idle)
	}
	f.mu.Unlock()
}

// quiet returns a channel that is closed once no first command runs.
func (f *firstRuns) quiet() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return f.idle
}

// PoolOptions configure a Pool. Backend, Name, Spec and Settings are
// required.
type PoolOptions struct {
	Backend backend.Backend
	// Name is the config entry; Spec the Spec its sandboxes are made from
	// (Launcher.Standalone's); Provision, when set, prepares each one
	// before it is ready.
	Name      string
	Spec      backend.Spec
	Provision func(ctx context.Context, sb backend.Sandbox) error
	Settings  config.PoolConfig
	// Wrap, when set, wraps every sandbox the pool keeps or hands out, and
	// must leave it ready for a fast first command: sbxd.Wrap followed by
	// starting the agent, so that a member's agent runs and is connected
	// before a task claims it.
	Wrap func(ctx context.Context, sb backend.Sandbox) (backend.Sandbox, error)
	// Logger; nil: discard.
	Logger *slog.Logger
	// Private keeps the members for this process: they stay in state
	// backend.PoolMaking, which no other process claims, so that handing
	// one out needs no claim first; the task's binding (owner, session,
	// TTL, labels) is recorded in the background once its first command
	// and those of the tasks claimed with it have run (a burst), or
	// recordDelay after the claim, whichever comes first, so that the
	// bookkeeping does not compete with first commands for the machine
	// (Claimed's Info and Release wait for it). A process that dies
	// before the record lands leaves a member of a dead keeper, which sbx
	// gc reaps. sbx serve's pools are private; sbx pool keep's are not
	// (sbx run in other processes claims from them).
	Private bool
	// Sessions, when set, makes the pool one of sessions of one entry
	// (for sbx up): each member is launched by a copy of this Launcher
	// as a session of Name alone, with the session's shared volumes and
	// network, and a claim keeps the member's session ID (Binding.Session
	// must be empty). Releasing one removes its whole session. Spec and
	// Provision are then unused.
	Sessions *Launcher
}

// warm is a ready member this process made.
type warm struct {
	sb   backend.Sandbox // wrapped
	raw  backend.Sandbox
	made time.Time
	sess string // its session (session pools)
}

// counters are a pool's figures (see PoolStats).
type counters struct {
	claimed, foreign, cold, created, recycled, returned, failed int64
	made                                                        []time.Time // creation times in the last minute
	lastErr                                                     string
}

// Binding is what a task brings to a sandbox it acquires. Nothing of it
// needs a restart: owner, session, TTL and labels are recorded by the
// claim; env and working directory are applied to every Exec of the
// returned sandbox; files are written before Acquire returns.
type Binding struct {
	// Env is added to every command's environment (a request's own Env
	// wins); WorkDir is the default working directory of commands.
	Env     map[string]string
	WorkDir string
	// Files are written into the sandbox (relative paths against WorkDir,
	// else the sandbox's working directory).
	Files []File
	// Labels are added to the sandbox's.
	Labels map[string]string
	// Owner, Session and TTL are the sandbox's from now on (see
	// backend.Spec); TTL 0 is the entry's TTL.
	Owner   string
	Session string
	TTL     time.Duration
}

// File is one file a Binding writes.
type File struct {
	Path string
	Data []byte
	// Mode defaults to 0644.
	Mode fs.FileMode
}

// PoolKey is the LabelPool value of entry name's members made from spec:
// a hash of both, so that members of an older config are never handed out
// and every process with the same entry shares one pool.
func PoolKey(name string, spec backend.Spec) string {
	spec.Owner, spec.Session, spec.TTL = "", "", 0
	spec.Labels = maps.Clone(spec.Labels)
	delete(spec.Labels, backend.LabelPool)
	delete(spec.Labels, backend.LabelPoolState)
	data, err := json.Marshal(struct {
		Entry string
		backend.Spec
		Progress struct{} // shadows Spec.Progress, a func
	}{Entry: name, Spec: spec})
	if err != nil {
		panic(fmt.Sprintf("session: PoolKey: %v", err)) // Spec is plain data
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// SessionPoolKey is PoolKey for a pool of sessions of entry name alone
// (PoolOptions.Sessions), whose members differ from a sandbox pool's.
func SessionPoolKey(name string, spec backend.Spec) string {
	return PoolKey("session:"+name, spec)
}

// NewPool returns the pool of o.Name. The backend must be a
// backend.Claimer (every built-in backend but opensandbox is).
func NewPool(o PoolOptions) (*Pool, error) {
	if o.Backend == nil || o.Name == "" {
		return nil, backend.InvalidConfigf("session: NewPool needs a Backend and a Name")
	}
	set := o.Settings
	if set.Size < 1 {
		return nil, backend.InvalidConfigf("pool of %q: size must be at least 1, got %d", o.Name, set.Size)
	}
	set.MaxIdle = cmp.Or(set.MaxIdle, config.DefaultPoolMaxIdle)
	set.Refill = min(cmp.Or(set.Refill, config.DefaultPoolRefill), set.Size)
	o.Settings = set
	cl, ok := backend.AsBackend[backend.Claimer](o.Backend)
	if !ok {
		return nil, fmt.Errorf("pool of %q: the %s backend cannot hand a ready sandbox to exactly one task (it is no backend.Claimer): remove the entry's [pool] table: %w",
			o.Name, o.Backend.Name(), errors.ErrUnsupported)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	key := PoolKey(o.Name, o.Spec)
	if o.Sessions != nil {
		key = SessionPoolKey(o.Name, o.Spec)
	}
	p := &Pool{
		o: o, key: key, claimer: cl, self: owner.Self(),
		reuse:   set.ReuseOn() && o.Sessions == nil && cleanReset(o.Backend, o.Spec),
		memTTL:  set.MaxIdle + time.Minute,
		kick:    make(chan struct{}, 1),
		changed: make(chan struct{}),
	}
	return p, nil
}

// readyState is the state of the pool's ready members: PoolReady, or
// PoolMaking in a private pool (see PoolOptions.Private).
func (p *Pool) readyState() string {
	if p.o.Private {
		return backend.PoolMaking
	}
	return backend.PoolReady
}

// cleanReset reports whether b's Reset leaves nothing of a task in
// sandboxes made from spec (backend.CleanResetter).
func cleanReset(b backend.Backend, spec backend.Spec) bool {
	cr, ok := backend.AsBackend[backend.CleanResetter](b)
	return ok && cr.CleanReset(spec)
}

// NewPool returns the pool of entry name as its [pool] table describes it,
// on b; members are made as Standalone makes them. An entry without a
// [pool] table is an error wrapping backend.ErrInvalidConfig.
func (l *Launcher) NewPool(b backend.Backend, name string, wrap func(context.Context, backend.Sandbox) (backend.Sandbox, error)) (*Pool, error) {
	e, err := l.Config.Entry(name)
	if err != nil {
		return nil, err
	}
	set := e.PoolSettings()
	if set == nil {
		return nil, backend.InvalidConfigf("%s: %s has no [pool] table", l.Config.Describe(), config.EntryKey(name))
	}
	spec, provision, err := l.Standalone(name)
	if err != nil {
		return nil, err
	}
	return NewPool(PoolOptions{Backend: b, Name: name, Spec: spec, Provision: provision, Settings: *set, Wrap: wrap, Logger: l.Logger})
}

// NewSessionPool returns the pool of sessions of entry name alone (see
// PoolOptions.Sessions), as its [pool] table describes it, on b: what
// sbx up NAME claims from. The Launcher's Progress reports cold launches.
func (l *Launcher) NewSessionPool(b backend.Backend, name string) (*Pool, error) {
	p, err := l.NewPool(b, name, nil)
	if err != nil {
		return nil, err
	}
	lc := *l
	lc.Backend = b
	o := p.o
	o.Sessions = &lc
	return NewPool(o)
}

// Key is the pool's backend.LabelPool value.
func (p *Pool) Key() string { return p.key }

// Name is the pool's config entry.
func (p *Pool) Name() string { return p.o.Name }

// Settings are the pool's size, max_idle, refill and reuse.
func (p *Pool) Settings() config.PoolConfig { return p.o.Settings }

// Reuses reports whether used sandboxes go back to the pool (reuse is on
// and the backend's Reset is clean).
func (p *Pool) Reuses() bool { return p.reuse }

// Acquire returns a sandbox of the pool's entry bound to b: a ready member
// when there is one, else a new sandbox (a cold start; an empty pool is
// never an error). Release it when the task is done.
func (p *Pool) Acquire(ctx context.Context, b Binding) (*Claimed, error) {
	if p.o.Sessions != nil && b.Session != "" {
		return nil, backend.InvalidConfigf("pool of %q: a session pool keeps each member's own session: Binding.Session must be empty", p.o.Name)
	}
	claim := backend.Claim{Owner: b.Owner, Session: b.Session, TTL: cmp.Or(b.TTL, p.o.Spec.TTL), Labels: b.Labels}
	defer p.wake()
	// This process's members first: their agents are connected.
	for {
		w := p.pop()
		if w == nil {
			break
		}
		claim.Session = cmp.Or(b.Session, w.sess)
		if p.o.Private {
			// Nobody else can have it: recorded while the task starts.
			claim.Expect = backend.PoolMaking
			c, err := p.bind(ctx, w.sb, w.raw, w.sess, b, true)
			if err != nil {
				return nil, err
			}
			c.recordLater(claim)
			p.count(func(c *counters) { c.claimed++ })
			return c, nil
		}
		if _, err := p.claimer.Claim(ctx, w.raw.ID(), claim); err != nil {
			closeQuietly(w.sb)
			if errors.Is(err, backend.ErrClaimed) || errors.Is(err, backend.ErrNotFound) {
				continue // another process took it, or it is gone
			}
			return nil, p.fail(err)
		}
		p.count(func(c *counters) { c.claimed++ })
		return p.bind(ctx, w.sb, w.raw, w.sess, b, true)
	}
	// Then other keepers' members.
	infos, err := p.o.Backend.List(ctx, backend.Filter{Name: p.o.Spec.Name, Labels: map[string]string{
		backend.LabelPool: p.key, backend.LabelPoolState: backend.PoolReady}})
	if err != nil {
		return nil, p.fail(err)
	}
	rand.Shuffle(len(infos), func(i, j int) { infos[i], infos[j] = infos[j], infos[i] })
	for _, info := range infos {
		if info.State != backend.StateRunning {
			continue
		}
		claim.Session = cmp.Or(b.Session, info.Session)
		if _, err := p.claimer.Claim(ctx, info.ID, claim); err != nil {
			if errors.Is(err, backend.ErrClaimed) || errors.Is(err, backend.ErrNotFound) {
				continue
			}
			return nil, p.fail(err)
		}
		raw, err := p.o.Backend.Get(ctx, info.ID)
		if err != nil {
			return nil, p.fail(err)
		}
		sb, err := p.wrap(ctx, raw)
		if err != nil {
			p.destroyLater(raw, info.Session)
			return nil, p.fail(err)
		}
		p.count(func(c *counters) { c.claimed++; c.foreign++ })
		return p.bind(ctx, sb, raw, info.Session, b, true)
	}
	// Cold: made for this task, as without a pool.
	p.count(func(c *counters) { c.cold++ })
	if p.o.Sessions != nil {
		return p.coldSession(ctx, b)
	}
	spec := p.memberSpec(backend.PoolClaimed)
	spec.Owner, spec.Session, spec.TTL = claim.Owner, claim.Session, claim.TTL
	for k, v := range b.Labels {
		spec.Labels[k] = v
	}
	sb, raw, _, err := p.make(ctx, spec)
	if err != nil {
		return nil, p.fail(err)
	}
	return p.bind(ctx, sb, raw, "", b, false)
}

// coldSession launches a session of the entry for b, as without a pool.
func (p *Pool) coldSession(ctx context.Context, b Binding) (*Claimed, error) {
	l := *p.o.Sessions
	l.Owner, l.ID = b.Owner, ""
	if len(b.Labels) > 0 || b.TTL > 0 {
		l.forPool = func(spec *backend.Spec) {
			maps.Copy(spec.Labels, b.Labels)
			spec.TTL = cmp.Or(b.TTL, spec.TTL)
		}
	}
	s, err := l.Launch(ctx, p.o.Name)
	if err != nil {
		return nil, p.fail(err)
	}
	raw, err := s.Sandbox(p.o.Name)
	if err != nil {
		return nil, p.fail(err)
	}
	sb, err := p.wrap(ctx, raw)
	if err != nil {
		p.destroyLater(raw, s.ID)
		return nil, p.fail(err)
	}
	return p.bind(ctx, sb, raw, s.ID, b, false)
}

// memberSpec is the Spec of a member made in state.
func (p *Pool) memberSpec(state string) backend.Spec {
	spec := p.o.Spec
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[backend.LabelPool] = p.key
	spec.Labels[backend.LabelPoolState] = state
	return spec
}

// make creates, provisions and wraps a sandbox (launches a session of one,
// in a session pool); on failure nothing is left.
func (p *Pool) make(ctx context.Context, spec backend.Spec) (sb, raw backend.Sandbox, sess string, err error) {
	if p.o.Sessions != nil {
		l := *p.o.Sessions
		l.Owner, l.ID, l.Progress = spec.Owner, "", nil
		l.forPool = func(s *backend.Spec) {
			maps.Copy(s.Labels, spec.Labels)
			s.TTL, s.Ahead = spec.TTL, spec.Ahead
		}
		s, err := l.Launch(ctx, p.o.Name)
		if err != nil {
			return nil, nil, "", err
		}
		if raw, err = s.Sandbox(p.o.Name); err != nil {
			p.destroyNow(nil, s.ID)
			return nil, nil, "", err
		}
		sess = s.ID
	} else {
		if raw, err = p.o.Backend.Create(ctx, spec); err != nil {
			return nil, nil, "", err
		}
		if p.o.Provision != nil {
			if err := p.o.Provision(ctx, raw); err != nil {
				p.destroyNow(raw, "")
				return nil, nil, "", err
			}
		}
	}
	if sb, err = p.wrap(ctx, raw); err != nil {
		p.destroyNow(raw, sess)
		return nil, nil, "", err
	}
	return sb, raw, sess, nil
}

func (p *Pool) wrap(ctx context.Context, raw backend.Sandbox) (backend.Sandbox, error) {
	if p.o.Wrap == nil {
		return raw, nil
	}
	return p.o.Wrap(ctx, raw)
}

// bind applies b to a claimed sandbox.
func (p *Pool) bind(ctx context.Context, sb, raw backend.Sandbox, sess string, b Binding, warm bool) (*Claimed, error) {
	c := &Claimed{Sandbox: sb, Warm: warm, pool: p, raw: raw, env: maps.Clone(b.Env), dir: b.WorkDir}
	if p.o.Sessions != nil {
		c.Session = sess
	}
	p.mu.Lock()
	if p.out == nil {
		p.out = map[string]bool{}
	}
	p.out[raw.ID()] = true
	p.mu.Unlock()
	for k := range b.Labels {
		c.labels = append(c.labels, k)
	}
	for _, f := range b.Files {
		name := f.Path
		if !path.IsAbs(name) && b.WorkDir != "" {
			name = path.Join(b.WorkDir, name)
		}
		mode := cmp.Or(f.Mode, 0o644)
		if err := sbfiles.WriteFile(ctx, sb, name, bytes.NewReader(f.Data), mode); err != nil {
			p.destroyLater(sb, c.Session)
			return nil, fmt.Errorf("pool of %q: writing %s into sandbox %s: %w", p.o.Name, name, sb.ID(), err)
		}
	}
	return c, nil
}

func (p *Pool) fail(err error) error {
	p.count(func(c *counters) { c.lastErr = err.Error() })
	return fmt.Errorf("pool of %q: %w", p.o.Name, err)
}

func (p *Pool) count(f func(*counters)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.st)
}

// pop takes this process's oldest ready member.
func (p *Pool) pop() *warm {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ready) == 0 {
		return nil
	}
	w := p.ready[0]
	p.ready = p.ready[1:]
	return w
}

func (p *Pool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Claimed is a sandbox Acquire returned: its Exec applies the Binding's
// environment and working directory.
type Claimed struct {
	backend.Sandbox
	// Warm: it came ready from the pool (false: made for this task).
	Warm bool
	// Session is the session the sandbox is the one member of, in a
	// session pool (see PoolOptions.Sessions).
	Session string

	pool     *Pool
	raw      backend.Sandbox
	env      map[string]string
	dir      string
	labels   []string
	released sync.Once
	counted  bool          // Release counted it in the pool's returning
	recorded chan struct{} // closed when a private claim is recorded (nil: it was at once)
	// A private claim is recorded once firstDone is closed (by the first
	// Exec's end) and the pool's first commands are over, or at once when
	// recordNow is closed (by kick), or after recordDelay.
	recordNow, firstDone chan struct{}
	kickOnce, firstOnce  sync.Once
}

// recordDelay bounds how long a private claim waits for first commands
// before it is recorded anyway.
const recordDelay = 250 * time.Millisecond

// recordLater records a private pool's claim in the background, once the
// first commands are over (see PoolOptions.Private) or kick asks.
func (c *Claimed) recordLater(claim backend.Claim) {
	p := c.pool
	c.recorded, c.recordNow, c.firstDone = make(chan struct{}), make(chan struct{}), make(chan struct{})
	p.bg.Go(func() {
		defer close(c.recorded)
		t := time.NewTimer(recordDelay)
		defer t.Stop()
		select {
		case <-c.recordNow:
		case <-t.C:
		case <-c.firstDone:
			select {
			case <-c.recordNow:
			case <-t.C:
			case <-p.firsts.quiet():
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := p.claimer.Claim(ctx, c.raw.ID(), claim); err != nil {
			p.count(func(s *counters) { s.lastErr = err.Error() })
			p.o.Logger.Warn("pool: recording a claim failed; the sandbox stays its keeper's", "pool", p.o.Name, "sandbox", c.raw.ID(), "err", err)
		}
	})
}

// kick lets a private claim be recorded now.
func (c *Claimed) kick() {
	if c.recordNow != nil {
		c.kickOnce.Do(func() { close(c.recordNow) })
	}
}

// waitRecorded waits until the claim is recorded (or ctx ends).
func (c *Claimed) waitRecorded(ctx context.Context) error {
	if c.recorded == nil {
		return nil
	}
	c.kick()
	select {
	case <-c.recorded:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Info is the sandbox's, once its claim is recorded.
func (c *Claimed) Info(ctx context.Context) (backend.Info, error) {
	if err := c.waitRecorded(ctx); err != nil {
		return backend.Info{}, err
	}
	return c.Sandbox.Info(ctx)
}

// Unwrap returns the sandbox the binding wraps.
func (c *Claimed) Unwrap() backend.Sandbox { return c.Sandbox }

// Exec runs req with the binding's environment (req.Env wins) and working
// directory (when req sets none).
func (c *Claimed) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if len(c.env) > 0 {
		env := maps.Clone(c.env)
		maps.Copy(env, req.Env)
		req.Env = env
	}
	if req.WorkDir == "" {
		req.WorkDir = c.dir
	}
	first := false
	if c.firstDone != nil {
		c.firstOnce.Do(func() { first = true })
	}
	if first {
		c.pool.firsts.start()
		defer func() {
			c.pool.firsts.end()
			close(c.firstDone)
		}()
	}
	return c.Sandbox.Exec(ctx, req)
}

// Release ends the task's use of the sandbox: where the pool reuses
// sandboxes (a clean Reset) it goes back to the pool, else it is removed.
// Both happen in the background; Pool.Close waits for them.
func (c *Claimed) Release() {
	c.released.Do(func() {
		p := c.pool
		if c.counted = c.goesBack(); c.counted {
			p.mu.Lock()
			p.returning++
			p.mu.Unlock()
		}
		if c.recorded != nil {
			c.kick()
			// After its claim is recorded, so that the two never race.
			p.bg.Go(func() {
				<-c.recorded
				c.release()
			})
			return
		}
		c.release()
	})
}

// goesBack reports whether the released sandbox is to go back to the
// pool: the pool reuses sandboxes, is kept, and the sandbox can be reset
// and is no session's.
func (c *Claimed) goesBack() bool {
	p := c.pool
	_, ok := backend.As[backend.Resetter](c.raw)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reuse && p.keeping && ok && c.Session == ""
}

func (c *Claimed) release() {
	p := c.pool
	p.mu.Lock()
	delete(p.out, c.raw.ID())
	p.mu.Unlock()
	rs, _ := backend.As[backend.Resetter](c.raw)
	if !c.goesBack() {
		p.returned(c)
		p.destroyLater(c.Sandbox, c.Session)
		return
	}
	p.bg.Go(func() {
		err := p.giveBack(c, rs)
		p.returned(c)
		if err != nil {
			p.o.Logger.Warn("pool: a used sandbox could not go back to the pool; removing it", "pool", p.o.Name, "sandbox", c.raw.ID(), "err", err)
			p.destroyNow(c.Sandbox, "")
		}
	})
}

// returned ends c's count in returning, if Release counted it, and wakes
// the keeper, which makes a replacement for one that did not come back.
func (p *Pool) returned(c *Claimed) {
	if !c.counted {
		return
	}
	p.mu.Lock()
	p.returning--
	p.mu.Unlock()
	p.wake()
}

// settleWait bounds how long a used sandbox waits to settle (see
// backend.Settler) before it is ready again anyway.
const settleWait = 5 * time.Second

// giveBack resets a used sandbox and makes it a ready member again.
func (p *Pool) giveBack(c *Claimed, rs backend.Resetter) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	closeQuietly(c.Sandbox)
	if err := rs.Reset(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	sb, err := p.wrap(ctx, c.raw)
	if err != nil {
		return err
	}
	// A Reset starts a new agent: its first command goes here, as a new
	// member's does, not to the next task.
	if err := warmUp(ctx, sb); err != nil {
		closeQuietly(sb)
		return err
	}
	// Ready once the backend's own work for it is done too (lite makes
	// the container of the next Reset): a task claiming it would compete
	// with that work. Not longer than settleWait, though: that work is
	// made at low CPU weight, which a busy host starves, and a pool whose
	// members wait for it serves cold starts meanwhile.
	if st, ok := backend.As[backend.Settler](c.raw); ok {
		sctx, cancel := context.WithTimeout(ctx, settleWait)
		err := st.Settle(sctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			closeQuietly(sb)
			return fmt.Errorf("settling after the reset: %w", err)
		}
	}
	p.mu.Lock()
	keeping := p.keeping
	p.mu.Unlock()
	if !keeping {
		p.destroyNow(sb, "") // still the task's claim: nobody else has it
		return nil
	}
	drop := map[string]string{}
	for _, k := range c.labels {
		if _, keep := p.o.Spec.Labels[k]; !keep {
			drop[k] = ""
		}
	}
	if _, err := p.claimer.Claim(ctx, c.raw.ID(), backend.Claim{Expect: backend.PoolClaimed, State: p.readyState(),
		Owner: p.self, TTL: p.memTTL, Labels: drop}); err != nil {
		closeQuietly(sb)
		return fmt.Errorf("back to ready: %w", err)
	}
	w := &warm{sb: sb, raw: c.raw, made: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.keeping {
		p.retireLater(w)
		return nil
	}
	p.st.returned++
	// First in line: a reused sandbox is as good as a new one, and the
	// keeper trims the pool back to its size from the other end.
	p.addReady(w, true)
	return nil
}

// destroyLater removes sb (with its session sess, in a session pool) in
// the background.
func (p *Pool) destroyLater(sb backend.Sandbox, sess string) {
	p.bg.Go(func() { p.destroyNow(sb, sess) })
}

func (p *Pool) destroyNow(sb backend.Sandbox, sess string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if sess != "" && p.o.Sessions != nil {
		l := *p.o.Sessions
		if s, err := l.Resume(ctx, sess); err != nil {
			p.o.Logger.Warn("pool: removing a session", "pool", p.o.Name, "session", sess, "err", err)
		} else if err := s.Destroy(ctx); err != nil {
			p.o.Logger.Warn("pool: removing a session", "pool", p.o.Name, "session", sess, "err", err)
		}
	} else if sb != nil {
		if err := sb.Destroy(ctx); err != nil {
			p.o.Logger.Warn("pool: removing a sandbox", "pool", p.o.Name, "sandbox", sb.ID(), "err", err)
		}
	}
	if sb != nil {
		closeQuietly(sb)
	}
}

// Close waits for the sandboxes being removed or reset in the background
// (Release, Keep's end), or for ctx.
func (p *Pool) Close(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func closeQuietly(sb backend.Sandbox) {
	if c, ok := sb.(io.Closer); ok {
		c.Close()
	}
}

// refillDelay is how long a keeper waits after a claim before it makes a
// replacement.
const refillDelay = 25 * time.Millisecond

// Keep keeps the pool full until ctx ends: it makes members (Refill at
// once) until Size are ready, replaces members older than MaxIdle, and
// notices members other processes claimed. When ctx ends it removes the
// ready members it made and returns. One Keep per Pool.
func (p *Pool) Keep(ctx context.Context) error {
	p.mu.Lock()
	if p.keeping {
		p.mu.Unlock()
		return fmt.Errorf("pool of %q: already kept", p.o.Name)
	}
	p.keeping = true
	p.mu.Unlock()
	defer p.drain()

	made := make(chan error, p.o.Settings.Refill)
	backoff := time.Duration(0)
	var retry <-chan time.Time
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if retry == nil {
			p.fill(ctx, made)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-made:
			if err != nil {
				backoff = min(max(2*backoff, 500*time.Millisecond), 30*time.Second)
				retry = time.After(backoff)
			} else {
				backoff = 0
			}
		case <-retry:
			retry = nil
		case <-p.kick:
			// A claim: refill a moment later, so that making a sandbox
			// does not compete with the task's first command.
			if retry == nil {
				retry = time.After(refillDelay)
			}
		case <-tick.C:
			p.recycle(ctx)
			p.reconcile(ctx)
		}
	}
}

// fill starts as many creations as the pool lacks, Refill at a time, and
// removes the newest members beyond its size (sandboxes handed back after
// a Reset can make it overflow).
func (p *Pool) fill(ctx context.Context, made chan<- error) {
	p.mu.Lock()
	var extra []*warm
	if over := len(p.ready) - p.o.Settings.Size; over > 0 {
		extra = slices.Clone(p.ready[len(p.ready)-over:])
		p.ready = p.ready[:len(p.ready)-over]
	}
	p.mu.Unlock()
	for _, w := range extra {
		p.retire(ctx, w, nil)
	}
	p.mu.Lock()
	n := min(p.o.Settings.Size-len(p.ready)-p.making-p.returning, p.o.Settings.Refill-p.making)
	p.making += max(n, 0)
	p.mu.Unlock()
	for range n {
		p.bg.Go(func() {
			err := p.addMember(ctx)
			p.mu.Lock()
			p.making--
			p.mu.Unlock()
			select {
			case made <- err:
			case <-ctx.Done():
			}
		})
	}
}

// warmUp runs one command in a sandbox before it becomes a ready member
// (new, or reset and given back): a member that cannot run one is never
// handed out, and a task's first command does not pay for the agent's
// first (a fresh agent's is slower).
func warmUp(ctx context.Context, sb backend.Sandbox) error {
	if _, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}}); err != nil {
		return fmt.Errorf("cannot run a command: %w", err)
	}
	return nil
}

// addMember makes one ready member.
func (p *Pool) addMember(ctx context.Context) error {
	// Made as "making", so that no other process claims it before it is
	// provisioned, then claimed to ready by this keeper.
	spec := p.memberSpec(backend.PoolMaking)
	spec.Owner, spec.Session, spec.TTL = p.self, "", p.memTTL
	// Nobody waits for it: made beside the tasks' commands, not before them.
	spec.Ahead = true
	sb, raw, sess, err := p.make(ctx, spec)
	if err == nil {
		if werr := warmUp(ctx, sb); werr != nil && ctx.Err() == nil {
			p.destroyLater(sb, sess)
			err = fmt.Errorf("the new sandbox %w", werr)
		}
	}
	if err == nil && ctx.Err() != nil {
		p.destroyLater(sb, sess) // still making: nobody else can have it
		err = ctx.Err()
	} else if err == nil && !p.o.Private {
		_, err = p.claimer.Claim(ctx, raw.ID(), backend.Claim{Expect: backend.PoolMaking, State: backend.PoolReady,
			Owner: p.self, Session: sess, TTL: p.memTTL})
		if err != nil {
			p.destroyLater(sb, sess)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			p.count(func(c *counters) { c.failed++; c.lastErr = err.Error() })
			p.o.Logger.Warn("pool: making a ready sandbox failed", "pool", p.o.Name, "err", err)
		}
		return err
	}
	now := time.Now()
	w := &warm{sb: sb, raw: raw, made: now, sess: sess}
	p.mu.Lock()
	defer p.mu.Unlock()
	if ctx.Err() != nil {
		// Ready already: another process may be claiming it, so it is
		// claimed back before it is removed.
		p.retireLater(w)
		return ctx.Err()
	}
	p.addReady(w, false)
	p.st.created++
	p.st.made = append(pruneMinute(p.st.made, now), now)
	return nil
}

// addReady adds w to the ready members, first in line or last, and wakes
// Ready's waiters; p.mu is held.
func (p *Pool) addReady(w *warm, first bool) {
	if first {
		p.ready = slices.Insert(p.ready, 0, w)
	} else {
		p.ready = append(p.ready, w)
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// retireLater retires w in the background, whatever context its caller
// had.
func (p *Pool) retireLater(w *warm) {
	p.bg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.retire(ctx, w, nil)
	})
}

func pruneMinute(ts []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(ts) && now.Sub(ts[i]) > time.Minute {
		i++
	}
	return ts[i:]
}

// recycle replaces members older than MaxIdle: each is claimed first, so
// that no other process is handed a sandbox being removed.
func (p *Pool) recycle(ctx context.Context) {
	old := p.takeReady(func(w *warm) bool { return time.Since(w.made) >= p.o.Settings.MaxIdle })
	for _, w := range old {
		p.retire(ctx, w, func(c *counters) { c.recycled++ })
	}
}

// takeReady removes the ready members for which take is true from the
// ready list and returns them.
func (p *Pool) takeReady(take func(*warm) bool) []*warm {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*warm
	p.ready = slices.DeleteFunc(p.ready, func(w *warm) bool {
		if take(w) {
			out = append(out, w)
			return true
		}
		return false
	})
	return out
}

// retire claims a member of this process for itself and removes it.
func (p *Pool) retire(ctx context.Context, w *warm, count func(*counters)) {
	if _, err := p.claimer.Claim(ctx, w.raw.ID(), backend.Claim{Expect: p.readyState(), Owner: p.self, Session: w.sess, TTL: time.Hour}); err != nil {
		if !errors.Is(err, backend.ErrClaimed) && !errors.Is(err, backend.ErrNotFound) {
			// Not another claimer's doing: the member may still be
			// ready, and then it is left to gc (as a dead keeper's).
			p.o.Logger.Warn("pool: taking a ready sandbox back to remove it failed; sbx gc removes it once this keeper is gone",
				"pool", p.o.Name, "sandbox", w.raw.ID(), "err", err)
		}
		closeQuietly(w.sb) // another process claimed it: it is theirs now
		return
	}
	if count != nil {
		p.count(count)
	}
	p.destroyLater(w.sb, w.sess)
}

// reconcile drops the members other processes claimed from this process's
// ready list, so that they are replaced, and removes members that read as
// claimed but still belong to this keeper: a claim whose claimer died
// before recording it (a Docker claim record lost) is nobody's task.
//
// Members are listed by the name they are made with (the Spec's, which a
// program building its own Spec may leave empty or set otherwise than
// the entry's Name), as Acquire lists foreign ones.
func (p *Pool) reconcile(ctx context.Context) {
	infos, err := p.o.Backend.List(ctx, backend.Filter{Name: p.o.Spec.Name, Labels: map[string]string{
		backend.LabelPool: p.key, backend.LabelOwner: p.self}})
	if err != nil {
		return
	}
	still := map[string]bool{}
	var lost []backend.Info
	for _, i := range infos {
		switch i.Labels[backend.LabelPoolState] {
		case p.readyState():
			still[i.ID] = true
		case backend.PoolClaimed:
			if time.Since(i.CreatedAt) > time.Minute {
				lost = append(lost, i)
			}
		}
	}
	p.mu.Lock()
	lost = slices.DeleteFunc(lost, func(i backend.Info) bool { return p.out[i.ID] })
	p.mu.Unlock()
	// A member made after List ran may not be listed yet.
	gone := p.takeReady(func(w *warm) bool { return !still[w.raw.ID()] && time.Since(w.made) >= 2*time.Second })
	for _, w := range gone {
		closeQuietly(w.sb)
	}
	if len(gone) > 0 {
		p.wake()
	}
	for _, i := range lost {
		if sb, err := p.o.Backend.Get(ctx, i.ID); err == nil {
			p.destroyLater(sb, i.Session)
		}
	}
}

// drain removes this process's ready members when Keep ends.
func (p *Pool) drain() {
	p.mu.Lock()
	p.keeping = false
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, w := range ready {
		p.retire(ctx, w, nil)
	}
}

// PoolStats are a pool's figures as this process sees them.
type PoolStats struct {
	Entry   string `json:"entry"`
	Pool    string `json:"pool"`
	Backend string `json:"backend"`
	Size    int    `json:"size"`
	// Ready: members this process keeps ready; Making: being made;
	// Returning: used sandboxes on their way back (being reset and
	// settled), for which no replacement is made.
	Ready     int `json:"ready"`
	Making    int `json:"making"`
	Returning int `json:"returning"`
	// Claimed: tasks served from the pool (Foreign of them with members
	// of another keeper); ColdFallbacks: tasks that found it empty.
	Claimed       int64 `json:"claimed"`
	Foreign       int64 `json:"claimed_from_other_keepers"`
	ColdFallbacks int64 `json:"cold_fallbacks"`
	// Created: members made; Recycled: replaced at max_idle; Returned:
	// handed back after a clean Reset; Failed: creations that failed.
	Created  int64 `json:"created"`
	Recycled int64 `json:"recycled"`
	Returned int64 `json:"returned"`
	Failed   int64 `json:"failed"`
	// RefillPerMinute: members made in the last minute.
	RefillPerMinute int `json:"refill_per_minute"`
	// OldestAge and MeanAge of the ready members, in seconds.
	OldestAge float64 `json:"oldest_age_sec"`
	MeanAge   float64 `json:"mean_age_sec"`
	Keeping   bool    `json:"keeping"`
	Private   bool    `json:"private"`
	Reuse     bool    `json:"reuse"`
	LastError string  `json:"last_error,omitempty"`
}

// Stats returns the pool's figures.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	s := PoolStats{
		Entry: p.o.Name, Pool: p.key, Backend: p.o.Backend.Name(), Size: p.o.Settings.Size,
		Ready: len(p.ready), Making: p.making, Returning: p.returning,
		Claimed: p.st.claimed, Foreign: p.st.foreign, ColdFallbacks: p.st.cold,
		Created: p.st.created, Recycled: p.st.recycled, Returned: p.st.returned, Failed: p.st.failed,
		RefillPerMinute: len(pruneMinute(p.st.made, now)), Keeping: p.keeping, Private: p.o.Private, Reuse: p.reuse, LastError: p.st.lastErr,
	}
	var sum time.Duration
	for _, w := range p.ready {
		age := now.Sub(w.made)
		sum += age
		s.OldestAge = max(s.OldestAge, age.Seconds())
	}
	if len(p.ready) > 0 {
		s.MeanAge = (sum / time.Duration(len(p.ready))).Seconds()
	}
	return s
}

// Ready waits until the pool has n ready members of this process (at most
// Size), or ctx ends.
func (p *Pool) Ready(ctx context.Context, n int) error {
	n = min(n, p.o.Settings.Size)
	for {
		p.mu.Lock()
		got, changed := len(p.ready), p.changed
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pool of %q: %d of %d ready: %w", p.o.Name, got, n, context.Cause(ctx))
		case <-changed:
		}
	}
}
