package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// labelVolume marks the PersistentVolumeClaims the backend makes with
// their name.
const labelVolume = "sandboxkit.volume"

// createClaim makes a PersistentVolumeClaim with the configured storage
// class, size and access mode.
func (b *Backend) createClaim(ctx context.Context, name string, all map[string]string) error {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   b.ns,
			Labels:      podLabels(all),
			Annotations: map[string]string{annotationLabels: encodeLabels(all)},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{b.cfg.volumeAccessMode()},
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: b.cfg.volumeSize()},
			},
		},
	}
	if b.cfg.StorageClass != "" {
		sc := b.cfg.StorageClass
		pvc.Spec.StorageClassName = &sc
	}
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	_, err := b.kube.PersistentVolumeClaims(b.ns).Create(rctx, pvc, metav1.CreateOptions{})
	return b.translate(err)
}

// CreateVolume makes a PersistentVolumeClaim several sandboxes of a
// session can mount (on one node with ReadWriteOnce, the default; see
// Config.VolumeAccessMode). With FromPath (a host folder, or a .tar.gz,
// .tgz or .tar file) it then fills the claim through a short-lived pod of
// helper_image that mounts it: the contents go in as a tar stream over
// exec, and the pod is removed whatever happens. If filling fails, the
// claim is removed too.
func (b *Backend) CreateVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	var src func() (io.ReadCloser, error)
	if spec.FromPath != "" {
		var err error
		if src, err = volumeSource(spec.FromPath); err != nil {
			return "", b.opErr("create volume", "", err)
		}
	}
	name := spec.Name
	if name == "" {
		name = "sbx-vol-" + randomHex(5)
	}
	if _, err := claimName(name); err != nil {
		return "", b.opErr("create volume", "", err)
	}
	all := maps.Clone(spec.Labels)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, map[string]string{
		backend.LabelBackend: Name,
		backend.LabelSession: spec.Session,
		labelVolume:          name,
	})
	if spec.TTL > 0 {
		all[backend.LabelExpiresAt] = now().Add(spec.TTL).UTC().Format(time.RFC3339)
	}
	if err := b.createClaim(ctx, name, all); err != nil {
		return "", b.opErr("create volume", "", fmt.Errorf("claim %s: %w", name, err))
	}
	if src != nil {
		if err := b.fillVolume(ctx, name, spec.Session, src); err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.requestTimeout())
			defer cancel()
			b.deleteClaims(dctx, []string{name})
			return "", b.opErr("create volume", "", fmt.Errorf("filling claim %s from %s: %w", name, spec.FromPath, err))
		}
	}
	return name, nil
}

// fillMount is where the filler pod mounts the claim it fills.
const fillMount = "/sbx-fill"

// fillVolume extracts src's tar stream into claim through a pod of the
// helper image that mounts it, and removes the pod.
func (b *Backend) fillVolume(ctx context.Context, claim, session string, src func() (io.ReadCloser, error)) error {
	img := b.cfg.helperImage()
	sb, err := b.Create(ctx, backend.Spec{
		Name:    "volume-filler",
		Session: session,
		Image:   img,
		Volumes: []backend.Volume{{Type: backend.VolumeNamed, Source: claim, Target: fillMount}},
		Labels:  map[string]string{labelFiller: claim},
		TTL:     time.Hour,
	})
	if err != nil {
		return fmt.Errorf("starting the filler pod (helper_image %q, which needs sh and tar): %w", img, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.requestTimeout())
		defer cancel()
		if err := sb.Destroy(dctx); err != nil {
			b.log.Warn("removing the volume filler pod failed", "pod", sb.ID(), "claim", claim, "err", err)
		}
	}()
	rc, err := src()
	if err != nil {
		return err
	}
	defer rc.Close()
	return sb.(*Sandbox).PutArchive(ctx, fillMount, rc)
}

// labelFiller marks a volume filler pod with the claim it fills.
const labelFiller = "sandboxkit.volume-filler"

// volumeSource checks from and returns what streams its contents as a
// plain tar.
func volumeSource(from string) (func() (io.ReadCloser, error), error) {
	return tartree.Source(from, tartree.Options{SkipSpecial: true}, true)
}

// RemoveVolume deletes a claim the backend made; one that is gone is not
// an error.
func (b *Backend) RemoveVolume(ctx context.Context, name string) error {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	err := b.translate(b.kube.PersistentVolumeClaims(b.ns).Delete(rctx, name, metav1.DeleteOptions{}))
	if err == nil || errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	return b.opErr("remove volume", "", err)
}

// ListVolumes lists the claims the backend made that match filter.
func (b *Backend) ListVolumes(ctx context.Context, filter backend.Filter) ([]backend.VolumeInfo, error) {
	filter.Name = ""
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	pvcs, err := b.kube.PersistentVolumeClaims(b.ns).List(rctx, metav1.ListOptions{LabelSelector: selector(filter)})
	if err != nil {
		return nil, b.opErr("list volumes", "", err)
	}
	out := []backend.VolumeInfo{}
	for _, pvc := range pvcs.Items {
		if pvc.DeletionTimestamp != nil {
			continue
		}
		all := labelsOf(pvc.ObjectMeta)
		if _, ok := all[labelVolume]; !ok {
			continue
		}
		info := backend.Info{Session: all[backend.LabelSession], Labels: all}
		if !filter.Match(info) {
			continue
		}
		out = append(out, backend.VolumeInfo{
			Name:      pvc.Name,
			Session:   all[backend.LabelSession],
			Labels:    all,
			CreatedAt: pvc.CreationTimestamp.Time,
			ExpiresAt: expiresAt(all),
		})
	}
	slices.SortFunc(out, func(a, c backend.VolumeInfo) int { return strings.Compare(a.Name, c.Name) })
	return out, nil
}
