package k8s_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// Get stops finding a destroyed sandbox at once; WaitRemoved returns only
// once its pod has left the API server (the kubelet tore it down).
func TestWaitRemoved(t *testing.T) {
	t.Parallel()
	b, c, ns := newBackend(t)
	ctx := t.Context()
	require.NoError(t, b.WaitRemoved(ctx, "no-such-pod"), "a pod that never existed")
	require.NoError(t, b.WaitRemoved(ctx, "Not A Pod Name!"), "a name no pod can have")

	sb := create(t, b, spec("removed", k8stest.BusyboxImage))
	require.NoError(t, sb.Destroy(ctx))
	_, err := b.Get(ctx, sb.ID())
	require.ErrorIs(t, err, backend.ErrNotFound)

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	require.NoError(t, b.WaitRemoved(wctx, sb.ID()))
	_, err = c.Client(t).CoreV1().Pods(ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the pod is still in the API server after WaitRemoved: %v", err)

	// A canceled wait says so.
	sb2 := create(t, b, spec("removed2", k8stest.BusyboxImage))
	cctx, cancel2 := context.WithCancel(ctx)
	cancel2()
	require.ErrorIs(t, b.WaitRemoved(cctx, sb2.ID()), context.Canceled)
}
