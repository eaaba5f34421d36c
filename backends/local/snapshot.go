package local

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// Snapshots and forks.
//
// A local sandbox's files are its folder <state>/<id>/work (the default
// working directory, or a folder under it). A snapshot is that folder as
// a tar archive in <state>/snapshots (<key>.tar, and <hash of name>.json
// naming it); Spec.Image "snapshot:NAME" starts a sandbox with the
// archive unpacked into its folder. A fork is a sandbox of the same
// configuration whose folder starts as a copy of the parent's. A sandbox
// whose working directory is a host folder outside its own has no files
// of its own to save: Snapshot and Fork refuse it.

// srcSnapshot prefixes the image reference of a snapshot.
const srcSnapshot = backendkit.SnapshotPrefix

var (
	_ backend.Snapshotter     = (*Sandbox)(nil)
	_ backend.Forker          = (*Sandbox)(nil)
	_ backend.SnapshotManager = (*Backend)(nil)
	_ backend.CachePruner     = (*Backend)(nil)
)

func (b *Backend) snapshotDir() string { return filepath.Join(b.dir, "snapshots") }

// names holds the snapshots' name records, beside their archives
// (<key>.tar).
func (b *Backend) names() backendkit.SnapshotNames { return backendkit.SnapshotNames(b.snapshotDir()) }

// filesDir is the folder holding the sandbox's files (see above), or an
// error when its working directory is elsewhere.
func (s *Sandbox) filesDir(m *meta) (string, error) {
	work := filepath.Join(s.dir, "work")
	if rel, err := filepath.Rel(work, m.WorkDir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: the sandbox's working directory %s is a host folder outside the sandbox's own; the local backend saves and copies only a sandbox's own folder", errors.ErrUnsupported, m.WorkDir)
	}
	return work, nil
}

// Snapshot saves the sandbox's folder as an archive named req.Ref ("":
// <sandbox id>-<time>) and returns "snapshot:NAME", which Spec.Image takes.
// The sandbox's processes keep running meanwhile (the local backend
// cannot pause them). An existing snapshot of the same name is replaced.
func (s *Sandbox) Snapshot(ctx context.Context, req backend.SnapshotRequest) (backend.Snapshot, error) {
	snap, err := s.snapshot(req)
	if err != nil {
		return backend.Snapshot{}, s.opErr("snapshot", err)
	}
	return snap, nil
}

func (s *Sandbox) snapshot(req backend.SnapshotRequest) (backend.Snapshot, error) {
	if req.TTL < 0 {
		return backend.Snapshot{}, fmt.Errorf("%w: ttl must not be negative, got %s", backend.ErrInvalidConfig, req.TTL)
	}
	m, err := s.meta()
	if err != nil {
		return backend.Snapshot{}, err
	}
	work, err := s.filesDir(m)
	if err != nil {
		return backend.Snapshot{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	key, err := statedir.NewID()
	if err != nil {
		return backend.Snapshot{}, err
	}
	name := backendkit.SnapshotName(req.Ref)
	if name == "" {
		// The time, and part of the key: two snapshots of one
		// sandbox in one millisecond must not share a name.
		name = s.id + "-" + now.Format("20060102T150405.000") + "-" + key[:6]
	}
	dir := s.b.snapshotDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return backend.Snapshot{}, err
	}
	// The archive is written under a name naming this process and
	// renamed into place once whole: PruneCaches removes one a killed
	// Snapshot left at any age, without waiting out one being written.
	archive := filepath.Join(dir, key+".tar")
	size, err := writeArchive(archive, work)
	if err != nil {
		return backend.Snapshot{}, fmt.Errorf("archiving %s: %w", work, err)
	}
	rec := backendkit.NewSnapshotRecord(Name, s.id, m.Session, name, key, now, req)
	rec.Size = size
	old, _ := s.b.names().Read(name)
	if err := s.b.names().Write(rec); err != nil {
		os.Remove(archive)
		return backend.Snapshot{}, err
	}
	if old != nil {
		os.Remove(filepath.Join(dir, old.Key+".tar"))
	}
	return rec.Snapshot(), nil
}

// writeArchive writes the tree at dir to a tar file, first as a snapshot
// temporary beside it (backendkit.SnapshotTempPattern), renamed to file once
// complete, and returns its size. Regular files, folders and symlinks are
// kept with their modes and times (and owners, which only root can give
// back); other kinds are skipped. On failure nothing is left.
func writeArchive(file, dir string) (int64, error) {
	f, err := os.CreateTemp(filepath.Dir(file), backendkit.SnapshotTempPattern())
	if err != nil {
		return 0, err
	}
	tw := tar.NewWriter(f)
	err = tartree.Dir(tw, dir, tartree.Options{SkipSpecial: true, KeepOwner: true})
	if err == nil {
		err = tw.Close()
	}
	var size int64
	if err == nil {
		if fi, serr := f.Stat(); serr == nil {
			size = fi.Size()
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), file)
	}
	if err != nil {
		os.Remove(f.Name())
		return 0, err
	}
	return size, nil
}

