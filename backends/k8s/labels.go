package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Kubernetes label values are at most 63 characters of [A-Za-z0-9-_.], so
// sandboxkit's labels cannot all be Kubernetes labels as they are
// (expires-at is an RFC 3339 time, owner is "host:pid:start", users may write
// anything). The whole map is therefore kept in one annotation, which is what
// Info and List read; every pair that is a valid Kubernetes label is also set
// as one, so List filters on the server and kubectl -l works.
const (
	// annotationLabels holds the sandbox's labels as a JSON object.
	annotationLabels = "sandboxkit.io/labels"
	// annotationWorkDir is the working directory Exec starts in (the image's
	// WORKDIR as found at Create, when the entry sets none).
	annotationWorkDir = "sandboxkit.io/workdir"
	// annotationSbxd records that sbxd was put in the pod at sbxdPath.
	annotationSbxd = "sandboxkit.io/sbxd"
	// annotationSbxdVersion is the version sbxd version printed for the
	// sbxd put in the pod (execframe.SbxdVersion; absent: 1, before exec
	// --framed).
	annotationSbxdVersion = "sandboxkit.io/sbxd-version"
	// annotationClaim holds what the last claim changed (see Backend.Claim):
	// labels as a JSON object, "" for one removed, applied over
	// annotationLabels. A claim thus needs no read of the labels it leaves
	// alone: it is one JSON patch. Writers that read the labels first
	// (SetLabels, Renew, a claim that finds one here) fold it into
	// annotationLabels and remove it.
	annotationClaim = "sandboxkit.io/claim"
	// annotationHostPorts records the entry's host addresses of ports
	// ("8080=127.0.0.1:18080,..."), where Endpoint listens for them.
	annotationHostPorts = "sandboxkit.io/host-ports"
)

// podLabels returns the Kubernetes labels for a sandboxkit label map: the
// pairs Kubernetes accepts as they are.
func podLabels(all map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range all {
		if validLabel(k, v) {
			out[k] = v
		}
	}
	return out
}

func validLabel(k, v string) bool {
	return len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0
}

// encodeLabels is the annotation value for a label map.
func encodeLabels(all map[string]string) string {
	b, _ := json.Marshal(all) // a map[string]string always encodes
	return string(b)
}

// labelsOf returns a resource's sandboxkit labels: the annotation when
// present (it has every label) with a claim's changes applied, else its
// Kubernetes labels.
func labelsOf(meta metav1.ObjectMeta) map[string]string {
	all := baseLabels(meta)
	if delta := claimOf(meta); delta != nil {
		if all == nil {
			all = map[string]string{}
		}
		applyLabels(all, delta)
	}
	return all
}

// baseLabels is labelsOf without a claim's changes.
func baseLabels(meta metav1.ObjectMeta) map[string]string {
	if s, ok := meta.Annotations[annotationLabels]; ok {
		var all map[string]string
		if json.Unmarshal([]byte(s), &all) == nil {
			return all
		}
	}
	return maps.Clone(meta.Labels)
}

// claimOf decodes the claim annotation (nil when absent or damaged).
func claimOf(meta metav1.ObjectMeta) map[string]string {
	s, ok := meta.Annotations[annotationClaim]
	if !ok {
		return nil
	}
	var delta map[string]string
	if json.Unmarshal([]byte(s), &delta) != nil {
		return nil
	}
	return delta
}

// applyLabels sets the labels of set in all; an empty value removes one.
func applyLabels(all, set map[string]string) {
	for k, v := range set {
		if v == "" {
			delete(all, k)
		} else {
			all[k] = v
		}
	}
}

// selector is the server-side part of filter: every condition Kubernetes
// can express, and always the backend label. What it cannot express is
// checked with Filter.Match on the results.
func selector(filter backend.Filter) string {
	want := map[string]string{backend.LabelBackend: Name}
	if filter.Session != "" {
		want[backend.LabelSession] = filter.Session
	}
	if filter.Name != "" {
		want[backend.LabelName] = filter.Name
	}
	maps.Copy(want, filter.Labels)
	sel := labels.Set{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if validLabel(k, want[k]) {
			sel[k] = want[k]
		}
	}
	return sel.String()
}

// expiresAt parses the expires-at label (zero when absent or malformed).
func expiresAt(all map[string]string) time.Time {
	t, _ := time.Parse(time.RFC3339, all[backend.LabelExpiresAt])
	return t
}

var _ backend.Labeler = (*Backend)(nil)

// SetLabels changes a sandbox's labels (an empty value removes one): the
// annotation that holds them all, and the pod labels for the pairs
// Kubernetes accepts. The pod's resourceVersion guards against a change
// made meanwhile (a Renew, a claim).
func (b *Backend) SetLabels(ctx context.Context, id string, set map[string]string) error {
	for k := range set {
		if k == backend.LabelID || k == backend.LabelBackend {
			return b.opErr("set labels", id, fmt.Errorf("%w: label %s is the backend's own", backend.ErrInvalidConfig, k))
		}
	}
	pod, err := b.getPod(ctx, id)
	if err != nil {
		return b.opErr("set labels", id, err)
	}
	all := labelsOf(pod.ObjectMeta)
	applyLabels(all, set)
	_, err = b.writeLabels(ctx, pod, all)
	return b.opErr("set labels", id, err)
}

// writeLabels makes all the labels of pod, as read: the labels annotation
// (a claim's changes folded in, its annotation removed) and, for the pairs
// Kubernetes accepts, the pod's labels; pod labels of other keys that
// sandboxkit set are removed. The pod's resourceVersion guards against a
// change made since it was read (an apierrors conflict). It returns the
// pod as written.
func (b *Backend) writeLabels(ctx context.Context, pod *corev1.Pod, all map[string]string) (*corev1.Pod, error) {
	want := podLabels(all)
	podSet := map[string]any{}
	for k, v := range want {
		if cur, ok := pod.Labels[k]; !ok || cur != v {
			podSet[k] = v
		}
	}
	// The keys sandboxkit knows were set (kubectl label's are left).
	known := slices.Concat(slices.Collect(maps.Keys(baseLabels(pod.ObjectMeta))), slices.Collect(maps.Keys(claimOf(pod.ObjectMeta))))
	for _, k := range known {
		_, keep := want[k]
		if _, ok := pod.Labels[k]; ok && !keep {
			podSet[k] = nil // a merge patch's null removes the key
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations":     map[string]any{annotationLabels: encodeLabels(all), annotationClaim: nil},
		"labels":          podSet,
		"resourceVersion": pod.ResourceVersion,
	}})
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	return b.kube.Pods(b.ns).Patch(rctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}
