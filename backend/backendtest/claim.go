package backendtest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testClaimer claims one pool member from many goroutines at once, half of
// them through a second instance of the backend where the backend is
// Persistent (as another process would): exactly one wins, the others get
// ErrClaimed, and Info, Get and List report the winner's owner, session,
// expiry and labels. Claiming again, claiming a sandbox that is no pool
// member and claiming an unknown ID all fail without changing anything.
func (s *suite) testClaimer(t *testing.T) {
	cl, ok := backend.AsBackend[backend.Claimer](s.b)
	if !ok {
		t.Skip("the backend is not a Claimer")
	}
	ctx := testCtx(t)
	claimers := []backend.Claimer{cl}
	if s.caps.Persistent {
		if cl2, ok := backend.AsBackend[backend.Claimer](s.newBackend(t)); ok {
			claimers = append(claimers, cl2)
		}
	}
	pool := "bt-pool-" + randomHex(4)
	spec := s.spec("claim")
	spec.Labels[backend.LabelPool] = pool
	spec.Labels[backend.LabelPoolState] = backend.PoolMaking
	spec.Owner = "keeper-host:1:1"
	sb := s.create(t, spec)
	// Made as "making": nobody can claim it until its keeper says ready.
	if _, err := cl.Claim(ctx, sb.ID(), backend.Claim{Session: "early"}); !errors.Is(err, backend.ErrClaimed) {
		t.Fatalf("claiming a member still being made: %v, want ErrClaimed", err)
	}
	ready, err := cl.Claim(ctx, sb.ID(), backend.Claim{Expect: backend.PoolMaking, State: backend.PoolReady, Owner: spec.Owner, TTL: time.Hour})
	if err != nil {
		t.Fatalf("the keeper's claim from making to ready: %v", err)
	}
	if ready.Labels[backend.LabelPoolState] != backend.PoolReady || ready.Owner != spec.Owner {
		t.Fatalf("after making -> ready: state %q owner %q", ready.Labels[backend.LabelPoolState], ready.Owner)
	}
	infos, err := s.b.List(ctx, backend.Filter{Labels: map[string]string{backend.LabelPool: pool, backend.LabelPoolState: backend.PoolReady}})
	if err != nil || len(infos) != 1 || infos[0].ID != sb.ID() {
		t.Fatalf("List of the pool's ready members after making -> ready: %v (%v)", infoIDs(infos), err)
	}

	const n = 8
	session := "bt-claimed-" + randomHex(4)
	const key = "backendtest.claimer"
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = claimers[i%len(claimers)].Claim(ctx, sb.ID(), backend.Claim{
				Session: session, TTL: time.Hour, Labels: map[string]string{key: fmt.Sprint(i)},
			})
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("claimers %d and %d both won the same pool member", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, backend.ErrClaimed):
			t.Errorf("claimer %d: %v, want an error wrapping ErrClaimed", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no claimer won: %v", errors.Join(errs...))
	}

	check := func(what string, info backend.Info) {
		t.Helper()
		if info.Labels[backend.LabelPoolState] != backend.PoolClaimed {
			t.Errorf("%s: %s = %q, want %q", what, backend.LabelPoolState, info.Labels[backend.LabelPoolState], backend.PoolClaimed)
		}
		if info.Labels[backend.LabelPool] != pool {
			t.Errorf("%s: %s = %q, want %q (a claim keeps the pool)", what, backend.LabelPool, info.Labels[backend.LabelPool], pool)
		}
		if got := info.Labels[key]; got != fmt.Sprint(winner) {
			t.Errorf("%s: label %s = %q, want the winner's %d", what, key, got, winner)
		}
		if info.Session != session || info.Owner != "" {
			t.Errorf("%s: session %q owner %q, want the claim's %q and none", what, info.Session, info.Owner, session)
		}
		if want := time.Now().Add(time.Hour); info.ExpiresAt.Before(want.Add(-time.Minute)) || info.ExpiresAt.After(want.Add(time.Minute)) {
			t.Errorf("%s: ExpiresAt %v, want about %v (the claim's TTL)", what, info.ExpiresAt, want)
		}
		if info.Labels[labelRun] != s.runID {
			t.Errorf("%s: the claim lost the sandbox's own label %s", what, labelRun)
		}
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check("Info", info)
	for i, c := range claimers {
		b := s.b
		if i > 0 {
			b = c.(backend.Backend)
		}
		again, err := b.Get(ctx, sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if info, err = again.Info(ctx); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("Info after Get (backend %d)", i), info)
		infos, err := b.List(ctx, backend.Filter{Session: session})
		if err != nil {
			t.Fatal(err)
		}
		if ids := infoIDs(infos); !slices.Equal(ids, []string{sb.ID()}) {
			t.Fatalf("List by the claim's session = %v, want [%s]", ids, sb.ID())
		}
		check(fmt.Sprintf("List (backend %d)", i), infos[0])
		infos, err = b.List(ctx, backend.Filter{Labels: map[string]string{backend.LabelPool: pool, backend.LabelPoolState: backend.PoolReady}})
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 0 {
			t.Errorf("List of the pool's ready members still finds %v after the claim", infoIDs(infos))
		}
	}
	res := mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"echo", "claimed"}})
	checkOutput(t, "stdout after the claim", res.Stdout, "claimed\n")

	if _, err := cl.Claim(ctx, sb.ID(), backend.Claim{Expect: backend.PoolMaking, State: backend.PoolReady}); !errors.Is(err, backend.ErrClaimed) {
		t.Errorf("making -> ready of a claimed member: %v, want ErrClaimed", err)
	}
	if _, err := cl.Claim(ctx, sb.ID(), backend.Claim{Session: "again"}); !errors.Is(err, backend.ErrClaimed) {
		t.Errorf("claiming a claimed member: %v, want ErrClaimed", err)
	}
	if _, err := cl.Claim(ctx, sb.ID(), backend.Claim{Labels: map[string]string{backend.LabelID: "x"}, Expect: backend.PoolClaimed}); err == nil {
		t.Errorf("a claim setting %s succeeded", backend.LabelID)
	}
	if _, err := cl.Claim(ctx, "bt-no-such-sandbox-"+s.runID, backend.Claim{}); !errors.Is(err, backend.ErrNotFound) && !errors.Is(err, backend.ErrClaimed) {
		t.Errorf("claiming an unknown ID: %v, want ErrNotFound or ErrClaimed", err)
	}
	if info, err = sb.Info(ctx); err != nil {
		t.Fatal(err)
	}
	check("Info after failed claims", info)

	// A private pool's member is claimed straight from making.
	priv := s.spec("claim-private")
	priv.Labels[backend.LabelPool] = pool + "-private"
	priv.Labels[backend.LabelPoolState] = backend.PoolMaking
	priv.Owner = "keeper-host:1:1"
	psb := s.create(t, priv)
	got, err := cl.Claim(ctx, psb.ID(), backend.Claim{Expect: backend.PoolMaking, Session: "private-task", TTL: time.Hour})
	if err != nil {
		t.Fatalf("claim from making to claimed: %v", err)
	}
	if got.Labels[backend.LabelPoolState] != backend.PoolClaimed || got.Session != "private-task" || got.Owner != "" {
		t.Errorf("after making -> claimed: state %q session %q owner %q", got.Labels[backend.LabelPoolState], got.Session, got.Owner)
	}
	if info, err = psb.Info(ctx); err != nil || info.Session != "private-task" || info.Labels[backend.LabelPoolState] != backend.PoolClaimed {
		t.Errorf("Info after making -> claimed: session %q state %q (%v)", info.Session, info.Labels[backend.LabelPoolState], err)
	}

	plain := s.create(t, s.spec("claim-plain"))
	if _, err := cl.Claim(ctx, plain.ID(), backend.Claim{Session: "x"}); !errors.Is(err, backend.ErrClaimed) {
		t.Errorf("claiming a sandbox that is no pool member: %v, want ErrClaimed", err)
	}
}