// unpackArchive unpacks a snapshot's archive into dst, confined to it.
func unpackArchive(file, dst string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return tartree.Extract(f, dst, nil)
}

// restoreSnapshot unpacks snapshot ref (Spec.Image) into a new sandbox's
// folder.
func (b *Backend) restoreSnapshot(ref, work string) error {
	r, err := b.names().Read(backendkit.SnapshotName(ref))
	if err != nil {
		return err
	}
	if err := unpackArchive(filepath.Join(b.snapshotDir(), r.Key+".tar"), work); err != nil {
		return fmt.Errorf("image %q: unpacking: %w", ref, err)
	}
	return nil
}

// ListSnapshots lists the snapshots of this state folder that match filter.
func (b *Backend) ListSnapshots(ctx context.Context, filter backend.Filter) ([]backend.Snapshot, error) {
	return b.names().List(Name, filter)
}

// RemoveSnapshot removes a snapshot's name and archive. Sandboxes made
// from it keep their files (each has its own copy).
func (b *Backend) RemoveSnapshot(ctx context.Context, ref string) error {
	name := backendkit.SnapshotName(ref)
	r, err := b.names().Read(name)
	if errors.Is(err, backend.ErrNotFound) {
		return nil
	}
	if err == nil {
		err = b.names().Remove(name)
	}
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		err = os.Remove(filepath.Join(b.snapshotDir(), r.Key+".tar"))
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return &backend.OpError{Op: "remove snapshot", Backend: Name, Err: err}
	}
	return nil
}

// PruneCaches removes the snapshots whose TTL has run out, archives no
// name uses (left by a crash) and the hand-over marks of killed forks
// (statedir.PruneBatches); with dryRun it only names them. sbx gc calls
// it.
func (b *Backend) PruneCaches(ctx context.Context, dryRun bool) ([]string, error) {
	recs, err := b.names().All()
	if err != nil {
		return nil, &backend.OpError{Op: "prune", Backend: Name, Err: err}
	}
	names, err := statedir.PruneBatches(b.dir, dryRun)
	if err != nil {
		return names, &backend.OpError{Op: "prune", Backend: Name, Err: err}
	}
	known := map[string]bool{}
	now := time.Now()
	for _, r := range recs {
		known[r.Key+".tar"] = true
		if r.ExpiresAt.IsZero() || now.Before(r.ExpiresAt) {
			continue
		}
		names = append(names, "snapshot "+srcSnapshot+r.Name)
		if !dryRun {
			if err := b.RemoveSnapshot(ctx, r.Name); err != nil {
				return names, err
			}
		}
	}
	entries, _ := os.ReadDir(b.snapshotDir())
	for _, e := range entries {
		// A temporary whose maker is gone goes at any age. An archive is
		// renamed into place whole, just before its record is written:
		// one without a record younger than statedir.HalfGrace may be
		// waiting for its record.
		fi, err := e.Info()
		cutShort := backendkit.SnapshotTempGone(e.Name())
		orphan := strings.HasSuffix(e.Name(), ".tar") && !known[e.Name()] && err == nil && now.Sub(fi.ModTime()) >= statedir.HalfGrace
		if !cutShort && !orphan {
			continue
		}
		p := filepath.Join(b.snapshotDir(), e.Name())
		if cutShort {
			names = append(names, p+" (a snapshot cut short)")
		} else {
			names = append(names, p)
		}
		if !dryRun {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return names, &backend.OpError{Op: "prune", Backend: Name, Err: err}
			}
		}
	}
	return names, nil
}

