package lite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// A fork standby is a sandbox made ahead for a sandbox's next fork: its
// record, bundle and host files, an empty writable layer over the parent's
// image, mounted, and its container made with the runtime's create (its
// namespaces, cgroup and mounts ready, its first process waiting). After a
// fork of a rootful sandbox, one is made in the background; the next fork
// of one sandbox (N = 1) takes it: with the parent frozen, the parent's
// layer is laid over the standby's mounted root file system (mergeLayer),
// and the container is started, which takes a runtime start instead of a
// whole run. A layer that cannot be merged (see errMergeUnsupported)
// falls back to a copy and a run, and the standby is removed.
//
// The parent's record names its standby (ForkStandby), and the standby's
// its parent (StandbyFor); List leaves standbys out. Destroying the parent
// destroys its standby. PruneCaches (sbx gc) removes a standby that no
// parent names once its maker is gone: what a process killed while making
// or taking one leaves.

// labelStandbyFor marks a standby's Info; List leaves those out.
const labelStandbyFor = backend.LabelPrefix + "lite.standby-for"

// prepareForkStandby makes a fork standby for the sandbox, unless it has
// one or cannot be forked that way (rootless, an egress policy, being
// made or removed). It runs in the background after a fork.
func (s *Sandbox) prepareForkStandby() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pm, err := s.meta()
	if err != nil || !standbyFits(pm) {
		return
	}
	cfg, err := readConfig(bundleDir(s.dir, pm.Gen))
	if err != nil {
		return
	}
	p, err := s.b.recordFork(pm, backend.ForkRequest{N: 1}, s.id, "")
	if err == nil {
		err = s.makeForkStandby(ctx, p, cfg)
	}
	if err != nil {
		if errors.Is(err, errStandbyUnneeded) {
			s.b.log.Debug("a container made for the next fork is not needed", "sandbox", s.id, "err", err)
		} else {
			s.b.log.Warn("preparing a container for the next fork", "sandbox", s.id, "err", err)
		}
		if p != nil {
			s.dropStandby(ctx, p.sb)
		}
	}
}

// errStandbyUnneeded: the sandbox was removed, or got a standby from
// another fork, while one was made.
var errStandbyUnneeded = errors.New("the sandbox was removed or has one")

// standbyFits reports whether a fork standby can serve sandbox m.
func standbyFits(m *meta) bool {
	return m.ForkStandby == "" && m.StandbyFor == "" && !m.Rootless && m.Egress == nil && m.Creator == "" && !m.Removing
}

// makeForkStandby makes standby p of the sandbox, recorded (recordFork),
// whose OCI config is cfg, and names it in the sandbox's record.
func (s *Sandbox) makeForkStandby(ctx context.Context, p *forkPlan, cfg *specs.Spec) error {
	m, dir := p.m, p.sb.dir
	if err := s.b.writeForkBundle(p, cfg, s, true); err != nil {
		return err
	}
	if err := makeUpper(m.Lower, dir, 0); err != nil {
		return err
	}
	if err := mountOverlay(m.Lower, dir, 0); err != nil {
		return err
	}
	done := s.b.startLow(m, cgroupName(m.ID, 0))
	pid, err := m.runtime().launch(ctx, nil, "create", m.ContainerID, bundleDir(dir, 0), filepath.Join(dir, "main.log"))
	done()
	if err != nil {
		return err
	}
	start, _ := procfs.StartTime(pid)
	if err := s.b.update(m, func(cur *meta) { cur.InitPID, cur.InitStart = pid, start }); err != nil {
		return err
	}
	// Named by the parent, then no longer being made: PruneCaches
	// leaves it alone all along.
	linked := false
	unlock := s.lock()
	if pm, err := s.meta(); err == nil && standbyFits(pm) {
		linked = s.update(pm, func(cur *meta) { cur.ForkStandby = m.ID }) == nil
	}
	unlock()
	if !linked {
		return errStandbyUnneeded
	}
	return s.b.update(m, func(cur *meta) { cur.Creator = "" })
}

// dropStandby destroys standby sb, quietly: what is left goes with sbx gc.
func (s *Sandbox) dropStandby(ctx context.Context, sb *Sandbox) {
	if err := sb.Destroy(context.WithoutCancel(ctx)); err != nil {
		s.b.log.Warn("removing a container made for a fork", "sandbox", s.id, "standby", sb.id, "err", err)
	}
}

