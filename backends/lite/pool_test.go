package lite

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Claims from one backend instance and Renew, SetLabels and Reset from
// another (as two processes) at the same time: every writer of the record
// takes its lock, so the record ends with the last claim's owner, session
// and labels and the last SetLabels' label, none lost to a write that read
// the record before the claim.
func TestClaimKeepsConcurrentWrites(t *testing.T) {
	e := newTestEnv(t)
	b1, b2 := e.open(t), e.open(t)
	ctx := t.Context()
	spec := e.spec("claim-race")
	spec.Labels = map[string]string{backend.LabelPool: "p", backend.LabelPoolState: backend.PoolReady}
	spec.Owner = "keeper-host:1:1"
	sb := create(t, b1, spec)
	got, err := b2.Get(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	other := got.(*Sandbox)

	const rounds = 20
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 3*rounds)
	wg.Go(func() {
		<-start
		for range rounds {
			if _, err := other.Renew(ctx, time.Hour); err != nil {
				errs <- fmt.Errorf("Renew: %w", err)
			}
		}
	})
	wg.Go(func() {
		<-start
		for i := range rounds {
			if err := b2.SetLabels(ctx, sb.ID(), map[string]string{"writer": fmt.Sprint(i)}); err != nil {
				errs <- fmt.Errorf("SetLabels: %w", err)
			}
		}
	})
	wg.Go(func() {
		<-start
		for range 3 {
			if err := other.Reset(ctx); err != nil {
				errs <- fmt.Errorf("Reset: %w", err)
			}
		}
	})
	close(start)
	var last backend.Claim
	for i := range rounds {
		// Back and forth: ready -> claimed -> ready -> ...
		c := backend.Claim{Owner: fmt.Sprintf("task-host:%d:1", i), Session: fmt.Sprint("task-", i), TTL: time.Hour,
			Labels: map[string]string{"task": fmt.Sprint(i)}}
		if i%2 == 1 {
			c.Expect, c.State = backend.PoolClaimed, backend.PoolReady
		}
		if _, err := b1.Claim(ctx, sb.ID(), c); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		last = c
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Owner != last.Owner || info.Session != last.Session || info.Labels["task"] != last.Labels["task"] ||
		info.Labels[backend.LabelPoolState] != last.NewState() || info.Labels["writer"] != fmt.Sprint(rounds-1) {
		t.Errorf("after the claims and writes: owner %q session %q labels %v; want the last claim's %q, %q, task=%s, %s=%s and writer=%d",
			info.Owner, info.Session, info.Labels, last.Owner, last.Session, last.Labels["task"], backend.LabelPoolState, last.NewState(), rounds-1)
	}
}
