package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// Shared volumes (backend.VolumeManager) are engine volumes carrying the
// contract's labels plus labelVolume, which sets them apart from the sbxd
// cache volume and from the anonymous volumes of single sandboxes.
//
// The engine writes into a volume only through a container that mounts
// it, so CreateVolume fills one through a helper container that is created
// and never started: the archive API extracts the folder's (or the
// .tar.gz's) contents into the mounted volume, as docker cp would. The
// helper's image is sandboxkit-helper:<sbxd hash>, imported on first use
// from a tar holding only the embedded sbxd (docker import): no registry,
// and no dependence on which images the engine happens to have. Like the
// sbxd volume it is a cache, labelled sandboxkit.backend=native, and stays.
const (
	labelVolume = "sandboxkit.native.volume"
	labelHelper = "sandboxkit.native.helper"
	volumeMount = "/volume"
)

var _ backend.VolumeManager = (*Backend)(nil)

// CreateVolume makes a labelled volume, filled from spec.FromPath when set
// (a host folder, or a .tar.gz, .tgz or .tar file). A name that exists
// already gives an error wrapping backend.ErrAlreadyExists. If filling
// fails, the volume is removed again.
func (b *Backend) CreateVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	fail := func(err error) (string, error) { return "", b.opErr("create volume", "", err) }
	id := newID()
	name := spec.Name
	if name == "" {
		name = containerName(backend.Spec{Session: spec.Session, Name: "vol"}, id)
	}
	var src func() (io.ReadCloser, error)
	if spec.FromPath != "" {
		var err error
		if src, err = volumeSource(spec.FromPath); err != nil {
			return fail(err)
		}
	}
	if _, err := b.cli.VolumeInspect(ctx, name); err == nil {
		return fail(fmt.Errorf("%w: volume %s exists already", backend.ErrAlreadyExists, name))
	} else if err := b.translate(err); !errors.Is(err, backend.ErrNotFound) {
		return fail(err)
	}
	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[backend.LabelID] = id
	labels[backend.LabelBackend] = Name
	labels[labelVolume] = "shared"
	if spec.Session != "" {
		labels[backend.LabelSession] = spec.Session
	}
	if spec.TTL > 0 {
		labels[backend.LabelExpiresAt] = time.Now().Add(spec.TTL).UTC().Format(time.RFC3339)
	}
	if _, err := b.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
		return fail(fmt.Errorf("volume %s: %w", name, b.translate(err)))
	}
	if src != nil {
		if err := b.fillVolume(ctx, name, src); err != nil {
			rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if rerr := b.cli.VolumeRemove(rmCtx, name, true); rerr != nil {
				b.log.Warn("removing a half-filled volume failed", "volume", name, "err", rerr)
			}
			return fail(fmt.Errorf("filling volume %s from %s: %w", name, spec.FromPath, err))
		}
	}
	b.log.Debug("created volume", "volume", name, "from", spec.FromPath)
	return name, nil
}

// volumeSource checks from and returns what streams its contents as a tar
// (the engine unpacks gzip itself).
func volumeSource(from string) (func() (io.ReadCloser, error), error) {
	return tartree.Source(from, tartree.Options{}, false)
}

// helperTTL bounds the life of a helper container whose maker died before
// removing it: sbx gc removes it once its owner is gone, or after this.
const helperTTL = 10 * time.Minute

// helperContainer creates (never starts) a container of image with volume
// vol mounted at target, to reach the volume through the archive API. It
// carries the labels sbx gc reads (an ID, this process as owner, an
// expiry), so a maker killed before removeHelper leaves nothing gc cannot
// see.
func (b *Backend) helperContainer(ctx context.Context, image, vol, target string, extra map[string]string) (string, error) {
	labels := b.labels(backend.Spec{Name: "sandboxkit-helper", Owner: owner.Self(), TTL: helperTTL, Labels: extra}, newID(), time.Now())
	helper, err := b.cli.ContainerCreate(ctx,
		&container.Config{Image: image, Entrypoint: []string{sbxdPath}, Labels: labels},
		&container.HostConfig{Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: target,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true}}}},
		nil, nil, "")
	if err != nil {
		return "", b.translate(err)
	}
	return helper.ID, nil
}

// removeHelper removes a helper container, also when ctx is done.
func (b *Backend) removeHelper(ctx context.Context, id string) {
	rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := b.cli.ContainerRemove(rmCtx, id, container.RemoveOptions{Force: true}); err != nil {
		b.log.Warn("removing the helper container failed", "container", id, "err", err)
	}
}

// fillVolume extracts src's tar stream into volume name through a helper
// container that is never started.
func (b *Backend) fillVolume(ctx context.Context, name string, src func() (io.ReadCloser, error)) error {
	img, err := b.helperImage(ctx)
	if err != nil {
		return err
	}
	helper, err := b.helperContainer(ctx, img, name, volumeMount, map[string]string{labelHelper: name})
	if err != nil {
		return fmt.Errorf("creating a helper container: %w", err)
	}
	defer b.removeHelper(ctx, helper)
	rc, err := src()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := b.cli.CopyToContainer(ctx, helper, volumeMount, rc, container.CopyToContainerOptions{}); err != nil {
		return b.translate(err)
	}
	return nil
}

