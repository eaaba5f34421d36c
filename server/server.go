package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/fileops"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

// cleanupTimeout bounds destroying one sandbox (reaper, delete, shutdown).
const cleanupTimeout = 60 * time.Second

// Server holds the sandboxes of many conversations on one backend and
// applies the rules: ownership, idle and hard TTLs, output caps. MCPServer
// and Handler expose it to agents; its methods are what their tools call.
// It is safe for concurrent use.
type Server struct {
	opts Options

	// life is cancelled by Close: in-flight calls and server-side jobs end.
	life     context.Context
	stopLife context.CancelFunc
	bg       sync.WaitGroup

	mu     sync.Mutex
	boxes  map[string]*box // by sandbox ID
	closed bool

	// pools are the warm pools by type (Options.Pools); their keepers run
	// in bg until life ends.
	pools map[string]*session.Pool
	// released are the pool sandboxes this run released (guarded by mu):
	// their pool removes them, or takes them back, in the background, and
	// until then the backend still lists them with their conversation's
	// label, which must not find them again.
	released map[string]release

	// adoptRetry, when set, is the conversation filter of an Adopt that
	// failed; the reaper retries it.
	adoptRetry *string

	// osbKey derives the OpenSandbox API's direct execd routes.
	osbKeyOnce sync.Once
	osbKey     []byte

	binMu sync.Mutex
	bins  map[string][]byte // sbxd binaries by architecture

	// budget is Options.BodyBudget (nil: none).
	budget *bodyBudget

	// metrics are served at /metrics; audit is the trail (audit.go).
	metrics *metrics
	audit   *auditLog
	// console holds the console's logins (console.go); started is when
	// New ran.
	console consoleSessions
	started time.Time
}

// box is one sandbox the server knows.
type box struct {
	// conv is the owner's OwnerKey; convName the conversation itself,
	// once a call of it came in this run (guarded by Server.mu).
	id, conv, typ string
	convName      string
	// isolation is what separates the sandbox from the host.
	isolation    backend.Isolation
	idleTTL      time.Duration
	created      time.Time
	hardDeadline time.Time // zero: none

	// Guarded by Server.mu.
	lastActive time.Time
	inflight   int
	gone       bool

	// attach is held while the sandbox is reattached and wrapped.
	attach sync.Mutex
	sb     backend.Sandbox // the backend's, or nil until reattached
	agent  *sbxd.Client    // nil with NoAgent
	tools  *fileops.Tools
	// files is the sandbox the file tools work on (confined on a backend
	// without isolation); the console browses it.
	files backend.Sandbox
	// osbToken is the SHA-256 (hex) of the execd access token it was made
	// with through the OpenSandbox API ("": none); osb are the commands
	// its OpenSandbox execd runs.
	osbToken string
	osb      osbCommands
	osbSess  osbSessions
	// Guarded by Server.mu: until is an expiry the OpenSandbox API renewed
	// to (activity cannot bring it closer); osbMeta the metadata after a
	// PATCH (nil: as the labels say); osbNoExpiry, a sandbox made without
	// a timeout (reaped only at its hard limit).
	until   time.Time
	osbMeta map[string]string
	// labels are the sandbox's labels as registered: with a pool claim's
	// (which some backends keep in a record their Info does not read).
	labels      map[string]string
	osbNoExpiry bool
	jobs        jobRunner
	// claimed is the pool claim the sandbox came from in this run (nil:
	// made without a pool, or adopted): the pool removes it, or takes it
	// back after a clean reset.
	claimed *session.Claimed

	// terms are its programs on pseudo-terminals (terminals.go), killed
	// when the sandbox goes or the server closes. They have a lock of
	// their own.
	terms terminals
}

// release is a sandbox released to its pool: whose it was and when.
type release struct {
	conv string
	at   time.Time
}

// releaseGrace is how long a released sandbox is kept from its
// conversation: longer than a pool takes to remove or reset one.
const releaseGrace = 5 * time.Minute

// New returns a server over opts.Backend. It starts the reaper (see
// Options.ReapInterval) and the keepers of Options.Pools; call Adopt to
// take over the sandboxes an earlier run of the same instance left, and
// Close when done.
func New(opts Options) (*Server, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	caps := opts.Backend.Capabilities()
	var vols []backend.Volume
	for _, v := range opts.Volumes {
		if (v.Type == backend.VolumeNamed && !caps.NamedVolumes) || (v.Type != backend.VolumeNamed && !caps.BindVolumes) {
			opts.Logger.Warn("this backend cannot mount volumes: volume skipped",
				"backend", opts.Backend.Name(), "volume", v.Source+":"+v.Target)
			continue
		}
		vols = append(vols, v)
	}
	opts.Volumes = vols
	life, stop := context.WithCancel(context.Background())
	s := &Server{opts: opts, life: life, stopLife: stop, boxes: map[string]*box{}, released: map[string]release{}, started: time.Now()}
	if opts.BodyBudget > 0 {
		s.budget = &bodyBudget{size: opts.BodyBudget}
	}
	audit, err := newAuditLog(opts.AuditFile, opts.AuditMaxBytes, opts.AuditKeep, opts.Logger.Warn)
	if err != nil {
		stop()
		return nil, fmt.Errorf("server: %w", err)
	}
	s.audit = audit
	s.metrics = newMetrics(s)
	pools, err := s.newPools()
	if err != nil {
		stop()
		audit.close()
		return nil, err
	}
	s.pools = pools
	s.keepPools()
	if opts.ReapInterval > 0 {
		s.bg.Go(s.reapLoop)
	}
	return s, nil
}

