package lite

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// How copyTree copies regular files.
type fileCopy int

const (
	// cloneFiles gives each copy data of its own: a reflink (FICLONE)
	// where the file system shares blocks copy-on-write, else a real
	// copy (copy_file_range). For writable layers: a fork's files never
	// share an inode with its parent's.
	cloneFiles fileCopy = iota
	// linkFiles hard-links each file to its source (a copy where the
	// link fails). Only for trees nothing ever writes in place: an
	// overlay's lower layers.
	linkFiles
)

// treeCopier copies a folder tree with what overlayfs keeps in it: modes
// (setuid included), owners, modification times, extended attributes
// (overlayfs's opaque marks among them), hard links within the tree,
// symlinks, device nodes (overlayfs's whiteouts are 0/0 character
// devices) and FIFOs. Sockets are skipped. Reads go through an os.Root
// of the source, so a symlink in it cannot lead a read outside it.
type treeCopier struct {
	src   *os.Root
	srcAt string // the source's host path (for links)
	dst   string
	mode  fileCopy
	// links maps a source inode with several names to its first copy.
	links map[uint64]string
	// noClone: a reflink failed once; copy the rest.
	noClone bool
	root    bool // this process may chown
}

// copyTree copies the tree at src to dst, which must not exist.
func copyTree(src, dst string, mode fileCopy) error {
	r, err := os.OpenRoot(src)
	if err != nil {
		return err
	}
	defer r.Close()
	c := &treeCopier{src: r, srcAt: src, dst: dst, mode: mode, links: map[uint64]string{}, root: os.Geteuid() == 0}
	fi, err := r.Lstat(".")
	if err != nil {
		return err
	}
	return c.dir(".", fi)
}

// entry copies the entry rel of the source, described by fi.
func (c *treeCopier) entry(rel string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat data", rel)
	}
	dst := filepath.Join(c.dst, rel)
	switch fi.Mode().Type() {
	case fs.ModeDir:
		return c.dir(rel, fi)
	case 0:
		linked, err := c.file(rel, dst, st)
		if err != nil || linked {
			return err
		}
	case fs.ModeSymlink:
		target, err := c.src.Readlink(rel)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
	case fs.ModeDevice | fs.ModeCharDevice, fs.ModeDevice, fs.ModeNamedPipe:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("copying %s: %w", rel, err)
		}
	default:
		return nil // a socket: nothing to copy
	}
	return c.attrs(dst, fi, st)
}

// dir copies the folder rel and, first, what it holds.
func (c *treeCopier) dir(rel string, fi fs.FileInfo) error {
	dst := filepath.Join(c.dst, rel)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	f, err := c.src.Open(rel)
	if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	if err == nil {
		err = copyXattrs(f, dst)
	}
	f.Close()
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int {
		if a.Name() < b.Name() {
			return -1
		}
		return 1
	})
	for _, e := range entries {
		child := filepath.Join(rel, e.Name())
		cfi, err := c.src.Lstat(child)
		if err != nil {
			return err
		}
		if err := c.entry(child, cfi); err != nil {
			return err
		}
	}
	// Last, so that making its entries does not change its time.
	return c.attrs(dst, fi, fi.Sys().(*syscall.Stat_t))
}

// file copies the regular file rel to dst; linked reports a hard link to
// an earlier copy (or, linkFiles, to the source), which needs no attrs.
func (c *treeCopier) file(rel, dst string, st *syscall.Stat_t) (linked bool, err error) {
	if st.Nlink > 1 {
		if first, ok := c.links[st.Ino]; ok {
			return true, os.Link(first, dst)
		}
		c.links[st.Ino] = dst
	}
	if c.mode == linkFiles {
		if err := os.Link(filepath.Join(c.srcAt, rel), dst); err == nil {
			return true, nil
		}
	}
	in, err := c.src.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	err = c.data(out, in)
	if err == nil {
		err = copyXattrs(in, dst)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("copying %s: %w", rel, err)
	}
	return false, nil
}

// data fills out with in's bytes: a reflink where the file system can,
// else a copy (io.Copy uses copy_file_range between files).
func (c *treeCopier) data(out, in *os.File) error {
	if !c.noClone {
		err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
		if err == nil {
			return nil
		}
		c.noClone = true
	}
	_, err := io.Copy(out, in)
	return err
}

// attrs gives dst the owner, mode and times of the source entry.
func (c *treeCopier) attrs(dst string, fi fs.FileInfo, st *syscall.Stat_t) error {
	if c.root {
		// Before chmod: chown clears setuid and setgid bits.
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode().Type() != fs.ModeSymlink {
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec}, {Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec}}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// copyXattrs copies the extended attributes of the open file f to dst.
// overlayfs's own (trusted.overlay.*, user.overlay.* in a user
// namespace) must arrive, or a fork would see deleted folders' old
// contents again; others that this process may not set are skipped.
func copyXattrs(f *os.File, dst string) error {
	names, err := listXattrs(f)
	if err != nil {
		return err
	}
	for _, name := range names {
		val, err := getXattr(f, name)
		if err != nil {
			return err
		}
		if err := unix.Lsetxattr(dst, name, val, 0); err != nil {
			if isOverlayXattr(name) {
				return fmt.Errorf("setting %s: %w", name, err)
			}
			continue
		}
	}
	return nil
}

func isOverlayXattr(name string) bool {
	return strings.HasPrefix(name, "trusted.overlay.") || strings.HasPrefix(name, "user.overlay.")
}

// listXattrs lists the names of f's extended attributes.
func listXattrs(f *os.File) ([]string, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Flistxattr(int(f.Fd()), buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for start := 0; start < n; {
			end := start
			for end < n && buf[end] != 0 {
				end++
			}
			if end > start {
				names = append(names, string(buf[start:end]))
			}
			start = end + 1
		}
		return names, nil
	}
}

// getXattr reads one extended attribute of f.
func getXattr(f *os.File, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Fgetxattr(int(f.Fd()), name, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 2*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
