package native

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Snapshots are images committed from a sandbox's container, as
// Checkpoint's are, labelled labelSnapshot so that ListSnapshots finds
// them; a fork's image is labelled labelForkImage, so that PruneCaches
// removes it when the last fork is gone.
const (
	labelSnapshot  = "sandboxkit.native.snapshot"
	labelForkImage = "sandboxkit.native.fork-image"
)

var (
	_ backend.Snapshotter     = (*Sandbox)(nil)
	_ backend.Forker          = (*Sandbox)(nil)
	_ backend.SnapshotManager = (*Backend)(nil)
)

// Snapshot commits the container (paused meanwhile) to an image named
// req.Ref ("": sandboxkit-snapshot/<id>:<unix nanoseconds>), labelled with
// the request's labels, the sandbox's session, LabelSnapshotOf and, with a
// TTL, LabelExpiresAt. Size is the image's size.
func (s *Sandbox) Snapshot(ctx context.Context, req backend.SnapshotRequest) (backend.Snapshot, error) {
	if req.TTL < 0 {
		return backend.Snapshot{}, s.opErr("snapshot", fmt.Errorf("%w: ttl must not be negative, got %s", backend.ErrInvalidConfig, req.TTL))
	}
	c, err := s.inspect(ctx)
	if err != nil {
		return backend.Snapshot{}, s.opErr("snapshot", err)
	}
	now := time.Now().UTC()
	ref := cmp(req.Ref, "sandboxkit-snapshot/"+s.id+":"+fmt.Sprint(now.UnixNano()))
	labels := snapshotLabels(c.Config.Labels, req.Labels)
	labels[labelSnapshot] = "1"
	labels[backend.LabelSnapshotOf] = s.id
	if req.TTL > 0 {
		labels[backend.LabelExpiresAt] = now.Add(req.TTL).Format(time.RFC3339)
	}
	if _, err := s.commit(ctx, ref, "sandboxkit snapshot of sandbox "+s.id, labels); err != nil {
		return backend.Snapshot{}, s.opErr("snapshot", err)
	}
	img, err := s.b.cli.ImageInspect(ctx, ref)
	if err != nil {
		return backend.Snapshot{}, s.opErr("snapshot", s.b.translate(err))
	}
	return snapshotOf(ref, c.Config.Image, img.Size, img.Config.Labels, img.Created), nil
}

// snapshotLabels are the labels of an image committed from a container
// labelled own: the request's, and of the container's sandboxkit labels
// only the session (no ID, owner or expiry of the sandbox: a sandbox made
// from the image would inherit them; see containerConfig). Every other
// sandboxkit label the container has is blanked, as commit merges the
// container's labels in.
func snapshotLabels(own, req map[string]string) map[string]string {
	l := maps.Clone(req)
	if l == nil {
		l = map[string]string{}
	}
	for k := range own {
		if strings.HasPrefix(k, backend.LabelPrefix) {
			l[k] = ""
		}
	}
	l[backend.LabelBackend] = Name
	if s := own[backend.LabelSession]; s != "" {
		l[backend.LabelSession] = s
	}
	return l
}

func snapshotOf(ref, base string, size int64, labels map[string]string, created string) backend.Snapshot {
	sn := backend.Snapshot{Ref: ref, Base: base, Size: size, Labels: map[string]string{}}
	for k, v := range labels {
		if v != "" {
			sn.Labels[k] = v
		}
	}
	sn.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
	sn.ExpiresAt, _ = time.Parse(time.RFC3339, labels[backend.LabelExpiresAt])
	return sn
}

// ListSnapshots lists the snapshot images that match filter, one entry
// per tag.
func (b *Backend) ListSnapshots(ctx context.Context, filter backend.Filter) ([]backend.Snapshot, error) {
	imgs, err := b.cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", labelSnapshot+"=1"))})
	if err != nil {
		return nil, b.opErr("list snapshots", "", b.translate(err))
	}
	var out []backend.Snapshot
	for _, img := range imgs {
		if img.Labels[labelSnapshot] != "1" || !filter.MatchLabels(img.Labels) {
			continue
		}
		for _, tag := range slices.DeleteFunc(slices.Clone(img.RepoTags), func(t string) bool { return !isTag(t) }) {
			sn := snapshotOf(shortTag(tag), "", img.Size, img.Labels, "")
			sn.CreatedAt = time.Unix(img.Created, 0).UTC()
			out = append(out, sn)
		}
	}
	return out, nil
}