func (s *Server) now() time.Time { return s.opts.Now() }

// Adopt takes over the sandboxes of this server's instance that the backend
// still has (from an earlier run): each gets a fresh idle window; those past
// their hard limit are removed. conv, when set, adopts only that
// conversation's.
func (s *Server) Adopt(ctx context.Context, conv string) (int, error) {
	labels := map[string]string{LabelInstance: s.opts.Instance}
	if conv != "" {
		labels[LabelConversation] = OwnerKey(conv)
	}
	infos, err := s.opts.Backend.List(ctx, backend.Filter{Labels: labels})
	s.mu.Lock()
	if err != nil {
		// The reaper tries again, so sandboxes of an earlier run are
		// reaped once the backend is back.
		s.adoptRetry = &conv
	} else {
		s.adoptRetry = nil
	}
	s.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("adopting sandboxes: %w", err)
	}
	n := 0
	for _, info := range infos {
		if _, ok := s.register(info, nil); ok {
			n++
		}
	}
	s.Reap(ctx)
	return n, nil
}

// register adds a sandbox the backend reported, with a fresh idle window,
// unless it is known already. sb may be nil (reattached on first use).
func (s *Server) register(info backend.Info, sb backend.Sandbox) (*box, bool) {
	conv := info.Labels[LabelConversation]
	if conv == "" || info.Labels[LabelInstance] != s.opts.Instance {
		return nil, false
	}
	b := &box{
		id: info.ID, conv: conv, typ: info.Labels[LabelType],
		idleTTL: s.opts.IdleTTL, created: info.CreatedAt, hardDeadline: info.ExpiresAt,
		sb: sb, osbToken: info.Labels[LabelOSBToken], osbNoExpiry: info.Labels[LabelOSBNoTimeout] != "",
		labels: maps.Clone(info.Labels), isolation: info.Isolation,
	}
	if b.isolation == "" {
		b.isolation = s.opts.Backend.Capabilities().Isolation
	}
	if secs, err := strconv.ParseInt(info.Labels[LabelIdleTTL], 10, 64); err == nil && secs > 0 {
		b.idleTTL = time.Duration(secs) * time.Second
	}
	if b.hardDeadline.IsZero() && !b.created.IsZero() {
		b.hardDeadline = b.created.Add(s.opts.MaxLifetime)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.released[info.ID]; ok && r.conv == conv {
		return nil, false
	}
	if old, ok := s.boxes[info.ID]; ok {
		return old, true
	}
	b.lastActive = s.now()
	s.boxes[info.ID] = b
	return b, true
}

// expiry returns when b expires if nothing happens: the earlier of its
// idle deadline and its hard deadline. Called with s.mu held.
func (b *box) expiry() time.Time {
	idle := b.lastActive.Add(b.idleTTL)
	if b.until.After(idle) {
		idle = b.until
	}
	if !b.hardDeadline.IsZero() && b.hardDeadline.Before(idle) {
		return b.hardDeadline
	}
	return idle
}

// Reap removes the sandboxes whose idle TTL or hard limit has run out and
// that no call is using, and returns their IDs. A sandbox running a
// background job is not idle: its idle window starts again.
func (s *Server) Reap(ctx context.Context) []string {
	now := s.now()
	var expired []*box
	s.mu.Lock()
	for _, b := range s.boxes {
		if b.inflight == 0 && !now.Before(b.expiry()) {
			expired = append(expired, b) // a call in flight is activity
		}
	}
	for id, r := range s.released {
		if time.Since(r.at) > releaseGrace {
			delete(s.released, id)
		}
	}
	s.mu.Unlock()
	var dead []*box
	for _, b := range expired {
		if !b.pastHardDeadline(now) && s.jobsRunning(ctx, b) {
			s.renew(b, now)
			continue
		}
		s.mu.Lock()
		// Looked at again: a call may have come since.
		if !b.gone && b.inflight == 0 && !now.Before(b.expiry()) && s.boxes[b.id] == b {
			b.gone = true
			delete(s.boxes, b.id)
			dead = append(dead, b)
		}
		s.mu.Unlock()
	}
	var ids []string
	for _, b := range dead {
		s.opts.Logger.Info("removing expired sandbox", "sandbox", b.id, "conversation", b.conv)
		s.metrics.removals.WithLabelValues(expiryReason(b, now)).Inc()
		if err := s.destroy(ctx, b); err != nil {
			s.opts.Logger.Warn("removing expired sandbox failed (sbx gc will retry after its backend TTL)", "sandbox", b.id, "err", err)
		}
		ids = append(ids, b.id)
	}
	return ids
}

// expiryReason is the removals metric's reason for an expired b.
func expiryReason(b *box, now time.Time) string {
	if b.pastHardDeadline(now) {
		return "lifetime"
	}
	return "idle"
}

// pastHardDeadline reports whether b's hard limit has passed at now.
func (b *box) pastHardDeadline(now time.Time) bool {
	return !b.hardDeadline.IsZero() && !now.Before(b.hardDeadline)
}

// renew starts b's idle window again at now.
func (s *Server) renew(b *box, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !b.gone && b.lastActive.Before(now) {
		b.lastActive = now
	}
}

// jobsCheckTimeout bounds asking a sandbox whether a job runs.
const jobsCheckTimeout = 30 * time.Second

// jobsRunning reports whether a background job runs in b, which keeps it
// from being idle. A sandbox this run has not used yet (adopted) is
// attached to ask its agent, whose jobs outlive a server; one that cannot
// be asked has none.
func (s *Server) jobsRunning(ctx context.Context, b *box) bool {
	ctx, cancel := context.WithTimeout(ctx, jobsCheckTimeout)
	defer cancel()
	b.attach.Lock()
	jobs := b.jobs
	b.attach.Unlock()
	if jobs == nil {
		if s.opts.NoAgent {
			return false // the server's own jobs: none ran in this run
		}
		if err := s.attach(ctx, b, nil); err != nil {
			s.opts.Logger.Debug("cannot ask an idle sandbox for running jobs", "sandbox", b.id, "err", err)
			return false
		}
		b.attach.Lock()
		jobs = b.jobs
		b.attach.Unlock()
	}
	running, err := jobs.running(ctx)
	if err != nil {
		s.opts.Logger.Debug("cannot ask an idle sandbox for running jobs", "sandbox", b.id, "err", err)
	}
	return running
}

func (s *Server) reapLoop() {
	t := time.NewTicker(s.opts.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.life.Done():
			return
		case <-t.C:
			s.mu.Lock()
			retry := s.adoptRetry
			s.mu.Unlock()
			if retry != nil {
				if _, err := s.Adopt(s.life, *retry); err == nil {
					s.opts.Logger.Info("adopted the sandboxes of an earlier run")
				}
			}
			s.Reap(s.life)
		}
	}
}

