package native

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// Spare enforcers. An enforcer's container start is the one step a
// sandbox with a policy adds to a create, and it cannot overlap the
// sandbox's start: the engine starts a container that joins another's
// network only once that one runs. With egress_spares = N, the backend
// keeps up to N enforcers started ahead, per enforcer config (image,
// policy, network, published ports, host name, extra hosts, runtime), and
// a create with the same config claims one by renaming it to its
// sandbox's enforcer name (a rename is atomic on the engine), then refills
// in the background once the sandbox runs. A claimed spare is an ordinary
// enforcer from then on. Spares are this process's own: only it claims
// them, Close removes them, and PruneCaches removes those of a creator
// that has died (a creator on another host: after enforcerGrace).

const (
	// labelEgressSpare, on a spare enforcer: its config's key.
	labelEgressSpare = "sandboxkit.native.egress-spare"
	// sparePrefix starts an unclaimed spare's container name.
	sparePrefix = "sbxe-spare-"
	// MaxEgressSpares bounds egress_spares.
	MaxEgressSpares = 16
)

// spareSet is the spare enforcers of one backend.
type spareSet struct {
	max    int
	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	mu      sync.Mutex
	ready   map[string][]string // key -> container IDs of started spares
	filling map[string]int      // key -> spares being started
	orphans []string            // started after close
	closed  bool
	wg      sync.WaitGroup
}

func newSpareSet(max int) *spareSet {
	ctx, cancel := context.WithCancel(context.Background())
	return &spareSet{max: max, ctx: ctx, cancel: cancel, ready: map[string][]string{}, filling: map[string]int{}}
}

// take returns the ID of a started spare of key, which is the caller's
// from then on.
func (s *spareSet) take(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.ready[key]
	if len(ids) == 0 {
		return "", false
	}
	id := ids[len(ids)-1]
	s.ready[key] = ids[:len(ids)-1]
	return id, true
}

// refill starts as many spares of key as it lacks, each with start, in the
// background.
func (s *spareSet) refill(key string, start func(ctx context.Context) (string, error), log func(error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for n := s.max - len(s.ready[key]) - s.filling[key]; n > 0; n-- {
		s.filling[key]++
		s.wg.Go(func() {
			id, err := start(s.ctx)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.filling[key]--
			switch {
			case err != nil:
				log(err)
			case s.closed:
				// Close no longer sees it: hand it back to be removed.
				s.orphans = append(s.orphans, id)
			default:
				s.ready[key] = append(s.ready[key], id)
			}
		})
	}
}

// close stops the refills and returns every spare not taken.
func (s *spareSet) close() []string {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.orphans
	for _, list := range s.ready {
		ids = append(ids, list...)
	}
	s.ready, s.orphans = map[string][]string{}, nil
	return ids
}

// spareKey is the key of the spares that can stand for the enforcer of
// spec's sandbox with config cfg and hc, or "" when none can: spares are
// off, or a port is published on a fixed host port or a session's
// loopback address (which only one container can hold).
func (b *Backend) spareKey(spec backend.Spec, cfg *container.Config, hc *container.HostConfig) string {
	// Not on a named network (a session's, which no other session
	// shares, and which gc removes with the session).
	if b.spares == nil || b.cfg.Ports == PortsLoopback && len(spec.Ports) > 0 || networkingConfig(spec) != nil {
		return ""
	}
	for _, bindings := range hc.PortBindings {
		for _, pb := range bindings {
			if pb.HostPort != "" && pb.HostPort != "0" {
				return ""
			}
		}
	}
	c := *cfg
	c.Labels = spareLabels(cfg.Labels)
	data, err := json.Marshal(struct {
		C        *container.Config
		H        *container.HostConfig
		Platform any
	}{&c, hc, platformOf(spec)})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:12])
}

// spareConfig is the config of a spare of key: the enforcer's, with the
// entry's labels but those of one sandbox.
func spareConfig(key string, cfg *container.Config) *container.Config {
	c := *cfg
	c.Labels = spareLabels(cfg.Labels)
	c.Labels[labelEgressFor], c.Labels[labelEgressSpare] = "", key
	c.Labels[backend.LabelCreator] = owner.Self()
	return &c
}

// spareLabels are an enforcer's labels (the entry's, and the backend's)
// without those of its sandbox and creator.
func spareLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	for _, k := range []string{labelEgressFor, backend.LabelSession, backend.LabelCreator} {
		delete(out, k)
	}
	return out
}

// claimSpare renames a started spare of key to name, the enforcer name of
// the sandbox being made, and reports whether it did. A spare that is gone
// or no longer runs is removed and the next one tried.
func (b *Backend) claimSpare(ctx context.Context, key, name string) bool {
	for {
		id, ok := b.spares.take(key)
		if !ok {
			return false
		}
		err := b.cli.ContainerRename(ctx, id, name)
		if err == nil {
			c, ierr := b.cli.ContainerInspect(ctx, id)
			if ierr == nil && c.State != nil && c.State.Running {
				return true
			}
			err = ierr
			if err == nil {
				err = errSpareStopped
			}
		}
		b.log.Warn("a spare egress enforcer could not be claimed; trying the next", "container", id, "err", err)
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		b.removeEnforcer(rmCtx, id)
		cancel()
		if ctx.Err() != nil {
			return false
		}
	}
}

var errSpareStopped = errors.New("it no longer runs")

// refillSpares starts the spares of key that are missing, in the
// background: enforcers of cfg and hc (sbxd mounted or, per inject,
// copied in).
func (b *Backend) refillSpares(spec backend.Spec, key string, cfg *container.Config, hc *container.HostConfig, inject func(ctx context.Context, cid string) error) {
	if key == "" {
		return
	}
	scfg := spareConfig(key, cfg)
	shc := *hc
	b.spares.refill(key, func(ctx context.Context) (string, error) {
		return b.runEnforcer(ctx, spec, sparePrefix+newID(), scfg, &shc, inject)
	}, func(err error) {
		if b.spares.ctx.Err() == nil { // not stopped by Close
			b.log.Warn("starting a spare egress enforcer failed", "err", err)
		}
	})
}

// closeSpares removes the spares not claimed.
func (b *Backend) closeSpares() {
	if b.spares == nil {
		return
	}
	ids := b.spares.close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			if err := b.removeEnforcer(ctx, id); err != nil {
				b.log.Warn("removing a spare egress enforcer failed", "container", id, "err", err)
			}
		})
	}
	wg.Wait()
}
