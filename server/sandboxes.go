package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/fileops"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

// SandboxInfo is what the server tells a conversation about one of its
// sandboxes.
type SandboxInfo struct {
	ID   string `json:"sandbox_id"`
	Type string `json:"type"`
	// Isolation is what separates the sandbox from the host: none,
	// container, gvisor or vm.
	Isolation backend.Isolation `json:"isolation"`
	// IdleTTL is how long the sandbox lives without tool calls.
	IdleTTL time.Duration `json:"-"`
	// ExpiresAt is when it is removed if no tool call comes first;
	// HardDeadline when it is removed anyway (zero: never).
	ExpiresAt    time.Time `json:"expires_at"`
	HardDeadline time.Time `json:"hard_deadline,omitzero"`
}

// toolError is a message for the agent (see fileops.ToolError).
func toolError(format string, args ...any) error {
	return &fileops.ToolError{Text: "Error: " + fmt.Sprintf(format, args...)}
}

// errGone is what a conversation hears about a sandbox it cannot use: one
// that is gone, never existed or belongs to another conversation (which it
// must not learn).
func errGone(id string) error {
	return goneError{toolError("Sandbox '%s' was not found: it expired, was deleted, or was never created in this conversation. "+
		"Call create_sandbox to make a new one.", id).(*fileops.ToolError)}
}

// errSandboxGone matches (errors.Is) every error errGone makes.
var errSandboxGone = errors.New("sandbox gone")

// goneError is errGone's error: the agent's message (a ToolError, for
// errors.As) that errors.Is also finds as errSandboxGone.
type goneError struct{ te *fileops.ToolError }

func (e goneError) Error() string   { return e.te.Error() }
func (e goneError) Unwrap() []error { return []error{e.te, errSandboxGone} }

// errNoConversation: the caller did not say whose call this is.
var errNoConversation = toolError("no conversation: HTTP callers must send an X-Conversation-Id header")

// errShutdown: the server is stopping.
var errShutdown = toolError("the sandbox server is shutting down; retry in a moment")

func (s *Server) info(b *box) SandboxInfo {
	return SandboxInfo{ID: b.id, Type: b.typ, Isolation: b.isolation, IdleTTL: b.idleTTL, ExpiresAt: b.expiry(), HardDeadline: b.hardDeadline}
}

// callContext is ctx, also cancelled when the server closes.
func (s *Server) callContext(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life, cancel)
	return ctx, func() { stop(); cancel() }
}

// Create makes a sandbox of type typ ("" for the first of Options.Types)
// for conversation conv, expiring after idle without tool calls (0: the
// server's idle TTL; at most MaxLifetime). A type with a pool claims one of
// its ready sandboxes (a new one when none is ready).
func (s *Server) Create(ctx context.Context, conv, typ string, idle time.Duration) (SandboxInfo, error) {
	return s.create(ctx, conv, typ, idle, nil, nil)
}

