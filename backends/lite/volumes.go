package lite

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// Named volumes (backend.VolumeManager).
//
// A volume is a folder of the state dir that sandboxes bind-mount, so
// every sandbox mounting it sees another's writes at once:
//
//	<state>/volumes/<name>/volume.json  its record: name, session, labels, created, expires
//	<state>/volumes/<name>/data/        what sandboxes mount
//	<state>/volumes/.new-*/             a volume being made
//	<state>/volumes/.old-*/             a volume being removed
//
// CreateVolume makes the volume under a .new- name, fills data/ and
// writes the record there, and renames the folder to its name as the last
// step, so a volume listed under its name is complete. RemoveVolume
// renames it to an .old- name first and removes it from there. Each holds
// an flock on the folder while it works, so PruneCaches (sbx gc) removes
// the .new- and .old- folders that a killed process left, and only those.
// The volumes folder itself goes when the last volume does, so a state
// dir without volumes shows none of this.
//
// Create mounts a Spec's VolumeNamed entries as it mounts bind volumes,
// the volume's data/ in place of a host path; the sandbox's record keeps
// the resolved mount (Type VolumeNamed, Source the data/ folder), so the
// host-side file access, Reset and Fork treat it as a bind volume: a
// fork mounts the same volume, and a snapshot (the overlay's upper layer)
// holds only the empty mount point. Create holds a shared flock on each
// volume it mounts until the sandbox is made; RemoveVolume takes it
// exclusively and refuses a volume that a sandbox's record names (destroy
// the sandbox first, as Docker wants).
const (
	volumesDir      = "volumes"
	volumeRecFile   = "volume.json"
	volumeDataDir   = "data"
	newVolumePrefix = ".new-"
	oldVolumePrefix = ".old-"
	// maxVolumeName leaves room in a 255-byte file name for the .old-
	// prefix and random suffix.
	maxVolumeName = 128
	// newVolumeGrace is how old an unlocked .new- folder must be before
	// PruneCaches takes it as abandoned: its maker locks it just after
	// making it.
	newVolumeGrace = statedir.HalfGrace
)

// volumeNameRE is Docker's rule for volume names (config/volumes.go uses
// it too); a name that passes it is one path element that is neither "."
// nor ".." nor a hidden .new- or .old- folder.
var volumeNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`) })

var notVolumeNameChar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-zA-Z0-9_.-]+`) })

var _ backend.VolumeManager = (*Backend)(nil)

