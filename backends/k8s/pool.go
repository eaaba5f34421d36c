package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxkit/sandboxkit/backend"
)

var _ backend.Claimer = (*Backend)(nil)

// Claim takes a pool member in one API round trip: a JSON patch whose
// test operations the API server checks against the pod as stored, in
// the same compare-and-swap as the write (it re-applies the whole patch
// if the pod changed meanwhile), so of concurrent claimers in any process
// exactly one passes. The patch tests that the pod's state label is the
// expected one, that its container runs, that it is not being deleted
// and that no earlier claim's changes are pending (annotationClaim); it
// then writes the claim's changes as annotationClaim, which Info and List
// apply over the labels annotation, and sets the pod labels List's
// selector uses.
//
// A GET then a resourceVersion-checked update would take two round trips
// and need the labels annotation only to rewrite it whole; the patch
// needs neither. When a test fails, Claim reads the pod: a member in
// another state than expected (another claimer won) or not running is
// ErrClaimed; one whose earlier claim's changes are pending (it went back
// to its pool and is claimed again) is claimed with a resourceVersion-
// checked update that folds everything into the labels annotation, where
// a conflict is ErrClaimed too. So the winner of a claim takes one round
// trip, a loser two.
func (b *Backend) Claim(ctx context.Context, id string, c backend.Claim) (backend.Info, error) {
	if len(validation.IsDNS1123Subdomain(id)) > 0 {
		return backend.Info{}, b.opErr("claim", id, fmt.Errorf("%w: %q is not a pod name, so no sandbox of the k8s backend", backend.ErrNotFound, id))
	}
	delta, err := claimDelta(c, now())
	if err != nil {
		return backend.Info{}, b.opErr("claim", id, err)
	}
	rctx, cancel := b.reqCtx(ctx)
	pod, err := b.kube.Pods(b.ns).Patch(rctx, id, types.JSONPatchType, claimPatch(c.Expected(), delta), metav1.PatchOptions{})
	cancel()
	switch {
	case err == nil:
		return infoOf(pod), nil
	case !apierrors.IsInvalid(err):
		return backend.Info{}, b.opErr("claim", id, err)
	}
	// A test failed (the API server does not say which: 422 "the server
	// rejected our request due to an error in our request").
	pod, err = b.claimSlowly(ctx, id, c)
	if err != nil {
		return backend.Info{}, b.opErr("claim", id, err)
	}
	return infoOf(pod), nil
}

// claimDelta is what claim c changes in a member's labels ("" removes
// one), computed by backend.ApplyClaim on a member in the expected state
// so that the rules (labels sandboxkit keeps, the TTL's rounding) are the
// contract's.
func claimDelta(c backend.Claim, at time.Time) (map[string]string, error) {
	labels := map[string]string{backend.LabelPool: "-", backend.LabelPoolState: c.Expected()}
	var owner, session string
	var exp time.Time
	if err := backend.ApplyClaim(&labels, &owner, &session, &exp, c, at); err != nil {
		return nil, err
	}
	delta := map[string]string{
		backend.LabelPoolState: labels[backend.LabelPoolState],
		backend.LabelOwner:     owner,
		backend.LabelSession:   session,
		backend.LabelExpiresAt: "",
	}
	if !exp.IsZero() {
		delta[backend.LabelExpiresAt] = exp.Format(time.RFC3339)
	}
	for k := range c.Labels {
		delta[k] = labels[k]
	}
	return delta, nil
}

// claimPatch is the JSON patch of a claim (see Backend.Claim). A label
// the claim removes is set to "" on the pod (a JSON patch cannot remove a
// key that may be missing): the claim annotation says it is gone, and List
// checks every result against the labels Info reports.
func claimPatch(expected string, delta map[string]string) []byte {
	ops := []map[string]any{
		{"op": "test", "path": jsonPatchPath("labels", backend.LabelPoolState), "value": expected},
		{"op": "test", "path": "/status/phase", "value": corev1.PodRunning},
		// The phase stays Running for a while after the container ended.
		// (A pod with more containers, say an injected sidecar, may list
		// another first: the test fails and the slow path decides.)
		{"op": "test", "path": "/status/containerStatuses/0/name", "value": containerName},
		{"op": "test", "path": "/status/containerStatuses/0/ready", "value": true},
		{"op": "test", "path": "/metadata/deletionTimestamp", "value": nil},
		{"op": "test", "path": jsonPatchPath("annotations", annotationClaim), "value": nil},
		{"op": "add", "path": jsonPatchPath("annotations", annotationClaim), "value": encodeLabels(delta)},
	}
	for _, k := range slices.Sorted(maps.Keys(delta)) {
		if validLabel(k, delta[k]) {
			ops = append(ops, map[string]any{"op": "add", "path": jsonPatchPath("labels", k), "value": delta[k]})
		}
	}
	patch, _ := json.Marshal(ops) // strings and nils always encode
	return patch
}

// jsonPatchPath is the JSON pointer of key in the pod's metadata.labels or
// metadata.annotations (RFC 6901 escapes "~" and "/").
func jsonPatchPath(field, key string) string {
	return "/metadata/" + field + "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(key)
}

// claimSlowly claims with a read and a resourceVersion-checked write: for
// a member whose earlier claim's changes are still pending (the patch
// cannot merge into them), or one that failed the patch's other tests.
func (b *Backend) claimSlowly(ctx context.Context, id string, c backend.Claim) (*corev1.Pod, error) {
	pod, err := b.getPod(ctx, id)
	if err != nil {
		return nil, err
	}
	if st := stateOf(pod); st != backend.StateRunning {
		return nil, fmt.Errorf("%w: pod %s is %s, not running", backend.ErrClaimed, id, st)
	}
	all := labelsOf(pod.ObjectMeta)
	owner, session, exp := all[backend.LabelOwner], all[backend.LabelSession], expiresAt(all)
	if err := backend.ApplyClaim(&all, &owner, &session, &exp, c, now()); err != nil {
		return nil, err
	}
	set := map[string]string{backend.LabelOwner: owner, backend.LabelSession: session, backend.LabelExpiresAt: ""}
	if !exp.IsZero() {
		set[backend.LabelExpiresAt] = exp.Format(time.RFC3339)
	}
	applyLabels(all, set)
	pod, err = b.writeLabels(ctx, pod, all)
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("%w: pod %s changed while being claimed", backend.ErrClaimed, id)
	}
	if err != nil {
		return nil, b.translate(err)
	}
	return pod, nil
}