// create is Create; custom, when set, changes the type's Spec (the
// OpenSandbox API's image, entrypoint, environment and limits), and such a
// sandbox never comes from a pool; extra labels go on the sandbox either way
// (with the claim, for one from a pool).
func (s *Server) create(ctx context.Context, conv, typ string, idle time.Duration, custom func(*backend.Spec) error, extra map[string]string) (_ SandboxInfo, failed error) {
	if conv == "" {
		return SandboxInfo{}, errNoConversation
	}
	typ = cmp.Or(typ, s.opts.Types[0])
	if !slices.Contains(s.opts.Types, typ) {
		return SandboxInfo{}, toolError("unknown sandbox type %q (known: %s)", typ, strings.Join(s.opts.Types, ", "))
	}
	switch {
	case idle < 0:
		return SandboxInfo{}, toolError("timeout_minutes must not be negative")
	case idle == 0:
		idle = s.opts.IdleTTL
	case idle > s.opts.MaxLifetime:
		idle = s.opts.MaxLifetime
	}
	// What makes the sandbox this conversation's.
	labels := maps.Clone(extra)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelConversation] = OwnerKey(conv)
	labels[LabelIdleTTL] = strconv.FormatInt(int64((idle+time.Second-1)/time.Second), 10) // whole seconds, rounded up

	ctx, stop := s.callContext(ctx)
	defer stop()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return SandboxInfo{}, errShutdown
	}
	var (
		sb      backend.Sandbox
		claimed *session.Claimed
		info    backend.Info
		err     error
	)
	start, source := time.Now(), "cold"
	defer func() {
		// Time to first command: the sandbox takes commands once create
		// returns it.
		if claimed != nil && claimed.Warm {
			source = "pool"
		}
		s.metrics.creates.WithLabelValues(typ, source, outcome(failed != nil)).Inc()
		if failed == nil {
			s.metrics.createTime.WithLabelValues(typ, source).Observe(time.Since(start).Seconds())
		}
	}()
	if p := s.pools[typ]; p != nil && custom == nil {
		claimed, info, err = s.acquire(ctx, p, labels)
		if err == nil {
			sb, _ = claimedSandbox(claimed)
		}
	} else {
		spec, specErr := s.typeSpec(typ)
		if specErr == nil && custom != nil {
			specErr = custom(&spec)
		}
		if specErr != nil {
			return SandboxInfo{}, specErr
		}
		maps.Copy(spec.Labels, labels)
		sb, info, err = s.createCold(ctx, typ, spec)
	}
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("creating a %s sandbox: %w", typ, err)
	}
	// Labels as we meant them, whatever the backend echoes.
	info.Labels = maps.Clone(info.Labels)
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	maps.Copy(info.Labels, labels)
	info.Labels[LabelInstance], info.Labels[LabelType] = s.opts.Instance, typ
	if info.CreatedAt.IsZero() {
		info.CreatedAt = s.now()
	}
	if info.ExpiresAt.IsZero() {
		info.ExpiresAt = info.CreatedAt.Add(s.opts.MaxLifetime)
	}
	if claimed != nil {
		// A sandbox a pool took back is this conversation's again.
		s.mu.Lock()
		delete(s.released, info.ID)
		s.mu.Unlock()
	}
	b, _ := s.register(info, sb)
	s.mu.Lock()
	b.convName = conv
	s.mu.Unlock()
	if err := s.attach(ctx, b, claimed); err != nil {
		s.forget(b)
		if claimed != nil {
			claimed.Release()
		} else {
			s.destroyNew(sb)
		}
		return SandboxInfo{}, err
	}
	s.mu.Lock()
	b.lastActive = s.now()
	in := s.info(b)
	s.mu.Unlock()
	s.opts.Logger.Info("created sandbox", "sandbox", b.id, "type", typ, "conversation", conv, "pooled", claimed != nil && claimed.Warm)
	return in, nil
}

// typeSpec is the Spec of a sandbox of type typ before a conversation owns
// it: the type's, labelled with this server's instance and the type, with
// the server's volumes, no owner, and MaxLifetime as its backend TTL.
func (s *Server) typeSpec(typ string) (backend.Spec, error) {
	spec, err := s.opts.Spec(typ)
	if err != nil {
		return backend.Spec{}, err
	}
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[LabelInstance] = s.opts.Instance
	spec.Labels[LabelType] = typ
	// The backend TTL is the hard limit, so sbx gc reaps what a dead server
	// leaves; the idle TTL is the server's to keep.
	spec.TTL = s.opts.MaxLifetime
	spec.Owner = ""
	spec.Volumes = slices.Clone(spec.Volumes)
	for _, v := range s.opts.Volumes {
		if !slices.ContainsFunc(spec.Volumes, func(w backend.Volume) bool { return w.Target == v.Target }) {
			spec.Volumes = append(spec.Volumes, v)
		}
	}
	return spec, nil
}

// createCold makes and provisions a sandbox of type typ from spec; on
// failure nothing is left.
func (s *Server) createCold(ctx context.Context, typ string, spec backend.Spec) (backend.Sandbox, backend.Info, error) {
	sb, err := s.opts.Backend.Create(ctx, spec)
	if err != nil {
		return nil, backend.Info{}, err
	}
	if s.opts.Provision != nil {
		if err := s.opts.Provision(ctx, typ, sb); err != nil {
			s.destroyNew(sb)
			return nil, backend.Info{}, err
		}
	}
	info, err := sb.Info(ctx)
	if err != nil {
		s.destroyNew(sb)
		return nil, backend.Info{}, err
	}
	return sb, info, nil
}

func (s *Server) destroyNew(sb backend.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		s.opts.Logger.Warn("removing a sandbox that failed to start", "sandbox", sb.ID(), "err", err)
	}
}

// forget drops b from the server without destroying it (its terminals
// are forgotten too: the sandbox is gone already).
func (s *Server) forget(b *box) {
	s.mu.Lock()
	b.gone = true
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
	s.mu.Unlock()
	b.dropTerminals()
}