// volumeRecord is what a volume's volume.json holds.
type volumeRecord struct {
	Name      string            `json:"name"`
	Session   string            `json:"session,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
}

// info is the record as ListVolumes reports it: its labels with the
// backend's own (backend, session, expiry) added.
func (r *volumeRecord) info() backend.VolumeInfo {
	labels := maps.Clone(r.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[backend.LabelBackend] = Name
	if r.Session != "" {
		labels[backend.LabelSession] = r.Session
	}
	if !r.ExpiresAt.IsZero() {
		labels[backend.LabelExpiresAt] = r.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return backend.VolumeInfo{Name: r.Name, Session: r.Session, Labels: labels, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}

func (b *Backend) volumesDir() string           { return filepath.Join(b.dir, volumesDir) }
func (b *Backend) volumeDir(name string) string { return filepath.Join(b.dir, volumesDir, name) }

// checkVolumeName refuses a name that is not one safe path element.
func checkVolumeName(name string) error {
	if len(name) > maxVolumeName || !volumeNameRE().MatchString(name) {
		return backend.InvalidConfigf("volume name %q: want letters, digits, '_', '.' and '-', starting with a letter or digit, at most %d bytes", name, maxVolumeName)
	}
	return nil
}

// CreateVolume makes a volume, filled from spec.FromPath when set (a host
// folder, or a .tar.gz, .tgz or .tar file): contents keep their modes; a
// folder's entries belong to root in the sandbox, an archive's to the
// owners it names (rootless: all to the backend's user, who is root in the
// sandbox). Device nodes and FIFOs are left out. spec.Name "" picks
// sbx-<session>-vol-<random>; a name that exists already gives an error
// wrapping backend.ErrAlreadyExists. If filling fails nothing is left.
func (b *Backend) CreateVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	name, err := b.createVolume(ctx, spec)
	if err != nil {
		return "", &backend.OpError{Op: "create volume", Backend: Name, Err: err}
	}
	b.log.Debug("created volume", "volume", name, "from", spec.FromPath)
	return name, nil
}

func (b *Backend) createVolume(ctx context.Context, spec backend.VolumeSpec) (string, error) {
	name, err := pickVolumeName(spec)
	if err != nil {
		return "", err
	}
	var src func() (io.ReadCloser, error)
	if spec.FromPath != "" {
		if src, err = tartree.Source(spec.FromPath, tartree.Options{}, true); err != nil {
			return "", err
		}
	}
	exists := func() error { return fmt.Errorf("%w: volume %s exists already", backend.ErrAlreadyExists, name) }
	final := b.volumeDir(name)
	if _, err := os.Lstat(final); err == nil {
		return "", exists()
	}
	tmp, err := b.makeVolumeTemp()
	if err != nil {
		return "", err
	}
	lock, err := lockDir(tmp, syscall.LOCK_EX)
	if err != nil {
		removeTree(tmp)
		return "", err
	}
	defer lock.Close()
	done := false
	defer func() {
		if !done {
			removeTree(tmp)
		}
	}()
	// data/ belongs to this process's user: root, or in a rootless
	// sandbox the user that is root there.
	data := filepath.Join(tmp, volumeDataDir)
	if err := os.Mkdir(data, 0o755); err != nil {
		return "", err
	}
	if err := os.Chmod(data, 0o755); err != nil { // umask
		return "", err
	}
	if src != nil {
		if err := fillVolume(ctx, data, src); err != nil {
			return "", fmt.Errorf("filling volume %s from %s: %w", name, spec.FromPath, err)
		}
	}
	rec := volumeRecord{Name: name, Session: spec.Session, Labels: maps.Clone(spec.Labels),
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if spec.TTL > 0 {
		rec.ExpiresAt = rec.CreatedAt.Add(spec.TTL)
	}
	js, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, volumeRecFile), js, 0o600); err != nil {
		return "", err
	}
	switch err := renameNoReplace(tmp, final); {
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return "", exists()
	case err != nil:
		return "", err
	}
	done = true
	return name, nil
}

// pickVolumeName checks spec.Name, or when it is "" picks
// sbx-<session>-vol-<random> (as native names its volumes).
func pickVolumeName(spec backend.VolumeSpec) (string, error) {
	if spec.Name != "" {
		return spec.Name, checkVolumeName(spec.Name)
	}
	id, err := statedir.NewID()
	if err != nil {
		return "", err
	}
	if s := strings.Trim(notVolumeNameChar().ReplaceAllString(spec.Session, "-"), "-."); s != "" {
		return "sbx-" + s[:min(len(s), 64)] + "-vol-" + id, nil
	}
	return "sbx-vol-" + id, nil
}

// makeVolumeTemp makes a new .new- folder, and the volumes folder first
// when there is none. RemoveVolume removes the volumes folder when it
// leaves it empty, which can happen between the two: then try again.
func (b *Backend) makeVolumeTemp() (string, error) {
	for try := 0; ; try++ {
		if err := os.MkdirAll(b.volumesDir(), 0o711); err != nil {
			return "", err
		}
		tmp, err := os.MkdirTemp(b.volumesDir(), newVolumePrefix)
		if err == nil || try == 5 || !errors.Is(err, fs.ErrNotExist) {
			return tmp, err
		}
	}
}

// removeVolumesDir removes the volumes folder if it is empty, so that a
// state dir without volumes holds no trace of them.
func (b *Backend) removeVolumesDir() { os.Remove(b.volumesDir()) }

// renameNoReplace renames folder from to to, failing with EEXIST when to
// exists (renameat2's RENAME_NOREPLACE; where the file system lacks it, a
// plain rename, which fails on a non-empty folder).
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
		return os.Rename(from, to)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// fillVolume extracts src's tar stream into the folder data, confined to
// it (os.Root). Folders are made writable while they fill and get their
// own modes at the end, so a read-only folder of the source does not stop
// a rootless backend, which has no CAP_DAC_OVERRIDE, from filling it.
func fillVolume(ctx context.Context, data string, src func() (io.ReadCloser, error)) error {
	rc, err := src()
	if err != nil {
		return err
	}
	defer rc.Close()
	root, err := os.OpenRoot(data)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var dirs []dirMode
	tr := tar.NewReader(rc)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue // the root: data/ keeps its own mode and owner
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirMode{name, tartree.Mode(hdr)})
			h := *hdr
			h.Mode |= 0o700
			hdr = &h
		}
		if err := tartree.ExtractEntry(root, hdr, tr, nil); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// RemoveVolume removes a volume CreateVolume made; one that is gone is
// not an error. A volume that a sandbox mounts (any sandbox with a record,
// running or not) is refused: destroy the sandbox first.
func (b *Backend) RemoveVolume(ctx context.Context, name string) error {
	if err := b.removeVolume(name); err != nil {
		return &backend.OpError{Op: "remove volume", Backend: Name, Err: err}
	}
	return nil
}

func (b *Backend) removeVolume(name string) error {
	if err := checkVolumeName(name); err != nil {
		return err
	}
	lock, err := b.lockVolume(name, syscall.LOCK_EX)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// Held until the folder is gone: PruneCaches leaves a locked .old-
	// folder alone.
	defer lock.Close()
	users, err := b.volumeUsers(name)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("volume %s is in use by sandbox %s (destroy it first)", name, strings.Join(users, ", "))
	}
	id, err := statedir.NewID()
	if err != nil {
		return err
	}
	old := filepath.Join(b.volumesDir(), oldVolumePrefix+name+"-"+id)
	if err := os.Rename(b.volumeDir(name), old); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if err := removeTree(old); err != nil {
		return fmt.Errorf("volume %s is removed from the list; removing its files failed (sbx gc retries): %w", name, err)
	}
	b.removeVolumesDir()
	b.log.Debug("removed volume", "volume", name)
	return nil
}

// volumeUsers returns the IDs of the sandboxes whose records mount volume
// name.
func (b *Backend) volumeUsers(name string) ([]string, error) {
	ids, err := statedir.IDs(b.dir)
	if err != nil {
		return nil, err
	}
	var users []string
	for _, id := range ids {
		m, err := readMeta(filepath.Join(b.dir, id))
		if err != nil {
			// No record: half made (before it names a volume) or half
			// removed (its container gone). A damaged one is skipped, as
			// List skips it.
			continue
		}
		if slices.ContainsFunc(m.Volumes, func(v backend.Volume) bool { return mountsVolume(v, name) }) {
			users = append(users, id)
		}
	}
	return users, nil
}

// mountsVolume reports whether v, a mount of a sandbox's record, is
// volume name's (its Source is <state>/volumes/<name>/data).
func mountsVolume(v backend.Volume, name string) bool {
	return v.Type == backend.VolumeNamed && filepath.Base(v.Source) == volumeDataDir &&
		filepath.Base(filepath.Dir(v.Source)) == name
}

// ListVolumes lists the volumes CreateVolume made that match filter's
// session and labels (its Name is ignored), sorted by name.
func (b *Backend) ListVolumes(ctx context.Context, filter backend.Filter) ([]backend.VolumeInfo, error) {
	entries, err := os.ReadDir(b.volumesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, &backend.OpError{Op: "list volumes", Backend: Name, Err: err}
	}
	filter.Name = ""
	var out []backend.VolumeInfo
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		rec, err := readVolumeRecord(b.volumeDir(e.Name()))
		if err != nil {
			continue // removed meanwhile, or not ours
		}
		info := rec.info()
		if filter.Match(backend.Info{Session: info.Session, Labels: info.Labels}) {
			out = append(out, info)
		}
	}
	return out, nil
}

func readVolumeRecord(dir string) (*volumeRecord, error) {
	data, err := os.ReadFile(filepath.Join(dir, volumeRecFile))
	if err != nil {
		return nil, err
	}
	var rec volumeRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, err
	}
	if rec.Name != filepath.Base(dir) {
		return nil, fmt.Errorf("%s: the record names volume %q", dir, rec.Name)
	}
	return &rec, nil
}

// lockDir opens folder dir and takes an flock on it (how: LOCK_SH or
// LOCK_EX, with LOCK_NB to fail rather than wait). Closing the file
// releases it.
func lockDir(dir string, how int) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return f, nil
}

// lockVolume locks volume name's folder (see lockDir). A volume that does
// not exist, or was renamed for removal while the lock was awaited, is an
// error wrapping fs.ErrNotExist.
func (b *Backend) lockVolume(name string, how int) (*os.File, error) {
	dir := b.volumeDir(name)
	f, err := lockDir(dir, how)
	if err != nil {
		return nil, err
	}
	held, err := f.Stat()
	if err == nil {
		var now fs.FileInfo
		if now, err = os.Stat(dir); err == nil && !os.SameFile(held, now) {
			err = &fs.PathError{Op: "lock", Path: dir, Err: fs.ErrNotExist}
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// holdVolumes resolves the named volumes of a Spec's mounts to their
// data/ folders (bind mounts are returned as they are) and holds a shared
// lock on each, which RemoveVolume waits for, until release is called:
// Create calls it before the sandbox's record names the volumes.
func (b *Backend) holdVolumes(ctx context.Context, vols []backend.Volume) (resolved []backend.Volume, release func(), err error) {
	var locks []*os.File
	release = func() {
		for _, l := range locks {
			l.Close()
		}
	}
	resolved = slices.Clone(vols)
	for i, v := range resolved {
		if v.Type != backend.VolumeNamed {
			continue
		}
		if err := checkVolumeName(v.Source); err != nil {
			release()
			return nil, nil, fmt.Errorf("volume %q: %w", v.Source+":"+v.Target, err)
		}
		l, err := b.lockVolume(v.Source, syscall.LOCK_SH)
		if errors.Is(err, fs.ErrNotExist) {
			// As Docker does, a volume named and not made yet is made
			// (with no session: it stays until RemoveVolume, a cache
			// shared across sessions).
			if _, cerr := b.CreateVolume(ctx, backend.VolumeSpec{Name: v.Source}); cerr != nil && !errors.Is(cerr, backend.ErrAlreadyExists) {
				release()
				return nil, nil, fmt.Errorf("volume %q: making it: %w", v.Source+":"+v.Target, cerr)
			}
			l, err = b.lockVolume(v.Source, syscall.LOCK_SH)
		}
		if err != nil {
			release()
			return nil, nil, err
		}
		locks = append(locks, l)
		resolved[i].Source = filepath.Join(b.volumeDir(v.Source), volumeDataDir)
	}
	return resolved, release, nil
}

// checkNamedVolume checks a Spec's VolumeNamed mount: a valid name (a
// volume not made yet is made by Create, as Docker does).
func (b *Backend) checkNamedVolume(v backend.Volume) error {
	if err := checkVolumeName(v.Source); err != nil {
		return fmt.Errorf("volume %q: %w", v.Source+":"+v.Target, err)
	}
	return nil
}

// pruneVolumes removes the .new- and .old- folders that no process holds
// (a CreateVolume or RemoveVolume that was killed), and names them; with
// dryRun it only names them. PruneCaches calls it.
func (b *Backend) pruneVolumes(dryRun bool) ([]string, error) {
	entries, err := os.ReadDir(b.volumesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		isNew := strings.HasPrefix(e.Name(), newVolumePrefix)
		if !e.IsDir() || (!isNew && !strings.HasPrefix(e.Name(), oldVolumePrefix)) {
			continue
		}
		if fi, err := e.Info(); err != nil || (isNew && time.Since(fi.ModTime()) < newVolumeGrace) {
			continue
		}
		p := filepath.Join(b.volumesDir(), e.Name())
		lock, err := lockDir(p, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			continue // in use, or gone
		}
		names = append(names, p)
		if !dryRun {
			err = removeTree(p)
		}
		lock.Close()
		if err != nil {
			return names, err
		}
	}
	if !dryRun {
		b.removeVolumesDir()
	}
	return names, nil
}