// takeForkStandby takes the sandbox's fork standby, if it has one that
// waits, for a fork like req; pm is the sandbox's record, under its lock.
// The standby is then an ordinary sandbox being made (Creator set), which
// the caller starts or destroys. A standby that cannot serve is destroyed
// in the background.
func (s *Sandbox) takeForkStandby(pm *meta, req backend.ForkRequest) *forkPlan {
	id := pm.ForkStandby
	if id == "" {
		return nil
	}
	if err := s.update(pm, func(cur *meta) { cur.ForkStandby = "" }); err != nil {
		return nil
	}
	sb := &Sandbox{b: s.b, id: id, dir: filepath.Join(s.b.dir, id)}
	m, err := sb.meta()
	if err == nil && (m.StandbyFor != s.id || m.InitPID == 0 || !procfs.Alive(m.InitPID, m.InitStart)) {
		err = errors.New("its container is gone")
	}
	if err == nil {
		fm := forkMeta(pm, id, req)
		err = s.b.update(m, func(cur *meta) {
			pid, start := cur.InitPID, cur.InitStart
			*cur = *fm
			cur.InitPID, cur.InitStart = pid, start
		})
	}
	if err != nil {
		s.b.log.Debug("a container made for a fork cannot serve", "sandbox", s.id, "standby", id, "err", err)
		s.b.background(func() { s.dropStandby(context.Background(), sb) })
		return nil
	}
	return &forkPlan{sb: sb, m: m, standby: true}
}

// mergeInto lays the sandbox's layer (of record pm) over the root file
// system of standby p, which it holds in its mount namespace (see
// mergeLayer).
func (s *Sandbox) mergeInto(pm *meta, p *forkPlan) error {
	mounts, err := s.b.standbyMounts(p)
	if err != nil {
		return err
	}
	if !procfs.Alive(p.m.InitPID, p.m.InitStart) {
		return errors.New("the container made for the fork is gone")
	}
	return mergeLayer(upperDir(s.dir, pm.Gen), rootfsDir(p.sb.dir, 0), mounts, pm.WorkDir)
}

// standbyMounts returns the mount points of standby p's container, inside
// it: those its first process's mount namespace shows, or under gVisor,
// whose mounts are the sentry's and whose first process on the host (the
// sentry) shows none of them, the mounts of its config.
func (b *Backend) standbyMounts(p *forkPlan) ([]string, error) {
	if !p.m.runtime().gvisor() {
		return mountPoints(fmt.Sprintf("/proc/%d/mountinfo", p.m.InitPID))
	}
	cfg, err := readConfig(bundleDir(p.sb.dir, 0))
	if err != nil {
		return nil, err
	}
	mounts := []string{"/"}
	for _, m := range cfg.Mounts {
		mounts = append(mounts, m.Destination)
	}
	return mounts, nil
}

// pruneForkStandbys destroys fork standbys that no sandbox names and whose
// maker is gone; with dryRun it only names them.
func (b *Backend) pruneForkStandbys(ctx context.Context, dryRun bool) ([]string, error) {
	ids, err := statedir.IDs(b.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, id := range ids {
		m, err := readMeta(filepath.Join(b.dir, id))
		if err != nil || m.StandbyFor == "" {
			continue
		}
		if pm, err := readMeta(filepath.Join(b.dir, m.StandbyFor)); err == nil && pm.ForkStandby == id && !pm.Removing {
			continue
		}
		if alive, _ := owner.Alive(m.Creator); m.Creator != "" && alive {
			continue // being made
		}
		names = append(names, "fork standby "+id+" of sandbox "+m.StandbyFor)
		if dryRun {
			continue
		}
		sb := &Sandbox{b: b, id: id, dir: filepath.Join(b.dir, id)}
		if err := sb.Destroy(ctx); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return names, err
		}
	}
	return names, nil
}

// withoutStandbys leaves fork standbys out of infos.
func withoutStandbys(infos []backend.Info) []backend.Info {
	out := infos[:0]
	for _, i := range infos {
		if i.Labels[labelStandbyFor] == "" {
			out = append(out, i)
		}
	}
	return out
}