// attach reattaches b's sandbox if needed and starts its agent and tools.
// claimed, when set, is the pool claim b's sandbox came from: its sbxd
// client, whose agent the pool started and connected, is used as it is.
func (s *Server) attach(ctx context.Context, b *box, claimed *session.Claimed) error {
	b.attach.Lock()
	defer b.attach.Unlock()
	var pre *sbxd.Client
	if claimed != nil && b.claimed == nil {
		b.claimed = claimed
		var raw backend.Sandbox
		raw, pre = claimedSandbox(claimed)
		if b.sb == nil {
			b.sb = raw
		}
	}
	if b.tools != nil {
		return nil
	}
	if b.sb == nil {
		sb, err := s.opts.Backend.Get(ctx, b.id)
		if err != nil {
			return err
		}
		b.sb = sb
	}
	var sb backend.Sandbox = b.sb
	b.jobs = newLocalJobs(s.life, b.sb, s.opts.OutputLimit)
	if !s.opts.NoAgent {
		c := pre
		if c == nil {
			var err error
			if c, err = sbxd.Wrap(ctx, b.sb, s.agentOptions()...); err != nil {
				return err
			}
		}
		if _, err := c.Agent(ctx); err != nil {
			s.opts.Logger.Warn("sbxd agent unavailable: background jobs run in the server and end with it",
				"sandbox", b.id, "err", err)
		} else {
			b.jobs = &agentJobs{c: c, limit: s.opts.OutputLimit}
		}
		b.agent, sb = c, c
	}
	if Unisolated(s.opts.Backend) {
		c, err := newConfinedSandbox(ctx, sb)
		if err != nil {
			return err
		}
		sb = c
	}
	b.files = sb
	b.tools = fileops.New(sb, fileops.Options{ExecuteTimeout: s.opts.ExecuteTimeout, OutputLimit: s.opts.OutputLimit})
	return nil
}

// agentBinary is sbxd's binary lookup, done once per architecture: a
// server injects the same binary into many sandboxes.
func (s *Server) agentBinary(arch string) ([]byte, error) {
	s.binMu.Lock()
	defer s.binMu.Unlock()
	if bin, ok := s.bins[arch]; ok {
		return bin, nil
	}
	bin, err := sbxdbin.Find("", arch)
	if err != nil {
		return nil, err
	}
	if s.bins == nil {
		s.bins = map[string][]byte{}
	}
	s.bins[arch] = bin
	return bin, nil
}

// lookup finds sandbox id for conv, reattaching one the server does not
// know yet (made by an earlier run) when conv owns it. Every failure is
// errGone, so conversations learn nothing about others' sandboxes.
func (s *Server) lookup(ctx context.Context, conv, id string) (*box, error) {
	if conv == "" {
		return nil, errNoConversation
	}
	b, err := s.find(ctx, id, OwnerKey(conv))
	if b != nil {
		// Read and set under the lock: calls of one conversation come
		// at once (the race detector caught two HTTP requests here).
		s.mu.Lock()
		if b.convName == "" {
			b.convName = conv
		}
		s.mu.Unlock()
	}
	return b, err
}

// find finds sandbox id of this server's instance owned by owner (an
// OwnerKey; "": any conversation's, for the operator), reattaching one
// the server does not know yet (made by an earlier run). Every failure is
// errGone.
func (s *Server) find(ctx context.Context, id, owner string) (*box, error) {
	if id == "" {
		return nil, toolError("sandbox_id is empty: call create_sandbox first and pass the sandbox_id it returned")
	}
	s.mu.Lock()
	closed, b := s.closed, s.boxes[id]
	s.mu.Unlock()
	if closed {
		return nil, errShutdown
	}
	if b == nil {
		sb, err := s.opts.Backend.Get(ctx, id)
		if errors.Is(err, backend.ErrNotFound) || errors.Is(err, backend.ErrInvalidConfig) {
			return nil, errGone(id)
		}
		if err != nil {
			return nil, err
		}
		info, err := sb.Info(ctx)
		if errors.Is(err, backend.ErrNotFound) {
			return nil, errGone(id)
		}
		if err != nil {
			return nil, err
		}
		c := info.Labels[LabelConversation]
		if c == "" || (owner != "" && c != owner) || info.Labels[LabelInstance] != s.opts.Instance || info.Expired(s.now()) {
			return nil, errGone(id)
		}
		b, _ = s.register(info, sb)
	}
	if b == nil || (owner != "" && b.conv != owner) {
		return nil, errGone(id)
	}
	return b, nil
}

// use marks b busy (renewing its idle TTL) and returns the release func,
// or errGone when b has expired, which removes it. A running background
// job keeps b from expiring at its idle TTL.
func (s *Server) use(ctx context.Context, b *box) (func(), error) {
	s.mu.Lock()
	now := s.now()
	idle := b.inflight == 0 && !now.Before(b.expiry())
	if idle && !b.gone && !b.pastHardDeadline(now) {
		s.mu.Unlock()
		busy := s.jobsRunning(ctx, b)
		s.mu.Lock()
		now = s.now()
		idle = !busy && b.inflight == 0 && !now.Before(b.expiry())
	}
	if b.gone || idle || b.pastHardDeadline(now) {
		wasGone := b.gone
		b.gone = true
		if s.boxes[b.id] == b {
			delete(s.boxes, b.id)
		}
		s.mu.Unlock()
		if !wasGone {
			s.metrics.removals.WithLabelValues(expiryReason(b, now)).Inc()
			if err := s.destroy(s.life, b); err != nil {
				s.opts.Logger.Warn("removing expired sandbox failed", "sandbox", b.id, "err", err)
			}
		}
		return nil, errGone(b.id)
	}
	b.inflight++
	b.lastActive = now
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		b.inflight--
		if !b.gone {
			b.lastActive = s.now()
		}
		s.mu.Unlock()
	}, nil
}

