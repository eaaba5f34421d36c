package backend

import (
	"context"
	"errors"
	"time"
)

// Warm pools (session.Pool) keep ready sandboxes of a config entry and hand
// each to exactly one task. A pool member is an ordinary sandbox with two
// labels more: LabelPool (which pool) and LabelPoolState (ready, then
// claimed). A keeper makes ready members with LabelOwner set to itself, so
// that sbx gc reaps them when it dies; a claim replaces the owner, session
// and expiry with the task's.
const (
	// LabelPool is the pool a member belongs to: a hash of the entry's
	// name and everything its Spec makes, so that members made from an
	// older config are never handed out.
	LabelPool = "sandboxkit.pool"
	// LabelPoolState is PoolReady or PoolClaimed.
	LabelPoolState = "sandboxkit.pool.state"
)

// Pool member states (LabelPoolState values). A keeper makes a member in
// PoolMaking and claims it to PoolReady once it is provisioned, so that no
// other process claims a member still being made.
const (
	PoolMaking  = "making"
	PoolReady   = "ready"
	PoolClaimed = "claimed"
)

// ErrClaimed: the pool member was taken by another claimer (in this or
// any other process) first, or is no longer in the state a claim expects.
var ErrClaimed = errors.New("pool member already claimed")

// Claim is what a claim changes on a pool member.
type Claim struct {
	// Expect is the state the member must be in (default PoolReady);
	// State the state it is left in (default PoolClaimed). A keeper claims
	// a member it made from PoolMaking to PoolReady; a member going back
	// to its pool (after a clean Reset) is claimed from PoolClaimed to
	// PoolReady.
	Expect, State string
	// Owner, Session and TTL replace the member's (see Spec): LabelOwner,
	// LabelSession and LabelExpiresAt afterwards say what they say for a
	// sandbox created with them. TTL counts from the claim; 0: no expiry.
	Owner   string
	Session string
	TTL     time.Duration
	// Labels are added to the member's (an empty value removes one).
	// sandboxkit's own labels (LabelID, LabelBackend, LabelName, LabelPool)
	// cannot be set.
	Labels map[string]string
}

// Expected returns c.Expect, or PoolReady when unset.
func (c Claim) Expected() string {
	if c.Expect == "" {
		return PoolReady
	}
	return c.Expect
}

// NewState returns c.State, or PoolClaimed when unset.
func (c Claim) NewState() string {
	if c.State == "" {
		return PoolClaimed
	}
	return c.State
}

// Claimer is implemented by backends (not sandboxes) that can hand a pool
// member to exactly one claimer across processes and hosts: a locked
// record (local, lite), a checked update of the pod (k8s), a record volume
// whose first maker wins plus a rename (Docker, whose labels are fixed).
// Every Claimer supports PoolMaking to PoolReady, PoolReady to
// PoolClaimed and PoolMaking to PoolClaimed (a private pool's member);
// other moves may wrap errors.ErrUnsupported.
//
// Claim moves sandbox id from c.Expected() to c.NewState() and applies
// c, all or nothing. When another claimer won, or the member is not in
// the expected state, it returns an error wrapping ErrClaimed and changes
// nothing; an unknown id wraps ErrNotFound. After a claim, Info, Get and
// List report the claimed labels, owner, session and expiry, and List's
// Filter matches on them.
type Claimer interface {
	Claim(ctx context.Context, id string, c Claim) (Info, error)
}

// ApplyClaim is a Claimer's bookkeeping for backends that keep labels as
// a map plus owner, session and expiry fields: it checks the expected
// state and changes the fields in place. now is the claim's time.
func ApplyClaim(labels *map[string]string, owner, session *string, expires *time.Time, c Claim, now time.Time) error {
	if (*labels)[LabelPoolState] != c.Expected() || (*labels)[LabelPool] == "" {
		return ErrClaimed
	}
	for k := range c.Labels {
		switch k {
		case LabelID, LabelBackend, LabelName, LabelPool, LabelPoolState, LabelOwner, LabelSession, LabelExpiresAt:
			return InvalidConfigf("claim: label %s is kept by sandboxkit itself", k)
		}
	}
	if *labels == nil {
		*labels = map[string]string{}
	}
	for k, v := range c.Labels {
		if v == "" {
			delete(*labels, k)
		} else {
			(*labels)[k] = v
		}
	}
	(*labels)[LabelPoolState] = c.NewState()
	*owner, *session = c.Owner, c.Session
	*expires = time.Time{}
	if c.TTL > 0 {
		*expires = now.Add(c.TTL).UTC().Truncate(time.Second)
	}
	return nil
}

// CleanResetter is implemented by backends whose sandboxes' Resetter can
// leave nothing of what ran before (files, processes, environment,
// network state) for some Specs: CleanReset(spec) reports whether it does
// for sandboxes made from spec (lite: not with the host's network,
// privileges, more capabilities, no seccomp or a writable bind volume). A
// warm pool hands a used sandbox to the next task after a Reset only
// where it does; elsewhere it removes it.
type CleanResetter interface {
	CleanReset(spec Spec) bool
}