// shortTag is a tag as Docker lists it: Podman lists docker.io/NAME:TAG for
// the NAME:TAG that was asked for.
func shortTag(tag string) string {
	if t, ok := strings.CutPrefix(tag, "docker.io/"); ok {
		return strings.TrimPrefix(t, "library/")
	}
	return tag
}

// RemoveSnapshot removes a snapshot's tag; the image goes with its last
// tag, once no container uses it.
func (b *Backend) RemoveSnapshot(ctx context.Context, ref string) error {
	_, err := b.cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true})
	if err = b.translate(err); err != nil && !errors.Is(err, backend.ErrNotFound) {
		return b.opErr("remove snapshot", "", err)
	}
	return nil
}

// Fork commits the container once (paused meanwhile) to an image and
// starts req.N containers from it with the parent's configuration
// (command, environment, mounts, networks, limits), each a sandbox of
// its own. Processes are not carried over (see backend.Forker). The
// image (sandboxkit-fork/ID:...) stays while forks use it; PruneCaches
// removes it once the last fork is gone. Published ports with a fixed host port cannot be
// forked (the engine refuses the second binding).
func (s *Sandbox) Fork(ctx context.Context, req backend.ForkRequest) ([]backend.Sandbox, error) {
	out, err := s.fork(ctx, req)
	if err != nil {
		return nil, s.opErr("fork", err)
	}
	return out, nil
}

func (s *Sandbox) fork(ctx context.Context, req backend.ForkRequest) (_ []backend.Sandbox, err error) {
	if req.N < 1 {
		return nil, fmt.Errorf("%w: fork: n must be at least 1, got %d", backend.ErrInvalidConfig, req.N)
	}
	if s.adopted {
		return nil, fmt.Errorf("%w: the sandbox is an existing container sandboxkit did not make", errors.ErrUnsupported)
	}
	if s.egress != "" {
		return nil, fmt.Errorf("%w: the sandbox has an egress policy, which a fork would not carry; create sandboxes of its entry instead", errors.ErrUnsupported)
	}
	c, err := s.inspect(ctx)
	if err != nil {
		return nil, err
	}
	ref := "sandboxkit-fork/" + s.id + ":" + newID()
	labels := snapshotLabels(c.Config.Labels, nil)
	labels[labelForkImage] = s.id
	if _, err := s.commit(ctx, ref, "sandboxkit fork of sandbox "+s.id, labels); err != nil {
		return nil, err
	}
	// The image keeps its tag while forks use it (untagging a used
	// image needs force, and Podman's force removes the containers too):
	// PruneCaches removes it once the last fork is gone.
	forks := make([]backend.Sandbox, 0, req.N)
	defer func() {
		if err != nil {
			for _, f := range forks {
				f.Destroy(context.WithoutCancel(ctx))
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, rerr := s.b.cli.ImageRemove(rctx, ref, image.RemoveOptions{}); rerr != nil {
				s.b.log.Warn("removing the image of a failed fork (sbx gc removes it later)", "image", ref, "err", rerr)
			}
		}
	}()
	for range req.N {
		f, err := s.startFork(ctx, c, ref, req)
		if err != nil {
			return nil, err
		}
		forks = append(forks, f)
	}
	return forks, nil
}

// startFork creates and starts one fork of the container c from image ref.
func (s *Sandbox) startFork(ctx context.Context, c container.InspectResponse, ref string, req backend.ForkRequest) (*Sandbox, error) {
	id := newID()
	old := c.Config.Labels
	spec := backend.Spec{
		Name: cmp(req.Name, old[backend.LabelName]), Session: cmp(req.Session, old[backend.LabelSession]),
		Owner: cmp(req.Owner, old[backend.LabelOwner]), TTL: req.TTL, Labels: map[string]string{},
	}
	if exp, err := time.Parse(time.RFC3339, old[backend.LabelExpiresAt]); spec.TTL == 0 && err == nil {
		if created, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
			spec.TTL = exp.Sub(created).Round(time.Second)
		}
	}
	for k, v := range old {
		if !strings.HasPrefix(k, backend.LabelPrefix) {
			spec.Labels[k] = v
		}
	}
	maps.Copy(spec.Labels, req.Labels)
	spec.Labels[backend.LabelForkOf] = s.id
	cfg := *c.Config
	cfg.Image = ref
	cfg.Labels = s.b.labels(spec, id, time.Now())
	cfg.Labels[labelWorkDir] = old[labelWorkDir]
	// Labels the image has (from the commit) and this fork does not set
	// are blanked, as Create does.
	for k := range labelsOfImage(ctx, s.b, ref) {
		if _, ok := cfg.Labels[k]; !ok && strings.HasPrefix(k, backend.LabelPrefix) {
			cfg.Labels[k] = ""
		}
	}
	if len(c.ID) >= 12 && cfg.Hostname == c.ID[:12] {
		cfg.Hostname = "" // the engine's default, the parent's ID
	}
	cfg.Entrypoint = slices.Clone(cfg.Entrypoint)
	for i, a := range cfg.Entrypoint {
		if a == s.id && i > 0 && cfg.Entrypoint[i-1] == "--sandbox" {
			cfg.Entrypoint[i] = id
		}
	}
	hc := *c.HostConfig
	// Podman reports ulimits by their kernel names (RLIMIT_NOFILE), which
	// its own create refuses: the names create takes are nofile, nproc...
	hc.Ulimits = nil
	for _, u := range c.HostConfig.Ulimits {
		if u == nil {
			continue
		}
		v := *u
		v.Name = strings.ToLower(strings.TrimPrefix(v.Name, "RLIMIT_"))
		hc.Ulimits = append(hc.Ulimits, &v)
	}
	var nc *network.NetworkingConfig
	if c.NetworkSettings != nil {
		for name := range c.NetworkSettings.Networks {
			if name == "bridge" || name == "host" || name == "none" || name == "default" {
				continue
			}
			if nc == nil {
				nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{}}
			}
			var aliases []string
			if spec.Name != "" {
				aliases = []string{spec.Name}
			}
			nc.EndpointsConfig[name] = &network.EndpointSettings{Aliases: aliases}
		}
	}
	created, err := s.b.cli.ContainerCreate(ctx, &cfg, &hc, nc, nil, containerName(spec, id))
	if err != nil {
		return nil, s.b.explainCreate(err)
	}
	if err := s.b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		s.b.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		return nil, s.b.explainCreate(err)
	}
	return &Sandbox{b: s.b, id: id, cid: created.ID, workDir: s.workDir, pool: false,
		autoRemove: hc.AutoRemove, bareInit: s.bareInit}, nil
}