// withBox runs fn on conv's sandbox id, counting the call as activity. An
// error saying the sandbox no longer exists becomes errGone.
func (s *Server) withBox(ctx context.Context, conv, id string, fn func(context.Context, *box) error) error {
	return s.withFound(ctx, id, func(ctx context.Context) (*box, error) { return s.lookup(ctx, conv, id) }, fn)
}

// withAnyBox is withBox for the operator: sandbox id of any conversation.
func (s *Server) withAnyBox(ctx context.Context, id string, fn func(context.Context, *box) error) error {
	return s.withFound(ctx, id, func(ctx context.Context) (*box, error) { return s.find(ctx, id, "") }, fn)
}

func (s *Server) withFound(ctx context.Context, id string, find func(context.Context) (*box, error), fn func(context.Context, *box) error) error {
	ctx, stop := s.callContext(ctx)
	defer stop()
	b, err := find(ctx)
	if err != nil {
		return err
	}
	release, err := s.use(ctx, b)
	if err != nil {
		return err
	}
	defer release()
	err = s.attach(ctx, b, nil)
	if err == nil {
		err = fn(ctx, b)
	}
	if errors.Is(err, backend.ErrNotFound) {
		s.forget(b)
		return errGone(id)
	}
	if err != nil && s.life.Err() != nil && ctx.Err() != nil {
		return errShutdown
	}
	return err
}

// Connect checks that conv's sandbox id still exists and renews its idle
// TTL.
func (s *Server) Connect(ctx context.Context, conv, id string) (SandboxInfo, error) {
	var in SandboxInfo
	err := s.withBox(ctx, conv, id, func(ctx context.Context, b *box) error {
		info, err := b.sb.Info(ctx)
		if err != nil {
			return err
		}
		if info.State == backend.StateExited {
			return toolError("sandbox '%s' has stopped; delete it with delete_sandbox and create a new one", id)
		}
		s.mu.Lock()
		in = s.info(b)
		s.mu.Unlock()
		return nil
	})
	return in, err
}

// List returns conv's sandboxes, oldest first, including those made by an
// earlier run of this server's instance.
func (s *Server) List(ctx context.Context, conv string) ([]SandboxInfo, error) {
	if conv == "" {
		return nil, errNoConversation
	}
	infos, err := s.opts.Backend.List(ctx, backend.Filter{Labels: map[string]string{
		LabelInstance: s.opts.Instance, LabelConversation: OwnerKey(conv),
	}})
	if err != nil {
		return nil, err
	}
	now := s.now()
	for _, info := range infos {
		if !info.Expired(now) {
			s.register(info, nil)
		}
	}
	s.mu.Lock()
	var out []SandboxInfo
	var created []time.Time
	for _, b := range s.boxes {
		if b.conv == OwnerKey(conv) && !b.gone {
			out = append(out, s.info(b))
			created = append(created, b.created)
		}
	}
	s.mu.Unlock()
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		return cmp.Or(created[i].Compare(created[j]), strings.Compare(out[i].ID, out[j].ID))
	})
	sorted := make([]SandboxInfo, len(out))
	for i, k := range idx {
		sorted[i] = out[k]
	}
	return sorted, nil
}

// Delete removes conv's sandbox id.
func (s *Server) Delete(ctx context.Context, conv, id string) error {
	ctx, stop := s.callContext(ctx)
	defer stop()
	b, err := s.lookup(ctx, conv, id)
	if err != nil {
		return err
	}
	return s.deleteBox(ctx, b, conv)
}

// deleteBox removes b, for who (a conversation, or the operator).
func (s *Server) deleteBox(ctx context.Context, b *box, who string) error {
	id := b.id
	s.mu.Lock()
	if b.gone {
		s.mu.Unlock()
		return errGone(id)
	}
	b.gone = true
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
	s.mu.Unlock()
	s.metrics.removals.WithLabelValues("deleted").Inc()
	if err := s.destroy(ctx, b); err != nil {
		return fmt.Errorf("deleting sandbox %s: %w", id, err)
	}
	s.opts.Logger.Info("deleted sandbox", "sandbox", id, "by", who)
	return nil
}
