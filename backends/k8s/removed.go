package k8s

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// removedPoll is how often WaitRemoved asks whether a pod is gone.
const removedPoll = 50 * time.Millisecond

// WaitRemoved waits until the pod of sandbox id is gone from the API
// server, which happens once the kubelet has stopped its containers and
// released its network (backend.RemovalWaiter). Get reports a pod being
// deleted as not found at once; this is for callers that need its
// resources back, such as a benchmark's next round.
func (b *Backend) WaitRemoved(ctx context.Context, id string) error {
	if len(validation.IsDNS1123Subdomain(id)) > 0 {
		return nil // no pod can have that name
	}
	for {
		rctx, cancel := b.reqCtx(ctx)
		_, err := b.kube.Pods(b.ns).Get(rctx, id, metav1.GetOptions{})
		cancel()
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.NewTimer(removedPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
