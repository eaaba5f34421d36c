package session

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Session volumes in a checkpoint.
//
// Checkpoint saves each read-write session volume (shared, bash_tools:
// what the agent writes) as an uncompressed tar next to the manifest,
// read through a running member that mounts it: GetArchive where the
// sandbox is a backend.Archiver, else `tar -c` through Exec. Entries are
// named relative to the volume's root (the root itself is left out, so a
// restore keeps the new volume's own mode) and keep their modes, owners,
// symlinks and hard links. sandbox_scripts is mounted read-only and filled
// from the host at every launch, so it is not saved.
//
// A launch from the manifest checks every archive (its SHA-256 and each
// entry's name) before it makes anything, creates the volume without its
// usual seed (the archive already holds what the seed became), and
// extracts the archive through the first member that mounts the volume
// (PutArchive, else `tar -x` through Exec) once the members are created
// and before any of them is provisioned or the env file is written.

// ManifestVolume is one session volume saved by Checkpoint.
type ManifestVolume struct {
	// Target is where the members mounted it (/shared).
	Target string `json:"target"`
	// Archive is the tar file holding its contents, relative to the
	// manifest's folder (or absolute).
	Archive string `json:"archive"`
	// SHA256 is the archive's checksum, hex; a launch refuses an archive
	// that does not match.
	SHA256 string `json:"sha256"`
	// Size is the archive's size in bytes.
	Size int64 `json:"size"`
}

// sessionVolume is a session volume as Launch made it (or Resume found it).
type sessionVolume struct {
	role, name, target string
	readOnly           bool
	// filled: made with the manifest's archive in it (see
	// Launcher.fillVolumes), so restoreVolumes leaves it alone.
	filled bool
	// members mount it (sorted): the others mount target themselves.
	members []string
}

// volumeMembers returns the names of the members (sorted) that see the
// session's volume at target: all but those whose own Spec mounts target
// (call it before the session's volumes are added to the Specs).
func volumeMembers(ms []*member, target string) []string {
	var out []string
	for _, m := range ms {
		if !slices.ContainsFunc(m.spec.Volumes, func(v backend.Volume) bool { return v.Target == target }) {
			out = append(out, m.name)
		}
	}
	slices.Sort(out)
	return out
}

// archivePath resolves a ManifestVolume's archive against the manifest's
// folder.
func (m *Manifest) archivePath(v ManifestVolume) string {
	if filepath.IsAbs(v.Archive) || m.dir == "" {
		return v.Archive
	}
	return filepath.Join(m.dir, v.Archive)
}

// hasVolume reports whether the manifest restores the volume of role.
func (m *Manifest) hasVolume(role string) bool {
	if m == nil {
		return false
	}
	_, ok := m.Volumes[role]
	return ok
}

// volumeMember returns the member a volume is read or written through.
func (s *Session) volumeMember(v sessionVolume) (*Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range v.members {
		if m := s.members[name]; m != nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("session %s: volume %s (%s): no sandbox of the session mounts it", s.ID, v.role, v.target)
}

// stagedFile is an archive written under a temporary name, renamed to its
// final one only once the whole checkpoint succeeded.
type stagedFile struct{ tmp, final string }

// saveVolumes writes each read-write session volume to a temporary file
// in dir and records it in m; the caller renames them (commit) or removes
// them.
func (s *Session) saveVolumes(ctx context.Context, m *Manifest, dir, base string) ([]stagedFile, error) {
	var staged []stagedFile
	fail := func(err error) ([]stagedFile, error) {
		removeStaged(staged)
		return nil, err
	}
	for _, v := range s.volumes {
		if v.readOnly {
			continue
		}
		mem, err := s.volumeMember(v)
		if err != nil {
			return fail(err)
		}
		name := base + "." + strings.ReplaceAll(v.role, "_", "-") + ".tar"
		f, err := os.CreateTemp(dir, "."+name+".*.tmp")
		if err != nil {
			return fail(fmt.Errorf("session %s: volume %s: %w", s.ID, v.role, err))
		}
		staged = append(staged, stagedFile{tmp: f.Name(), final: filepath.Join(dir, name)})
		h := sha256.New()
		cw := &countWriter{w: io.MultiWriter(f, h)}
		tw := tar.NewWriter(cw)
		err = readVolume(ctx, mem.Sandbox, v.target, tw)
		if err == nil {
			err = tw.Close()
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail(fmt.Errorf("session %s: volume %s: reading %s through sandbox %q: %w", s.ID, v.role, v.target, mem.Name, err))
		}
		m.Volumes[v.role] = ManifestVolume{Target: v.target, Archive: name, SHA256: hex.EncodeToString(h.Sum(nil)), Size: cw.n}
	}
	return staged, nil
}

func removeStaged(staged []stagedFile) {
	for _, f := range staged {
		os.Remove(f.tmp)
	}
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

// readVolume writes the contents of the folder target in sb to tw, with
// entry names relative to target.
func readVolume(ctx context.Context, sb backend.Sandbox, target string, tw *tar.Writer) error {
	if ar, ok := backend.As[backend.Archiver](sb); ok {
		rc, err := ar.GetArchive(ctx, target)
		if err != nil {
			return err
		}
		defer rc.Close()
		// GetArchive names entries after target's base name.
		return copyEntries(tw, tar.NewReader(rc), path.Base(path.Clean(target)))
	}
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"tar", "-c", "-f", "-", "-C", target, "."}, Stdout: pw, Stderr: &stderr})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("tar -c exited with %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
		}
		pw.CloseWithError(cmpErr(err, io.EOF))
		done <- err
	}()
	err := copyEntries(tw, tar.NewReader(pr), ".")
	pr.CloseWithError(cmpErr(err, io.ErrClosedPipe)) // let tar end if we stopped reading
	if xerr := <-done; xerr != nil {
		// The command's failure explains a short stream; a bad entry
		// that stopped the reading is said too.
		return errors.Join(xerr, err)
	}
	return err
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// copyEntries copies every entry of tr below root to tw, renamed relative
// to root; root's own entry is left out.
func copyEntries(tw *tar.Writer, tr *tar.Reader, root string) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name, ok, err := relEntry(hdr.Name, root)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			if hdr.Linkname, _, err = relEntry(hdr.Linkname, root); err != nil {
				return err
			}
		}
		if hdr.Typeflag == tar.TypeDir {
			hdr.Name += "/"
		}
		keepXattrs(hdr)
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
	}
}

