package k8s_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// A member's life in a pool, beyond the conformance case: a claim (one
// patch: its changes kept apart in an annotation) that removes a label,
// the member going back to its pool and being claimed again (the changes
// are folded into the labels annotation), Renew and SetLabels after a
// claim (they fold it too), and what List's selector finds on the way.
func TestClaimLifecycle(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	cs := c.Client(t)
	ctx := t.Context()
	s := spec("claim-life", k8stest.BusyboxImage)
	s.Owner = "keeper-host:1:1"
	s.Labels = map[string]string{backend.LabelPool: "p1", backend.LabelPoolState: backend.PoolReady, "keep": "1", "gone": "x"}
	sb := create(t, b, s)
	id := sb.ID()

	pod := func() (labels, annotations map[string]string) {
		t.Helper()
		p, err := cs.CoreV1().Pods(ns).Get(ctx, id, metav1.GetOptions{})
		require.NoError(t, err)
		return p.Labels, p.Annotations
	}
	list := func(f backend.Filter) []string {
		t.Helper()
		infos, err := b.List(ctx, f)
		require.NoError(t, err)
		var ids []string
		for _, i := range infos {
			ids = append(ids, i.ID)
		}
		return ids
	}

	// 1. Ready -> claimed, removing "gone".
	info, err := b.Claim(ctx, id, backend.Claim{Session: "task-a", TTL: time.Hour, Labels: map[string]string{"task": "a", "gone": ""}})
	require.NoError(t, err)
	assert.Equal(t, "task-a", info.Session)
	assert.Equal(t, "", info.Owner)
	assert.Equal(t, map[string]string{"keep": "1", "task": "a", backend.LabelPoolState: backend.PoolClaimed},
		pick(info.Labels, "keep", "task", "gone", backend.LabelPoolState))
	_, ann := pod()
	assert.Contains(t, ann, "sandboxkit.io/claim", "a first claim is one patch, kept in its annotation")
	assert.Equal(t, []string{id}, list(backend.Filter{Session: "task-a"}))
	assert.Empty(t, list(backend.Filter{Labels: map[string]string{"gone": "x"}}), "List finds a label the claim removed")
	assert.Empty(t, list(backend.Filter{Labels: map[string]string{backend.LabelPool: "p1", backend.LabelPoolState: backend.PoolReady}}))

	// 2. Back to the pool: claimed -> ready, a claim over a pending one.
	info, err = b.Claim(ctx, id, backend.Claim{Expect: backend.PoolClaimed, State: backend.PoolReady, Owner: "keeper-host:2:2"})
	require.NoError(t, err)
	assert.Equal(t, "keeper-host:2:2", info.Owner)
	assert.Equal(t, "", info.Session)
	assert.True(t, info.ExpiresAt.IsZero(), "ExpiresAt %v after a claim without TTL", info.ExpiresAt)
	assert.Equal(t, map[string]string{"keep": "1", "task": "a", backend.LabelPoolState: backend.PoolReady},
		pick(info.Labels, "keep", "task", "gone", backend.LabelPoolState))
	labels, ann := pod()
	assert.NotContains(t, ann, "sandboxkit.io/claim", "the second claim folds the first into the labels annotation")
	assert.NotContains(t, labels, "gone")
	assert.NotContains(t, labels, backend.LabelOwner)
	assert.Empty(t, list(backend.Filter{Session: "task-a"}))
	assert.Equal(t, []string{id}, list(backend.Filter{Labels: map[string]string{backend.LabelPool: "p1", backend.LabelPoolState: backend.PoolReady}}))

	// 3. Claimed again in one patch; then Renew and SetLabels fold it.
	_, err = b.Claim(ctx, id, backend.Claim{Session: "task-b", TTL: time.Hour, Labels: map[string]string{"task": "b"}})
	require.NoError(t, err)
	_, ann = pod()
	assert.Contains(t, ann, "sandboxkit.io/claim")
	exp, err := sb.(backend.Renewer).Renew(ctx, 2*time.Hour)
	require.NoError(t, err)
	require.NoError(t, b.SetLabels(ctx, id, map[string]string{"extra": "e"}))
	labels, ann = pod()
	assert.NotContains(t, ann, "sandboxkit.io/claim", "Renew and SetLabels fold a claim's changes")
	assert.Equal(t, "task-b", labels[backend.LabelSession])
	info, err = sb.Info(ctx)
	require.NoError(t, err)
	assert.Equal(t, "task-b", info.Session)
	assert.Equal(t, "", info.Owner)
	assert.WithinDuration(t, exp, info.ExpiresAt, time.Second)
	assert.Equal(t, map[string]string{"keep": "1", "task": "b", "extra": "e", backend.LabelPoolState: backend.PoolClaimed},
		pick(info.Labels, "keep", "task", "gone", "extra", backend.LabelPoolState))

	// 4. Losers and strangers.
	_, err = b.Claim(ctx, id, backend.Claim{Session: "late"})
	assert.True(t, errors.Is(err, backend.ErrClaimed), "claiming a claimed member: %v", err)
	_, err = b.Claim(ctx, "sbx-no-such-pod-"+ns, backend.Claim{})
	assert.True(t, errors.Is(err, backend.ErrNotFound), "claiming an unknown pod: %v", err)
	_, err = b.Claim(ctx, "Not A Pod Name", backend.Claim{})
	assert.True(t, errors.Is(err, backend.ErrNotFound), "claiming an invalid name: %v", err)
}

// pick returns the labels of m named by keys that m has.
func pick(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// A member that stopped running is not claimable.
func TestClaimNotRunning(t *testing.T) {
	t.Parallel()
	b, _, _ := newBackend(t)
	ctx := t.Context()
	s := spec("claim-dead", k8stest.BusyboxImage)
	s.Labels = map[string]string{backend.LabelPool: "p2", backend.LabelPoolState: backend.PoolReady}
	sb := create(t, b, s)
	// The first process ends on SIGTERM (restart policy Never): the
	// container does not run any more. The claim comes as soon as Info
	// says so, while the pod's phase may still be Running.
	_, err := sb.Exec(ctx, backend.ExecRequest{Shell: "kill -TERM 1"})
	require.NoError(t, err)
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := sb.Info(ctx)
		require.NoError(t, err)
		if info.State == backend.StateExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pod still %s a minute after its processes were killed", info.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = b.Claim(cctx, sb.ID(), backend.Claim{Session: "x"})
	assert.True(t, errors.Is(err, backend.ErrClaimed), "claiming a member that exited: %v", err)
}