// helperImage returns sandboxkit-helper:<sbxd hash>, importing it first
// when the engine does not have it.
func (b *Backend) helperImage(ctx context.Context) (string, error) {
	facts, err := b.facts(ctx)
	if err != nil {
		return "", err
	}
	bin, err := sbxdbin.Lookup(b.cfg.SbxdPath, facts.arch)
	if err != nil {
		return "", fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err)
	}
	ref := "sandboxkit-helper:" + sbxdHash(bin)
	if _, err := b.cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	b.sbxdMu.Lock()
	defer b.sbxdMu.Unlock()
	// Another process importing it at the same time would leave one
	// untagged copy behind.
	if unlock, err := lockFile(sbxdLockPath); err == nil {
		defer unlock()
	}
	if _, err := b.cli.ImageInspect(ctx, ref); err == nil {
		return ref, nil
	}
	tr, err := sbxdTar(bin, ".sbx/")
	if err != nil {
		return "", err
	}
	rc, err := b.cli.ImageImport(ctx, image.ImportSource{Source: tr, SourceName: "-"}, ref,
		image.ImportOptions{Changes: []string{
			"LABEL " + backend.LabelBackend + "=" + Name,
			"LABEL " + labelHelper + "=image",
			`ENTRYPOINT ["` + sbxdPath + `"]`,
		}})
	if err != nil {
		return "", fmt.Errorf("importing %s: %w", ref, b.translate(err))
	}
	defer rc.Close()
	if err := readStream(rc); err != nil {
		return "", fmt.Errorf("importing %s: %w", ref, err)
	}
	return ref, nil
}

// readStream reads an engine JSON message stream to its end and returns
// the error message in it, if any.
func readStream(r io.Reader) error {
	out, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if i := strings.Index(string(out), `"error"`); i >= 0 {
		return errors.New(strings.TrimSpace(string(out[i:])))
	}
	return nil
}

// RemoveVolume removes a volume CreateVolume made; one that is gone is not
// an error. Volumes sandboxkit did not make are refused, and so is a
// volume a sandbox still mounts.
func (b *Backend) RemoveVolume(ctx context.Context, name string) error {
	b.settle(ctx)
	fail := func(err error) error { return b.opErr("remove volume", "", err) }
	v, err := b.cli.VolumeInspect(ctx, name)
	if err != nil {
		if err := b.translate(err); errors.Is(err, backend.ErrNotFound) {
			return nil
		} else {
			return fail(err)
		}
	}
	if v.Labels[backend.LabelBackend] != Name || v.Labels[labelVolume] == "" {
		return fail(fmt.Errorf("%w: volume %s was not made by sandboxkit's CreateVolume; not removing it", backend.ErrInvalidConfig, name))
	}
	if err := b.cli.VolumeRemove(ctx, name, false); err != nil {
		err = b.translate(err)
		switch {
		case errors.Is(err, backend.ErrNotFound):
			return nil
		case strings.Contains(err.Error(), "in use"), strings.Contains(err.Error(), "being used"): // Docker, Podman
			return fail(fmt.Errorf("volume %s is in use by a sandbox (destroy it first): %w", name, err))
		}
		return fail(fmt.Errorf("volume %s: %w", name, err))
	}
	return nil
}

// ListVolumes lists the volumes CreateVolume made, filtered on the engine.
func (b *Backend) ListVolumes(ctx context.Context, filter backend.Filter) ([]backend.VolumeInfo, error) {
	b.settle(ctx)
	args := labelFilter(filter, labelVolume)
	resp, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return nil, b.opErr("list volumes", "", err)
	}
	var out []backend.VolumeInfo
	for _, v := range resp.Volumes {
		if !matchLabels(v.Labels, args) {
			continue
		}
		info := backend.VolumeInfo{Name: v.Name, Session: v.Labels[backend.LabelSession], Labels: maps.Clone(v.Labels)}
		info.CreatedAt, _ = time.Parse(time.RFC3339, v.CreatedAt)
		info.ExpiresAt, _ = time.Parse(time.RFC3339, v.Labels[backend.LabelExpiresAt])
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b backend.VolumeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// matchLabels reports whether labels has every "key" and "key=value" of
// args' label filters. Docker ANDs label filters but Podman (4.x) ORs them
// on some lists, so what an engine returns is checked again here.
// labelFilter is the engine's filter for the resources of this backend
// that carry the labels (each "key" or "key=value") and filter's session
// and labels (not its name: List adds that for sandboxes).
func labelFilter(filter backend.Filter, labels ...string) filters.Args {
	args := filters.NewArgs(filters.Arg("label", backend.LabelBackend+"="+Name))
	for _, l := range labels {
		args.Add("label", l)
	}
	if filter.Session != "" {
		args.Add("label", backend.LabelSession+"="+filter.Session)
	}
	for k, v := range filter.Labels {
		args.Add("label", k+"="+v)
	}
	return args
}

func matchLabels(labels map[string]string, args filters.Args) bool {
	for _, kv := range args.Get("label") {
		k, v, hasValue := strings.Cut(kv, "=")
		got, ok := labels[k]
		if !ok || (hasValue && got != v) {
			return false
		}
	}
	return true
}
