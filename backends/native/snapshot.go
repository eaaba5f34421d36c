package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// Snapshots are images committed from a sandbox's container, as
// Checkpoint's are, labelled labelSnapshot so that ListSnapshots finds
// them; a fork's image is labelled labelForkImage, so that PruneCaches
// removes it when the last fork is gone.
//
// A snapshot or a fork is the process's that makes it until Snapshot or
// Fork returns it, so that one whose maker is killed before then is
// removed by sbx gc, complete or not. Labels are fixed when an image or a
// container is made, so what says "being made" is what can change, a
// name: a snapshot is committed under a tag of the makingRepo only, and
// gets its own tag (and loses that one) just before Snapshot returns; a
// fork's container is named with makingSuffix until every fork runs,
// then renamed. Both carry labelMaker, the maker's owner string, for
// good: ListSnapshots and List report it as backend.LabelCreator (and a
// fork as backend.StateCreating) only while the name says it is being
// made. A maker killed between the new tag and the untag leaves a
// snapshot with both, which is complete: PruneCaches removes the making
// tag.
const (
	labelSnapshot  = "sandboxkit.native.snapshot"
	labelForkImage = "sandboxkit.native.fork-image"
	labelMaker     = "sandboxkit.native.maker"
	makingRepo     = "sandboxkit-making/"
	makingSuffix   = "-making"
)

var (
	_ backend.Snapshotter     = (*Sandbox)(nil)
	_ backend.Forker          = (*Sandbox)(nil)
	_ backend.SnapshotManager = (*Backend)(nil)
)

// Snapshot commits the container (paused meanwhile) to an image named
// req.Ref ("": sandboxkit-snapshot/<id>:<unix nanoseconds>), labelled with
// the request's labels, the sandbox's session, LabelSnapshotOf and, with a
// TTL, LabelExpiresAt. Size is the image's size. Until it returns, the
// image is tagged only in the makingRepo (see above).
func (s *Sandbox) Snapshot(ctx context.Context, req backend.SnapshotRequest) (backend.Snapshot, error) {
	sn, making, err := s.makeSnapshot(ctx, req, owner.Self())
	if err == nil {
		err = s.b.handOverSnapshot(ctx, making, sn.Ref)
	}
	if err != nil {
		return backend.Snapshot{}, s.opErr("snapshot", err)
	}
	return sn, nil
}

// makeSnapshot commits the container to an image tagged making (in the
// makingRepo) whose maker is maker, and describes the snapshot it becomes
// once handOverSnapshot has given it its reference.
func (s *Sandbox) makeSnapshot(ctx context.Context, req backend.SnapshotRequest, maker string) (_ backend.Snapshot, making string, _ error) {
	if req.TTL < 0 {
		return backend.Snapshot{}, "", fmt.Errorf("%w: ttl must not be negative, got %s", backend.ErrInvalidConfig, req.TTL)
	}
	if isMakingTag(req.Ref) {
		return backend.Snapshot{}, "", fmt.Errorf("%w: reference %q: the repository %s is the backend's own (snapshots being taken)", backend.ErrInvalidConfig, req.Ref, strings.TrimSuffix(makingRepo, "/"))
	}
	c, err := s.inspect(ctx)
	if err != nil {
		return backend.Snapshot{}, "", err
	}
	now := time.Now().UTC()
	ref := cmp(req.Ref, "sandboxkit-snapshot/"+s.id+":"+fmt.Sprint(now.UnixNano()))
	labels := snapshotLabels(c.Config.Labels, req.Labels)
	labels[labelSnapshot] = "1"
	labels[backend.LabelSnapshotOf] = s.id
	labels[labelMaker] = maker
	if req.TTL > 0 {
		labels[backend.LabelExpiresAt] = now.Add(req.TTL).Format(time.RFC3339)
	}
	making = makingRepo + s.id + ":" + newID()
	if _, err := s.commit(ctx, making, "sandboxkit snapshot of sandbox "+s.id, labels); err != nil {
		return backend.Snapshot{}, "", err
	}
	img, err := s.b.cli.ImageInspect(ctx, making)
	if err != nil {
		s.b.dropMaking(ctx, making)
		return backend.Snapshot{}, "", s.b.translate(err)
	}
	return snapshotOf(ref, c.Config.Image, img.Size, img.Config.Labels, img.Created), making, nil
}

