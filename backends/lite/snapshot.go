package lite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Snapshots.
//
// A snapshot of a sandbox is its overlay's upper folder written as an OCI
// layer (layer.tar: a tar with OCI whiteouts; see writeLayer) on top of
// the sandbox's image, kept in the image folder like any unpacked image:
//
//	<images>/snapshot-<id>/layer.tar    the layer
//	<images>/snapshot-<id>/rootfs/      the image with the layer applied
//	<images>/snapshot-<id>/config.json  the image's config (entrypoint, env)
//	<images>/snapshots/<hash of name>.json  the name's record (backendkit.SnapshotNames)
//
// Spec.Image "snapshot:NAME" starts a sandbox from it: rootfs is the
// overlay's lower layer, as an unpacked image's is. rootfs is the base
// image's files hard-linked (lower layers are never written in place) with
// the layer applied (each file it holds written anew), so it costs the
// layer's size plus a link per file of the image.
//
// Removing a snapshot removes its name; its folder goes with it when no
// sandbox runs on it, else Backend.PruneCaches (sbx gc) removes it once
// none does. PruneCaches also removes snapshots whose TTL has run out.

// srcSnapshot prefixes the image reference of a snapshot.
const srcSnapshot = backendkit.SnapshotPrefix

// names holds the snapshots' name records.
func (s *imageStore) names() backendkit.SnapshotNames {
	return backendkit.SnapshotNames(filepath.Join(s.dir, "snapshots"))
}

// snapshot resolves a snapshot's name to its unpacked image.
func (s *imageStore) snapshot(name string) (*image, error) {
	r, err := s.names().Read(name)
	if err != nil {
		return nil, err
	}
	img, err := s.cached(r.Key)
	if err != nil {
		return nil, imageErr(srcSnapshot+name, err)
	}
	return img, nil
}

var (
	_ backend.Snapshotter     = (*Sandbox)(nil)
	_ backend.SnapshotManager = (*Backend)(nil)
	_ backend.CachePruner     = (*Backend)(nil)
)

// Snapshot writes the sandbox's upper layer as an OCI layer on top of its
// image and makes the image that layer gives, named req.Ref ("" names it
// <sandbox id>-<time>); Spec.Image "snapshot:NAME" (the Ref returned)
// starts sandboxes from it. A running sandbox is paused while its layer
// is written. An existing snapshot of the same name is replaced.
func (s *Sandbox) Snapshot(ctx context.Context, req backend.SnapshotRequest) (backend.Snapshot, error) {
	snap, err := s.snapshot(ctx, req)
	if err != nil {
		return backend.Snapshot{}, s.opErr("snapshot", err)
	}
	return snap, nil
}

func (s *Sandbox) snapshot(ctx context.Context, req backend.SnapshotRequest) (backend.Snapshot, error) {
	if req.TTL < 0 {
		return backend.Snapshot{}, fmt.Errorf("%w: ttl must not be negative, got %s", backend.ErrInvalidConfig, req.TTL)
	}
	name := backendkit.SnapshotName(req.Ref)
	now := time.Now().UTC().Truncate(time.Millisecond)
	store := s.b.images
	id, err := statedir.NewID()
	if err != nil {
		return backend.Snapshot{}, err
	}
	if name == "" {
		// The time, and part of the key: two snapshots of one
		// sandbox in one millisecond must not share a name.
		name = s.id + "-" + now.Format("20060102T150405.000") + "-" + id[:6]
	}
	key := "snapshot-" + id
	tmp, err := snapshotTemp(store.dir)
	if err != nil {
		return backend.Snapshot{}, err
	}
	defer os.RemoveAll(tmp)

	unlock := s.lock()
	m, size, digest, err := s.writeUpperLayer(ctx, filepath.Join(tmp, "layer.tar"))
	unlock()
	if err != nil {
		return backend.Snapshot{}, err
	}
	if err := buildSnapshotRootfs(m.Lower, tmp); err != nil {
		return backend.Snapshot{}, err
	}
	cfg := imageConfig{}
	if m.ImageDigest != "" {
		if base, err := store.cached(cacheKey(m.ImageDigest)); err == nil {
			cfg = base.config
		}
	}
	// The snapshot's image ID, which a sandbox made from it records as
	// its ImageDigest.
	cfg.Digest = strings.Replace(key, "-", ":", 1)
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), data, 0o644); err != nil {
		return backend.Snapshot{}, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return backend.Snapshot{}, err
	}
	if err := os.Rename(tmp, filepath.Join(store.dir, key)); err != nil {
		return backend.Snapshot{}, err
	}
	rec := backendkit.NewSnapshotRecord(Name, s.id, m.Session, name, key, now, req)
	rec.Base, rec.Size = m.Image, size
	rec.Labels["sandboxkit.layer-digest"] = digest
	old, _ := store.names().Read(name)
	if err := store.names().Write(rec); err != nil {
		removeTree(filepath.Join(store.dir, key))
		return backend.Snapshot{}, err
	}
	if old != nil && old.Key != key {
		s.b.dropSnapshotDir(old.Key)
	}
	s.b.log.Debug("snapshot", "sandbox", s.id, "ref", srcSnapshot+name, "layer_bytes", size)
	return rec.Snapshot(), nil
}