// relEntry turns an entry name of a stream rooted at root into one
// relative to root; ok is false for root itself.
func relEntry(name, root string) (string, bool, error) {
	clean := path.Clean(name)
	if root != "." {
		switch {
		case clean == root:
			return "", false, nil
		case strings.HasPrefix(clean, root+"/"):
			clean = strings.TrimPrefix(clean, root+"/")
		default:
			return "", false, fmt.Errorf("entry %q is outside %s", name, root)
		}
	}
	if clean == "." {
		return "", false, nil
	}
	if err := checkEntryName(clean); err != nil {
		return "", false, err
	}
	return clean, true, nil
}

// checkEntryName refuses names that would land outside the volume.
func checkEntryName(name string) error {
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("entry %q points outside the volume", name)
	}
	return nil
}

// keepXattrs drops the PAX records the reader already folded into the
// header's fields (the new name would conflict), keeping extended
// attributes.
func keepXattrs(hdr *tar.Header) {
	for k := range hdr.PAXRecords {
		if !strings.Contains(k, "xattr.") {
			delete(hdr.PAXRecords, k)
		}
	}
	hdr.Format = tar.FormatUnknown
}

// checkVolumeArchives checks, before anything is made, that every volume
// archive of the manifest is there, matches its checksum and holds only
// entries inside the volume.
func (m *Manifest) checkVolumeArchives() error {
	if m.volumesChecked {
		return nil // Restore checked them before it loaded the images
	}
	var errs []error
	for _, role := range slices.Sorted(maps.Keys(m.Volumes)) {
		v := m.Volumes[role]
		p := m.archivePath(v)
		if err := checkVolumeArchive(p, v); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint volume %s (%s): %s: %w", role, v.Target, p, err))
		}
	}
	return errors.Join(errs...)
}

func checkVolumeArchive(p string, v ManifestVolume) error {
	if v.Archive == "" {
		return fmt.Errorf("%w: the manifest names no archive", backend.ErrInvalidConfig)
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(f, h))
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: not a readable tar archive (after %d entries): %v", backend.ErrInvalidConfig, n, err)
		}
		n++
		if err := checkEntryName(path.Clean(hdr.Name)); err != nil {
			return fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err)
		}
		if hdr.Typeflag == tar.TypeLink {
			if err := checkEntryName(path.Clean(hdr.Linkname)); err != nil {
				return fmt.Errorf("%w: hard link %q: %v", backend.ErrInvalidConfig, hdr.Name, err)
			}
		}
	}
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != v.SHA256 {
		return fmt.Errorf("%w: SHA-256 %s, the manifest says %s (changed or damaged since the checkpoint)", backend.ErrInvalidConfig, got, v.SHA256)
	}
	return nil
}

// restoreVolumes extracts the manifest's archives into the session's new
// volumes, each through the first member that mounts it.
func (l *Launcher) restoreVolumes(ctx context.Context, s *Session) error {
	if l.Manifest == nil {
		return nil
	}
	for _, v := range s.volumes {
		mv, ok := l.Manifest.Volumes[v.role]
		if !ok || v.filled {
			continue
		}
		p := l.Manifest.archivePath(mv)
		mem, err := s.volumeMember(v)
		if err != nil {
			return err
		}
		if err := writeVolume(ctx, mem.Sandbox, v.target, p); err != nil {
			return &Error{Session: s.ID, Sandbox: mem.Name, Step: fmt.Sprintf("restore volume %s (%s) from %s", v.role, v.target, p), Err: err}
		}
	}
	return nil
}

// writeVolume extracts the tar file p into the folder target in sb.
func writeVolume(ctx context.Context, sb backend.Sandbox, target, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if ar, ok := backend.As[backend.Archiver](sb); ok {
		return ar.PutArchive(ctx, target, f)
	}
	var stderr bytes.Buffer
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"tar", "-x", "-p", "-f", "-", "-C", target}, Stdin: f, Stderr: &stderr})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("tar -x exited with %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// checkManifestVolumes refuses a manifest holding a volume the new
// session does not have: its data would be lost without a word.
func (l *Launcher) checkManifestVolumes(s *Session) error {
	if l.Manifest == nil {
		return nil
	}
	var missing []string
	for _, role := range slices.Sorted(maps.Keys(l.Manifest.Volumes)) {
		if !slices.ContainsFunc(s.volumes, func(v sessionVolume) bool { return v.role == role && !v.readOnly }) {
			missing = append(missing, fmt.Sprintf("%s (%s)", role, l.Manifest.Volumes[role].Target))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("session %s: the checkpoint holds the volume %s, which the %s backend's session does not have (launch it on the checkpoint's backend, %s): %w",
			s.ID, strings.Join(missing, ", "), s.backend.Name(), l.Manifest.Backend, errors.ErrUnsupported)
	}
	return nil
}