// handOverSnapshot gives the image tagged making its reference ref and
// takes the making tag off: from the first step on the snapshot is the
// caller's. A making tag left (the engine failed the untag) is logged;
// PruneCaches removes it.
func (b *Backend) handOverSnapshot(ctx context.Context, making, ref string) error {
	if err := b.cli.ImageTag(ctx, making, ref); err != nil {
		// The engine may have made the tag while the call failed (a
		// cancelled ctx): the caller is told the snapshot failed, so the
		// tag goes too (only if it names this image).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if mi, ierr := b.cli.ImageInspect(rctx, making); ierr == nil {
			if ri, rerr := b.cli.ImageInspect(rctx, ref); rerr == nil && ri.ID == mi.ID {
				if _, err := b.cli.ImageRemove(rctx, ref, image.RemoveOptions{}); err != nil {
					b.log.Warn("untagging a snapshot that failed", "image", ref, "err", b.translate(err))
				}
			}
		}
		b.dropMaking(ctx, making)
		return b.translate(err)
	}
	if _, err := b.cli.ImageRemove(ctx, making, image.RemoveOptions{}); err != nil {
		b.log.Warn("untagging a snapshot taken (sbx gc does it later)", "image", ref, "tag", making, "err", b.translate(err))
	}
	return nil
}

// dropMaking removes the image of a snapshot that failed, by its making
// tag.
func (b *Backend) dropMaking(ctx context.Context, making string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := b.cli.ImageRemove(rctx, making, image.RemoveOptions{}); err != nil && !errors.Is(b.translate(err), backend.ErrNotFound) {
		b.log.Warn("removing the image of a failed snapshot (sbx gc removes it later)", "image", making, "err", err)
	}
}

// isMakingTag reports whether an image's tag (as the engine lists it, or
// as asked for) is in the makingRepo.
func isMakingTag(tag string) bool {
	return strings.HasPrefix(strings.TrimPrefix(shortTag(tag), "localhost/"), makingRepo)
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
		if v != "" && k != labelMaker {
			sn.Labels[k] = v
		}
	}
	sn.CreatedAt, _ = time.Parse(time.RFC3339Nano, created)
	sn.ExpiresAt, _ = time.Parse(time.RFC3339, labels[backend.LabelExpiresAt])
	return sn
}

// ListSnapshots lists the snapshot images that match filter, one entry
// per tag. A snapshot still being taken is listed by its making tag, with
// backend.LabelCreator naming its maker (see above).
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
		tags, making := snapshotTags(img.RepoTags)
		creator := ""
		if len(tags) == 0 {
			tags, creator = making, img.Labels[labelMaker]
		}
		for _, tag := range tags {
			sn := snapshotOf(tag, "", img.Size, img.Labels, "")
			sn.CreatedAt = time.Unix(img.Created, 0).UTC()
			if creator != "" {
				sn.Labels[backend.LabelCreator] = creator
			}
			out = append(out, sn)
		}
	}
	return out, nil
}

// snapshotTags splits an image's tags (as the engine lists them) into its
// own and those in the makingRepo, each as Docker names it.
func snapshotTags(repoTags []string) (own, making []string) {
	for _, t := range repoTags {
		switch {
		case !isTag(t):
		case isMakingTag(t):
			making = append(making, shortTag(t))
		default:
			own = append(own, shortTag(t))
		}
	}
	return own, making
}