// Fork makes req.N sandboxes of this one's configuration (environment,
// user, working directory, command) whose folders start as copies of
// this one's. The local backend cannot pause the parent: a process
// writing meanwhile may leave a fork a file half written. Processes are
// not carried over; the command, if any, starts afresh in each fork.
//
// Until Fork returns them, the forks are this process's: each record
// names it as the creator, complete forks too, and the marks are cleared
// together, in one step (statedir.HandOver), just before Fork returns. A
// Fork killed before that step leaves forks that List shows as being
// created by a process that is gone, which sbx gc removes; one killed
// after it leaves complete forks, which sbx ls shows and sbx gc keeps.
func (s *Sandbox) Fork(ctx context.Context, req backend.ForkRequest) ([]backend.Sandbox, error) {
	batch, err := statedir.NewBatch()
	if err != nil {
		return nil, s.opErr("fork", err)
	}
	forks, err := s.makeForks(ctx, req, batch)
	if err == nil {
		ids := make([]string, len(forks))
		for i, f := range forks {
			ids[i] = f.ID()
		}
		if err = req.TellMade(ids); err == nil {
			err = s.b.handOver(forks, batch)
		}
		if err != nil {
			dropForks(ctx, forks)
		}
	}
	if err != nil {
		return nil, s.opErr("fork", err)
	}
	out := make([]backend.Sandbox, len(forks))
	for i, f := range forks {
		out[i] = f
	}
	return out, nil
}

// handOver clears the creator of forks: from then on they are the
// caller's (see Fork), all in one step.
func (b *Backend) handOver(forks []*Sandbox, batch string) error {
	ids := make([]string, len(forks))
	for i, f := range forks {
		ids[i] = f.id
	}
	return statedir.HandOver[meta](b.dir, batch, ids)
}

// dropForks destroys forks after a failure.
func dropForks(ctx context.Context, forks []*Sandbox) {
	for _, f := range forks {
		f.Destroy(context.WithoutCancel(ctx))
	}
}

// makeForks makes the forks req asks for, each still recorded as being
// created by this process; on failure it removes those it made.
func (s *Sandbox) makeForks(ctx context.Context, req backend.ForkRequest, batch string) (_ []*Sandbox, err error) {
	if req.N < 1 {
		return nil, fmt.Errorf("%w: fork: n must be at least 1, got %d", backend.ErrInvalidConfig, req.N)
	}
	m, err := s.meta()
	if err != nil {
		return nil, err
	}
	work, err := s.filesDir(m)
	if err != nil {
		return nil, err
	}
	wd, _ := filepath.Rel(work, m.WorkDir)
	if wd == "." {
		wd = ""
	}
	spec := backend.Spec{
		Name: cmp.Or(req.Name, m.Name), Session: cmp.Or(req.Session, m.Session), Owner: cmp.Or(req.Owner, m.Owner),
		Env: m.Env, User: m.User, WorkingDir: wd, TTL: req.TTL, Labels: map[string]string{},
	}
	if spec.TTL == 0 && !m.ExpiresAt.IsZero() {
		spec.TTL = m.ExpiresAt.Sub(m.CreatedAt)
	}
	for k, v := range m.Labels {
		if !strings.HasPrefix(k, backend.LabelPrefix) {
			spec.Labels[k] = v
		}
	}
	maps.Copy(spec.Labels, req.Labels)
	spec.Labels[backend.LabelForkOf] = s.id
	var forks []*Sandbox
	defer func() {
		if err != nil {
			dropForks(ctx, forks)
		}
	}()
	for range req.N {
		f, err := s.b.create(ctx, spec, batch)
		if err != nil {
			return nil, err
		}
		forks = append(forks, f)
		if err := copyFolder(work, filepath.Join(f.dir, "work")); err != nil {
			return nil, fmt.Errorf("copying the sandbox's folder: %w", err)
		}
		if m.Command != nil {
			if err := f.startMainOf(m.Command); err != nil {
				return nil, err
			}
		}
	}
	return forks, nil
}

// startMainOf starts the command of a fork made without one.
func (s *Sandbox) startMainOf(argv []string) error {
	m, err := s.meta()
	if err != nil {
		return err
	}
	pid, start, err := s.startMain(m, argv)
	if err != nil {
		return fmt.Errorf("command %q: %w", argv, err)
	}
	return statedir.Update(s.b.dir, s.id, func(r *meta) error {
		r.Command, r.MainPID, r.MainStart = argv, pid, start
		return nil
	})
}

// copyFolder copies the tree at src into the folder dst (which may
// exist): folders, regular files (copy_file_range) and symlinks, with
// modes, times and (as root) owners.
func copyFolder(src, dst string) error {
	var dirs []string
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch fi.Mode().Type() {
		case fs.ModeDir:
			if err := os.MkdirAll(to, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, p)
		case fs.ModeSymlink:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, to); err != nil {
				return err
			}
		case 0:
			if err := copyFile(p, to); err != nil {
				return err
			}
		default:
			return nil
		}
		return copyAttrs(to, fi)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children first
		fi, err := os.Lstat(dirs[i])
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, dirs[i])
		if err := os.Chtimes(filepath.Join(dst, rel), fi.ModTime(), fi.ModTime()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func copyAttrs(dst string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode().Type() == fs.ModeSymlink {
		return nil
	}
	if err := os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}
