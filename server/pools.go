package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/session"
)

// newPools makes the pools of Options.Pools. A member is what Create makes
// for its type minus everything of a conversation: it carries LabelInstance
// and LabelType (so the pool is this instance's), and its agent is started
// and connected while it waits; a claim adds LabelConversation and
// LabelIdleTTL and makes the sandbox the conversation's, with no owner and
// MaxLifetime as its backend TTL.
func (s *Server) newPools() (map[string]*session.Pool, error) {
	pools := map[string]*session.Pool{}
	for _, typ := range slices.Sorted(maps.Keys(s.opts.Pools)) {
		spec, err := s.typeSpec(typ)
		if err != nil {
			return nil, fmt.Errorf("server: the pool of type %q: %w", typ, err)
		}
		var provision func(context.Context, backend.Sandbox) error
		if s.opts.Provision != nil {
			provision = func(ctx context.Context, sb backend.Sandbox) error { return s.opts.Provision(ctx, typ, sb) }
		}
		var wrap func(context.Context, backend.Sandbox) (backend.Sandbox, error)
		if !s.opts.NoAgent {
			wrap = s.wrapMember
		}
		// Private: this server's own (its members carry its instance), so
		// a claim is recorded while the conversation's first call runs.
		p, err := session.NewPool(session.PoolOptions{
			Backend: s.opts.Backend, Name: typ, Spec: spec, Provision: provision,
			Settings: s.opts.Pools[typ], Wrap: wrap, Logger: s.opts.Logger, Private: true,
		})
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		pools[typ] = p
	}
	return pools, nil
}

// wrapMember starts the agent of a pool member, so that the first tool
// call of the conversation that claims it needs no start. An agent that
// cannot start leaves the member as attach leaves a sandbox then: its
// commands take the backend's path and its jobs run in the server.
func (s *Server) wrapMember(ctx context.Context, sb backend.Sandbox) (backend.Sandbox, error) {
	c, err := sbxd.Wrap(ctx, sb, s.agentOptions()...)
	if err != nil {
		return nil, err
	}
	if _, err := c.Agent(ctx); err != nil && ctx.Err() != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// agentOptions are the options the server wraps sandboxes with.
func (s *Server) agentOptions() []sbxd.Option {
	return append([]sbxd.Option{sbxd.WithLogger(s.opts.Logger), sbxd.WithBinary(s.agentBinary)}, s.opts.AgentOptions...)
}

// keepPools runs the keepers until the server closes; each removes its
// ready members when it stops.
func (s *Server) keepPools() {
	for _, p := range s.pools {
		s.bg.Go(func() {
			if err := p.Keep(s.life); err != nil {
				s.opts.Logger.Error("pool keeper stopped", "type", p.Name(), "err", err)
			}
		})
	}
}

// acquire claims a sandbox of p for a conversation: labels are its
// LabelConversation and LabelIdleTTL.
func (s *Server) acquire(ctx context.Context, p *session.Pool, labels map[string]string) (*session.Claimed, backend.Info, error) {
	c, err := p.Acquire(ctx, session.Binding{Labels: labels, TTL: s.opts.MaxLifetime})
	if err != nil {
		return nil, backend.Info{}, err
	}
	if c.Warm {
		// Create fills in what it needs (its labels, now, MaxLifetime)
		// without waiting for the claim's record.
		return c, backend.Info{ID: c.ID()}, nil
	}
	info, err := c.Info(ctx)
	if err != nil {
		c.Release()
		return nil, backend.Info{}, err
	}
	return c, info, nil
}

// claimedSandbox returns the backend's sandbox of a claim and the pool's
// sbxd client around it (nil with NoAgent).
func claimedSandbox(c *session.Claimed) (backend.Sandbox, *sbxd.Client) {
	sb := c.Unwrap()
	if agent, ok := sb.(*sbxd.Client); ok {
		return agent.Unwrap(), agent
	}
	return sb, nil
}

// PoolStats returns the figures of the server's pools, sorted by type (an
// empty list when it keeps none).
func (s *Server) PoolStats() []session.PoolStats {
	out := []session.PoolStats{}
	for _, typ := range slices.Sorted(maps.Keys(s.pools)) {
		out = append(out, s.pools[typ].Stats())
	}
	return out
}

func (s *Server) servePools(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"pools": s.PoolStats()})
}