// pruneMakingTags takes the making tags off the snapshots that have their
// own tag too: a Snapshot killed between its two last steps.
func (b *Backend) pruneMakingTags(ctx context.Context, dryRun bool) ([]string, error) {
	imgs, err := b.cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", labelSnapshot+"=1"))})
	if err != nil {
		return nil, b.translate(err)
	}
	var pruned []string
	for _, img := range imgs {
		own, making := snapshotTags(img.RepoTags)
		if len(own) == 0 {
			continue // being taken, or cut short: ListSnapshots shows it
		}
		for _, tag := range making {
			pruned = append(pruned, "tag "+tag+" of snapshot "+own[0]+" (taken)")
			if dryRun {
				continue
			}
			if _, err := b.cli.ImageRemove(ctx, tag, image.RemoveOptions{}); err != nil && !errors.Is(b.translate(err), backend.ErrNotFound) {
				return pruned, b.translate(err)
			}
		}
	}
	return pruned, nil
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
// forked (the engine refuses the second binding). Until Fork returns, the
// forks' containers are named as being made (see above).
func (s *Sandbox) Fork(ctx context.Context, req backend.ForkRequest) ([]backend.Sandbox, error) {
	forks, ref, err := s.makeForks(ctx, req, owner.Self())
	var told error // the caller's, passed on as it is (not translated)
	if err == nil {
		ids := make([]string, len(forks))
		for i, f := range forks {
			ids[i] = f.sb.ID()
		}
		if told = req.TellMade(ids); told == nil {
			err = s.b.handOverForks(ctx, forks)
		}
		if err != nil || told != nil {
			s.dropForks(ctx, forks, ref)
		}
	}
	if told != nil {
		return nil, backend.WrapOp("fork", Name, s.id, told)
	}
	if err != nil {
		return nil, s.opErr("fork", err)
	}
	out := make([]backend.Sandbox, len(forks))
	for i, f := range forks {
		out[i] = f.sb
	}
	return out, nil
}

// madeFork is a fork whose container runs under its making name.
type madeFork struct {
	sb   *Sandbox
	name string // the container's name once handed over
}

// handOverForks renames the forks' containers from their making names to
// their own: from then on each is the caller's.
func (b *Backend) handOverForks(ctx context.Context, forks []madeFork) error {
	errs := make([]error, len(forks))
	var wg sync.WaitGroup
	for i, f := range forks {
		wg.Go(func() { errs[i] = b.translate(b.cli.ContainerRename(ctx, f.sb.cid, f.name)) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// dropForks removes the forks made so far, and the image they were made
// from (ref), after a failure.
func (s *Sandbox) dropForks(ctx context.Context, forks []madeFork, ref string) {
	for _, f := range forks {
		f.sb.Destroy(context.WithoutCancel(ctx))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := s.b.cli.ImageRemove(rctx, ref, image.RemoveOptions{}); err != nil {
		s.b.log.Warn("removing the image of a failed fork (sbx gc removes it later)", "image", ref, "err", err)
	}
}

// makeForks commits the container to an image (ref) and starts the forks
// req asks for from it, named as being made by maker; on failure it
// removes what it made.
func (s *Sandbox) makeForks(ctx context.Context, req backend.ForkRequest, maker string) (_ []madeFork, ref string, err error) {
	if req.N < 1 {
		return nil, "", fmt.Errorf("%w: fork: n must be at least 1, got %d", backend.ErrInvalidConfig, req.N)
	}
	if s.adopted {
		return nil, "", fmt.Errorf("%w: the sandbox is an existing container sandboxkit did not make", errors.ErrUnsupported)
	}
	c, err := s.inspect(ctx)
	if err != nil {
		return nil, "", err
	}
	ref = "sandboxkit-fork/" + s.id + ":" + newID()
	labels := snapshotLabels(c.Config.Labels, nil)
	labels[labelForkImage] = s.id
	if _, err := s.commit(ctx, ref, "sandboxkit fork of sandbox "+s.id, labels); err != nil {
		return nil, "", err
	}
	// The image keeps its tag while forks use it (untagging a used
	// image needs force, and Podman's force removes the containers too):
	// PruneCaches removes it once the last fork is gone.
	forks := make([]madeFork, 0, req.N)
	defer func() {
		if err != nil {
			s.dropForks(ctx, forks, ref)
		}
	}()
	for range req.N {
		f, err := s.startFork(ctx, c, ref, req, maker)
		if err != nil {
			return nil, "", err
		}
		forks = append(forks, f)
	}
	return forks, ref, nil
}

// startFork creates and starts one fork of the container c from image ref,
// named as being made by maker.
func (s *Sandbox) startFork(ctx context.Context, c container.InspectResponse, ref string, req backend.ForkRequest, maker string) (madeFork, error) {
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
	cfg.Labels[labelMaker] = maker
	if rt := old[backend.LabelRuntime]; rt != "" {
		// The fork runs on its parent's runtime (its HostConfig's).
		cfg.Labels[backend.LabelRuntime] = rt
	}
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
	var ef *forkedEnforcer
	if s.egress != "" {
		// A network and enforcer of its own, with the parent's policy and
		// credentials (a CA and placeholders of its own); it joins it as
		// its parent joined its parent's.
		var err error
		if ef, err = s.forkEnforcer(ctx, spec, id); err != nil {
			return madeFork{}, err
		}
		cfg.Labels[labelEgress] = ef.name
		cfg.Hostname, cfg.Domainname = "", "" // the enforcer's (a joined namespace has no other)
		hc.NetworkMode = container.NetworkMode("container:" + ef.name)
		cfg.Env = backendkit.ReplacePlaceholders(cfg.Env, ef.placeholders)
		nc = nil
	}
	name := containerName(spec, id)
	created, err := s.b.cli.ContainerCreate(ctx, &cfg, &hc, nc, nil, name+makingSuffix)
	if err == nil && ef != nil && ef.caPEM != "" {
		err = s.b.installCA(ctx, created.ID, ef.caPEM, ef.parentCA)
	}
	if err != nil {
		if created.ID != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			s.b.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			cancel()
		}
		if ef != nil {
			ef.drop(ctx)
		}
		return madeFork{}, s.b.explainCreate(err)
	}
	if err := s.b.cli.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		if ef != nil {
			defer ef.drop(ctx)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		s.b.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		return madeFork{}, s.b.explainCreate(err)
	}
	sb := &Sandbox{b: s.b, id: id, cid: created.ID, workDir: s.workDir, pool: false,
		autoRemove: hc.AutoRemove, bareInit: s.bareInit, runtime: hc.Runtime}
	if ef != nil {
		sb.egress = ef.name
	}
	return madeFork{sb: sb, name: name}, nil
}

// forkedEnforcer is the enforcer started for a fork of a sandbox with a
// policy.
type forkedEnforcer struct {
	b    *Backend
	name string
	// With credentials: the fork's CA (caPEM), the parent's (parentCA),
	// and the fork's placeholder for each of the parent's.
	caPEM, parentCA string
	placeholders    map[string]string
}

// drop removes the enforcer after a failure.
func (f *forkedEnforcer) drop(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := f.b.removeEnforcer(rctx, f.name); err != nil {
		f.b.log.Warn("removing a failed fork's egress enforcer failed", "enforcer", f.name, "err", err)
	}
}

// forkEnforcer starts the enforcer of fork id (of spec) of s: a copy of
// s's enforcer's container with s's policy as it is now and, when s
// brokers credentials, the same values under a CA and placeholders of the
// fork's own (backendkit.ForkCredentials), copied into the new enforcer
// alone.
func (s *Sandbox) forkEnforcer(ctx context.Context, spec backend.Spec, id string) (*forkedEnforcer, error) {
	ec, err := s.b.cli.ContainerInspect(ctx, s.egress)
	if err != nil {
		return nil, fmt.Errorf("the parent's egress enforcer: %w", s.b.translate(err))
	}
	st, err := s.b.EgressStatus(ctx, s.id)
	if err != nil {
		return nil, err
	}
	policy, err := json.Marshal(st.Policy)
	if err != nil {
		return nil, err
	}
	ecfg := *ec.Config
	ecfg.Entrypoint = slices.Clone(ecfg.Entrypoint)
	for i, a := range ecfg.Entrypoint {
		if a == "--policy-json" && i+1 < len(ecfg.Entrypoint) {
			ecfg.Entrypoint[i+1] = string(policy)
		}
	}
	ecfg.Env = slices.Clone(ecfg.Env)
	ecfg.Labels = maps.Clone(ecfg.Labels)
	ecfg.Labels[labelEgressFor] = id
	ecfg.Labels[backend.LabelCreator] = owner.Self()
	if spec.Session != "" {
		ecfg.Labels[backend.LabelSession] = spec.Session
	}
	if len(ec.ID) >= 12 && ecfg.Hostname == ec.ID[:12] {
		ecfg.Hostname = ""
	}
	ehc := *ec.HostConfig
	ehc.Mounts = slices.Clone(ehc.Mounts)
	// The fork publishes no fixed host ports: they are its parent's.
	ehc.PortBindings = nil
	ecfg.ExposedPorts = nil
	f := &forkedEnforcer{b: s.b, name: enforcerName(id)}
	files := map[string]fileInTar{}
	if slices.Contains(ecfg.Entrypoint, "--credentials") {
		parent, err := s.b.readContainerFile(ctx, ec.ID, egressCredentials)
		if err != nil {
			return nil, fmt.Errorf("the parent's credentials: %w", s.b.translate(err))
		}
		br, parentCA, phs, err := backendkit.ForkCredentials(id, parent)
		if err != nil {
			return nil, err
		}
		f.caPEM, f.parentCA, f.placeholders = br.CAPEM, parentCA, phs
		files[egressCredentials] = fileInTar{data: br.EnforcerFile, mode: 0o600}
		if roots, err := s.b.readContainerFile(ctx, ec.ID, egressRoots); err == nil {
			files[egressRoots] = fileInTar{data: roots, mode: 0o644}
		}
	}
	hasSbxd := slices.ContainsFunc(ehc.Mounts, func(m mount.Mount) bool { return m.Target == sbxdDir && m.Type == mount.TypeVolume && m.Source != "" })
	inject := func(ctx context.Context, cid string) error {
		if !hasSbxd {
			facts, err := s.b.facts(ctx)
			if err != nil {
				return err
			}
			bin, err := sbxdbin.Lookup(s.b.cfg.SbxdPath, facts.arch)
			if err != nil {
				return err
			}
			if err := s.b.injectSbxd(ctx, cid, bin, &ehc, errSbxdCopyForced); err != nil {
				return err
			}
		}
		if len(files) == 0 {
			return nil
		}
		if err := s.b.cli.CopyToContainer(ctx, cid, "/", filesTar(files), container.CopyToContainerOptions{}); err != nil {
			return fmt.Errorf("egress enforcer: its credentials: %w", s.b.translate(err))
		}
		return nil
	}
	espec := spec
	espec.Ports = nil
	if _, err := s.b.runEnforcer(ctx, espec, f.name, &ecfg, &ehc, inject); err != nil {
		return nil, err
	}
	return f, nil
}

// markMaking makes info, of a container named name, say what the
// container's name and labelMaker say: a fork being made is in
// StateCreating, with backend.LabelCreator naming its maker (see above).
// labelMaker itself is not shown.
func markMaking(info *backend.Info, name string) {
	maker := info.Labels[labelMaker]
	delete(info.Labels, labelMaker)
	if maker != "" && strings.HasSuffix(name, makingSuffix) {
		info.State = backend.StateCreating
		info.Labels[backend.LabelCreator] = maker
	}
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
// uses; transient ones only once they are older than backend.PruneGrace
// (made, or tagged by a load, that long ago): a gc (or another program's
// PruneCaches on a shared engine) between a restore's load and its
// create failed the create with a missing image.
func (b *Backend) pruneForkImages(ctx context.Context, dryRun bool) ([]string, error) {
	grace := backend.PruneGrace(ctx)
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
			if grace > 0 && b.imageTouchedWithin(ctx, img, grace) {
				continue
			}
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

// imageTouchedWithin reports whether img was made or last tagged (a load
// tags what it loads; Docker records when) within d. An image whose
// inspection fails counts as touched: kept for the next gc.
func (b *Backend) imageTouchedWithin(ctx context.Context, img image.Summary, d time.Duration) bool {
	touched := time.Unix(img.Created, 0)
	ins, err := b.cli.ImageInspect(ctx, img.ID)
	if err != nil {
		return !errors.Is(b.translate(err), backend.ErrNotFound)
	}
	if t := ins.Metadata.LastTagTime; t.After(touched) {
		touched = t
	}
	return time.Since(touched) < d
}

// isTag reports whether an image list's tag is one: older engines list
// untagged images as "<none>:<none>".
func isTag(t string) bool { return t != "" && t != "<none>:<none>" }