// snapshotTempPrefix begins the name of the folder a Snapshot fills
// before it renames it into place (backendkit.SnapshotTempPattern), so that
// PruneCaches removes the folder of a Snapshot killed on the way (its
// layer and image, as large as the sandbox's changes).
const snapshotTempPrefix = backendkit.SnapshotTempPrefix

// snapshotTemp makes a Snapshot's folder in dir, named for this process.
func snapshotTemp(dir string) (string, error) {
	return os.MkdirTemp(dir, backendkit.SnapshotTempPattern())
}

// writeUpperLayer writes the sandbox's upper layer to file as an OCI layer
// (the sandbox paused meanwhile if it runs) and returns the sandbox's
// record, the layer's size and its digest (its OCI diff ID). The caller
// holds the sandbox's lock.
func (s *Sandbox) writeUpperLayer(ctx context.Context, file string) (*meta, int64, string, error) {
	m, err := s.meta()
	if err != nil {
		return nil, 0, "", err
	}
	resume, err := s.freeze(ctx, m)
	if err != nil {
		return nil, 0, "", err
	}
	defer resume()
	f, err := os.Create(file)
	if err != nil {
		return nil, 0, "", err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	err = writeLayer(cw, upperDir(s.dir, m.Gen), m.Rootless)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, 0, "", fmt.Errorf("writing the sandbox's layer: %w", err)
	}
	return m, cw.n, "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// pauseTimeout bounds the runtime's pause where freeze falls back to it.
const pauseTimeout = 30 * time.Second

// freeze pauses the sandbox, when it runs and is not paused, so that its
// files hold still, and returns what undoes it: the cgroup's freezer
// where the sandbox has a cgroup, else Pause.
func (s *Sandbox) freeze(ctx context.Context, m *meta) (resume func(), err error) {
	if m.Paused || m.InitPID == 0 || !procfs.Alive(m.InitPID, m.InitStart) {
		return func() {}, nil
	}
	// Each way is recorded before it is tried, so that a freeze whose
	// process is killed is undone (see thaw.go). gVisor's sandboxes are
	// paused by runsc, which stops their tasks inside the sentry: the
	// kernel's freezer stops the sentry's own threads and stub processes
	// wherever they are, and a release's systrap platform panicked when
	// that landed while it set up a stub for a new process ("failed
	// getting response from syscall thread"; a fork right after create
	// lost its parent in about 4 of 10 runs of TestForkStandby).
	if !m.Rootless && !m.runtime().gvisor() {
		if err := markFrozen(s.dir, "cgroup"); err != nil {
			return nil, err
		}
		if freezeCgroup(m, true) == nil {
			return func() {
				if err := freezeCgroup(m, false); err != nil {
					s.b.log.Warn("thawing a sandbox after copying its files", "sandbox", s.id, "err", err)
					return
				}
				unmarkFrozen(s.dir)
			}, nil
		}
		// A freeze that did not complete in time (under load, a task that
		// does not stop) leaves the cgroup freezing: thawed before the
		// runtime's pause, which would otherwise wait on it (runsc's did,
		// for its whole timeout, in a loaded CI run).
		freezeCgroup(m, false)
	}
	if err := markFrozen(s.dir, "pause"); err != nil {
		return nil, err
	}
	// The runtime's pause waits for the freezer too, and under heavy load
	// it was seen to wait without end: it gets pauseTimeout.
	pctx, cancel := context.WithTimeout(ctx, pauseTimeout)
	defer cancel()
	if err := s.setPaused(pctx, true); err != nil {
		// A pause cut short may leave the sandbox frozen or freezing:
		// thawed here, else the mark stays for thaw.go to undo.
		if m.Rootless || freezeCgroup(m, false) == nil {
			unmarkFrozen(s.dir)
		}
		return nil, err
	}
	return func() {
		if err := s.setPaused(context.WithoutCancel(ctx), false); err != nil {
			s.b.log.Warn("resuming a sandbox after copying its files", "sandbox", s.id, "err", err)
			return
		}
		unmarkFrozen(s.dir)
	}, nil
}

// buildSnapshotRootfs makes dir/rootfs: lower hard-linked, with the layer
// dir/layer.tar applied.
func buildSnapshotRootfs(lower, dir string) error {
	rootfs := filepath.Join(dir, "rootfs")
	if err := copyTree(lower, rootfs, linkFiles); err != nil {
		return fmt.Errorf("copying the image: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "layer.tar"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := applyLayer(f, rootfs); err != nil {
		return fmt.Errorf("applying the sandbox's layer: %w", err)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ListSnapshots lists the snapshots in the image folder that match filter.
func (b *Backend) ListSnapshots(ctx context.Context, filter backend.Filter) ([]backend.Snapshot, error) {
	return b.images.names().List(Name, filter)
}

// RemoveSnapshot removes a snapshot's name and, unless a sandbox runs on
// it, its folder (else PruneCaches removes that later).
func (b *Backend) RemoveSnapshot(ctx context.Context, ref string) error {
	name := backendkit.SnapshotName(ref)
	r, err := b.images.names().Read(name)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	if err == nil {
		err = b.images.names().Remove(name)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &backend.OpError{Op: "remove snapshot", Backend: Name, Err: err}
	}
	b.dropSnapshotDir(r.Key)
	return nil
}

// dropSnapshotDir removes snapshot folder key unless a name or a sandbox
// still uses it, and reports whether it did.
func (b *Backend) dropSnapshotDir(key string) bool {
	if used, err := b.snapshotDirsInUse(); err != nil || used[key] {
		return false
	}
	if err := removeTree(filepath.Join(b.images.dir, key)); err != nil {
		b.log.Warn("removing a snapshot's folder", "folder", key, "err", err)
		return false
	}
	return true
}

// snapshotDirsInUse returns the snapshot folders a name or a sandbox uses.
func (b *Backend) snapshotDirsInUse() (map[string]bool, error) {
	used, err := b.snapshotDirsOfSandboxes()
	if err != nil {
		return nil, err
	}
	recs, err := b.images.names().All()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		used[r.Key] = true
	}
	return used, nil
}

// snapshotDirsOfSandboxes returns the snapshot folders sandboxes run on.
func (b *Backend) snapshotDirsOfSandboxes() (map[string]bool, error) {
	used := map[string]bool{}
	ids, err := statedir.IDs(b.dir)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		m, err := readMeta(filepath.Join(b.dir, id))
		if err != nil {
			if errors.Is(err, backend.ErrNotFound) {
				continue // half made or removed: no overlay of its own yet
			}
			return nil, err
		}
		if rel, err := filepath.Rel(b.images.dir, m.Lower); err == nil && strings.HasPrefix(rel, "snapshot-") {
			used[strings.Split(rel, string(filepath.Separator))[0]] = true
		}
	}
	return used, nil
}

// PruneCaches removes the snapshots whose TTL has run out, those labelled
// backend.LabelTransient that no sandbox runs on (older than
// backend.PruneGrace: a Create from a loaded image resolves it before its
// record names the folder), and snapshot folders that neither a name nor
// a sandbox uses (a snapshot removed while a sandbox ran on it), the folders of
// Snapshots killed on the way, the hand-over marks of killed forks
// (statedir.PruneBatches), and what a killed
// CreateVolume or RemoveVolume left (see volumes.go); with dryRun it only
// names them. It also thaws sandboxes that a killed Snapshot or Fork left
// frozen (see thaw.go). sbx gc calls it.
func (b *Backend) PruneCaches(ctx context.Context, dryRun bool) ([]string, error) {
	// Sandboxes left frozen by a Snapshot or Fork that was killed.
	var thawed []string
	if ids, err := statedir.IDs(b.dir); err == nil {
		for _, id := range ids {
			sb := &Sandbox{b: b, id: id, dir: filepath.Join(b.dir, id)}
			if !dryRun && sb.thawOrphan(ctx) {
				thawed = append(thawed, "freeze of sandbox "+id+" (its freezer is gone)")
			}
		}
	}
	recs, err := b.images.names().All()
	if err != nil {
		return nil, &backend.OpError{Op: "prune", Backend: Name, Err: err}
	}
	running, err := b.snapshotDirsOfSandboxes()
	if err != nil {
		return nil, &backend.OpError{Op: "prune", Backend: Name, Err: err}
	}
	names := thawed
	if standbys, err := b.pruneForkStandbys(ctx, dryRun); err != nil {
		return append(names, standbys...), &backend.OpError{Op: "prune", Backend: Name, Err: err}
	} else {
		names = append(names, standbys...)
	}
	if marks, err := statedir.PruneBatches(b.dir, dryRun); err != nil {
		return append(names, marks...), &backend.OpError{Op: "prune", Backend: Name, Err: err}
	} else {
		names = append(names, marks...)
	}
	if nets, err := pruneEgress(dryRun); err != nil {
		return append(names, nets...), &backend.OpError{Op: "prune", Backend: Name, Err: err}
	} else {
		names = append(names, nets...)
	}
	now, grace := time.Now(), backend.PruneGrace(ctx)
	for _, r := range recs {
		expired := !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
		unused := r.Labels[backend.LabelTransient] != "" && !running[r.Key] && now.Sub(r.CreatedAt) >= grace
		if !expired && !unused {
			continue
		}
		names = append(names, "snapshot "+srcSnapshot+r.Name)
		if !dryRun {
			if err := b.RemoveSnapshot(ctx, r.Name); err != nil {
				return names, err
			}
		}
	}
	used, err := b.snapshotDirsInUse()
	if err != nil {
		return names, &backend.OpError{Op: "prune", Backend: Name, Err: err}
	}
	entries, _ := os.ReadDir(b.images.dir)
	for _, e := range entries {
		if e.IsDir() && backendkit.SnapshotTempGone(e.Name()) {
			names = append(names, filepath.Join(b.images.dir, e.Name())+" (a snapshot cut short)")
			if !dryRun {
				if err := removeTree(filepath.Join(b.images.dir, e.Name())); err != nil {
					return names, &backend.OpError{Op: "prune", Backend: Name, Err: err}
				}
			}
			continue
		}
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "snapshot-") || used[e.Name()] {
			continue
		}
		names = append(names, filepath.Join(b.images.dir, e.Name()))
		if !dryRun {
			if err := removeTree(filepath.Join(b.images.dir, e.Name())); err != nil {
				return names, &backend.OpError{Op: "prune", Backend: Name, Err: err}
			}
		}
	}
	vols, err := b.pruneVolumes(dryRun)
	names = append(names, vols...)
	if err != nil {
		return names, &backend.OpError{Op: "prune", Backend: Name, Err: err}
	}
	return names, nil
}