// destroy removes b's sandbox, also when ctx is already cancelled. A
// sandbox claimed from a pool in this run is released to its pool, which
// removes it in the background (or, where its reset is clean, takes it
// back).
func (s *Server) destroy(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	b.attach.Lock()
	defer b.attach.Unlock()
	b.killTerminals(ctx)
	b.osb.stopAll()
	b.osbSess.killAll()
	if b.jobs != nil {
		b.jobs.close()
	}
	if b.claimed != nil {
		s.mu.Lock()
		s.released[b.id] = release{conv: b.conv, at: time.Now()}
		s.mu.Unlock()
		b.claimed.Release() // closes the agent's client too
		return nil
	}
	if b.agent != nil {
		b.agent.Close()
	}
	sb := b.sb
	if sb == nil {
		var err error
		sb, err = s.opts.Backend.Get(ctx, b.id)
		if errors.Is(err, backend.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return sb.Destroy(ctx)
}

// Close stops the reaper and the pool keepers (which remove their ready
// sandboxes), cancels calls still running and background jobs the server
// itself runs, ends terminal WebSockets and kills the programs on the
// sandboxes' terminals, and, with DeleteOnShutdown, removes every sandbox
// it knows.
// Sandboxes are otherwise kept for a later run to adopt. The backend is
// not closed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	if s.opts.DeleteOnShutdown {
		for _, b := range boxes {
			b.gone = true
		}
		s.boxes = map[string]*box{}
	}
	s.mu.Unlock()
	s.stopLife()
	s.bg.Wait()

	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, b := range boxes {
		wg.Go(func() {
			var err error
			if s.opts.DeleteOnShutdown {
				s.metrics.removals.WithLabelValues("shutdown").Inc()
				err = s.destroy(context.Background(), b)
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
				b.attach.Lock()
				b.killTerminals(ctx)
				if b.jobs != nil {
					b.jobs.close()
				}
				if b.agent != nil {
					err = b.agent.Close()
				}
				b.attach.Unlock()
				cancel()
			}
			if err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("sandbox %s: %w", b.id, err))
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	// The pools remove their ready members and the sandboxes released to
	// them in the background: wait for that.
	ctx, cancel := context.WithTimeout(context.Background(), 2*cleanupTimeout)
	defer cancel()
	for _, p := range s.pools {
		if err := p.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("pool of type %s: removing its sandboxes: %w", p.Name(), err))
		}
	}
	if err := s.audit.close(); err != nil {
		errs = append(errs, fmt.Errorf("closing the audit file: %w", err))
	}
	return errors.Join(errs...)
}
