package lite

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// errMergeUnsupported: a layer holds what mergeLayer cannot lay over a
// mounted root file system the way overlayfs shows it (a folder renamed
// under redirect_dir, a metadata-only copy, a mount point replaced or
// deleted). The caller copies the layer instead.
var errMergeUnsupported = errors.New("the layer cannot be merged into a mounted root file system")

// mergeLayer lays the overlay upper layer at upper over the mounted
// overlay root file system at merged, writing through the mount, so that
// merged then shows what the overlay of upper over the same lower layers
// shows: upper's files replace merged's, its whiteouts delete, its opaque
// folders hide what merged held in them (made anew, so that they are
// opaque in merged's layer too, but the folders the container's first
// process is in, workdir and those above it, which are emptied instead). It is how a fork reaches a
// container made ahead (see forkstandby.go), whose root file system is
// already mounted: writing into the layers beneath a mounted overlay is
// undefined, writing through it is not.
//
// mounts are the mount points of the container's mount namespace,
// relative to its root ("etc/hosts"): what upper holds at one is hidden
// by the mount, in the parent as in the fork, and left alone; a change
// that would remove or replace one, or a folder above one, fails with
// errMergeUnsupported, as removing a mount point from the host would
// unmount it in the container.
//
// Like copyTree, it works on open folders and never follows a symlink in
// upper; in merged, every folder it goes through is one it has made a
// real folder first, and the container's processes wait (the container
// is created, not started).
func mergeLayer(upper, merged string, mounts []string, workdir string) error {
	c := newTreeCopier(merged, cloneFiles, copyWorkers)
	c.merge = newMergeRules(mounts, workdir)
	return c.copy(upper)
}

// mergeRules are what a merge leaves alone: mount points and the folders
// above them, and the working folder and those above it (kept, not made
// anew).
type mergeRules struct {
	mounts, above, cwd map[string]bool
}

func newMergeRules(mounts []string, workdir string) *mergeRules {
	r := &mergeRules{mounts: map[string]bool{}, above: map[string]bool{}, cwd: map[string]bool{}}
	for _, m := range mounts {
		m = relPath(m)
		if m == "" {
			continue
		}
		r.mounts[m] = true
		for d := path.Dir(m); d != "."; d = path.Dir(d) {
			r.above[d] = true
		}
	}
	for d := relPath(workdir); d != "" && d != "."; d = path.Dir(d) {
		r.cwd[d] = true
	}
	return r
}

// relPath is the absolute path p relative to the root ("" for the root).
func relPath(p string) string { return strings.Trim(path.Clean("/"+p), "/") }

// entry readies the merge of the layer's entry name (at rel, described by
// st) into the folder open as dstFD, under root: done when nothing more is
// to be made (a mount point's, a whiteout's); else a non-folder's place is
// empty (folders: see dir).
func (r *mergeRules) entry(root string, dstFD int, rel, name string, st *unix.Stat_t) (done bool, err error) {
	if r.mounts[rel] {
		return true, nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0 { // a whiteout
		return true, r.remove(root, dstFD, rel, name)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return false, nil
	}
	return false, r.remove(root, dstFD, rel, name)
}

// dir makes name, in the folder open as dstFD, a folder for the layer's
// folder open as srcFD (at rel): the existing folder, emptied if the
// layer's is opaque, or a new one in place of what was there.
func (r *mergeRules) dir(root string, srcFD, dstFD int, rel, name string) error {
	opaque := false
	for _, x := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if v, err := getXattrFD(srcFD, x); err == nil && string(v) == "y" {
			opaque = true
		}
	}
	var st unix.Stat_t
	err := unix.Fstatat(dstFD, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		if !opaque {
			return nil
		}
		if r.above[rel] || r.cwd[rel] {
			return r.empty(root, rel)
		}
		fallthrough
	case err == nil:
		if err := r.remove(root, dstFD, rel, name); err != nil {
			return err
		}
	case err != unix.ENOENT:
		return &os.PathError{Op: "lstat", Path: filepath.Join(root, rel), Err: err}
	}
	if err := unix.Mkdirat(dstFD, name, 0o700); err != nil {
		return &os.PathError{Op: "mkdir", Path: filepath.Join(root, rel), Err: err}
	}
	return nil
}

// remove removes what merged holds at rel (name in the folder open as
// dstFD), if anything.
func (r *mergeRules) remove(root string, dstFD int, rel, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dstFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == unix.ENOENT {
		return nil
	} else if err != nil {
		return &os.PathError{Op: "lstat", Path: filepath.Join(root, rel), Err: err}
	}
	if r.mounts[rel] || r.above[rel] {
		return fmt.Errorf("%w: it removes or replaces /%s", errMergeUnsupported, rel)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dstFD, name, 0); err != nil {
			return &os.PathError{Op: "unlink", Path: filepath.Join(root, rel), Err: err}
		}
		return nil
	}
	// Every folder on the way is a real one (see mergeLayer), and none
	// below holds a mount point (r.above).
	return os.RemoveAll(filepath.Join(root, rel))
}

// empty removes what the folder at rel holds.
func (r *mergeRules) empty(root, rel string) error {
	p := filepath.Join(root, rel)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	names, err := readNames(fd)
	if err != nil {
		return &os.PathError{Op: "read", Path: p, Err: err}
	}
	for _, n := range names {
		if err := r.remove(root, fd, path.Join(rel, n), n); err != nil {
			return err
		}
	}
	return nil
}

// mergeXattrs gives the file or folder open as out the extended attributes
// of the layer's open as in, but overlayfs's own, which the overlay keeps
// for itself (its opaque mark is followed by mergeRules.dir); one that
// makes the layer's entry other than what it holds (a redirect, a
// metadata-only copy) fails with errMergeUnsupported. A folder that was
// there before loses attributes the layer's lacks.
func mergeXattrs(in, out int, dir bool) error {
	names, err := listXattrsFD(in)
	if err != nil {
		return err
	}
	var kept []string
	for _, name := range names {
		if isOverlayXattr(name) {
			if strings.HasSuffix(name, ".redirect") || strings.HasSuffix(name, ".metacopy") {
				return fmt.Errorf("%w: %s", errMergeUnsupported, name)
			}
			continue
		}
		val, err := getXattrFD(in, name)
		if err != nil {
			return err
		}
		if unix.Fsetxattr(out, name, val, 0) == nil {
			kept = append(kept, name)
		}
	}
	if !dir {
		return nil
	}
	had, err := listXattrsFD(out)
	if err != nil {
		return err
	}
	for _, name := range had {
		if !slices.Contains(kept, name) && !isOverlayXattr(name) {
			unix.Fremovexattr(out, name)
		}
	}
	return nil
}