func labelsOfImage(ctx context.Context, b *Backend, ref string) map[string]string {
	img, err := b.cli.ImageInspect(ctx, ref)
	if err != nil || img.Config == nil {
		return nil
	}
	return img.Config.Labels
}

// pruneForkImages removes the fork images and the transient images
// (backend.LabelTransient: a bundle's, taken or loaded) no container
// uses. An image loaded for a restore that has no container yet is
// removed too: a gc racing a restore fails the restore's create, which
// says the image is missing.
func (b *Backend) pruneForkImages(ctx context.Context, dryRun bool) ([]string, error) {
	var imgs []image.Summary
	seen := map[string]bool{}
	for _, label := range []string{labelForkImage, backend.LabelTransient} {
		list, err := b.cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", label))})
		if err != nil {
			return nil, b.translate(err)
		}
		for _, img := range list {
			if img.Labels[label] != "" && !seen[img.ID] {
				seen[img.ID] = true
				imgs = append(imgs, img)
			}
		}
	}
	var pruned []string
	for _, img := range imgs {
		users, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", img.ID))})
		if err != nil {
			return pruned, b.translate(err)
		}
		if len(users) > 0 {
			continue
		}
		kind := "fork image "
		if img.Labels[labelForkImage] == "" {
			kind = "transient image (a bundle's) "
		}
		pruned = append(pruned, kind+img.ID)
		if dryRun {
			continue
		}
		// Its tags first (the last one takes the image), then the
		// image itself where it had none.
		for _, ref := range append(slices.DeleteFunc(slices.Clone(img.RepoTags), func(t string) bool { return !isTag(t) }), img.ID) {
			if _, err := b.cli.ImageRemove(ctx, ref, image.RemoveOptions{}); err != nil && !errors.Is(b.translate(err), backend.ErrNotFound) {
				return pruned, b.translate(err)
			}
		}
	}
	return pruned, nil
}

// isTag reports whether an image list's tag is one: older engines list
// untagged images as "<none>:<none>".
func isTag(t string) bool { return t != "" && t != "<none>:<none>" }
