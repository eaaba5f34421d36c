package lite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

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
// (setuid included), owners, modification times, extended attributes of
// files and folders (overlayfs's opaque marks and file capabilities among
// them), hard links within the tree, symlinks, device nodes (overlayfs's
// whiteouts are 0/0 character devices) and FIFOs. Sockets are skipped.
//
// The walk works on open folders, one name at a time (the *at system
// calls, never following a symlink), so that a symlink in the source
// cannot lead it outside, as with os.Root, without resolving each path
// from the top again. It makes folders, symlinks and device nodes itself;
// copyWorkers goroutines copy the regular files meanwhile. A worker makes
// its file unnamed (O_TMPFILE), fills in data, owner, extended attributes,
// mode and times, and then links it into its folder: so the workers'
// inode allocations, the costliest step on ext4 without a journal (each
// passes over every inode of its group freed in the last minutes), do not
// wait for each other on the folder's lock, and a failed copy leaves no
// half-made file. Second names of hard-linked files, and folders' owners,
// modes and times, are made last.
type treeCopier struct {
	dst  string
	mode fileCopy
	root bool // this process may chown
	// links maps a source file with several names (device, inode) to the
	// host path of its first copy; later are the other names' links.
	links map[[2]uint64]string
	later []hardLink
	// dirs are the folders made, in the order made.
	dirs []madeDir
	// files are the regular files to copy (nil: the walk copies them).
	files chan fileJob
	wg    sync.WaitGroup
	// noClone: a reflink failed once; copy the rest.
	noClone atomic.Bool
	// noTmpfile: making or naming an unnamed file failed once; make the
	// rest by name.
	noTmpfile atomic.Bool
	// failed holds the first error of a worker.
	failed atomic.Pointer[error]
	// merge, when set, makes this a merge into an existing tree (see
	// mergeLayer).
	merge *mergeRules
}

// copyWorkers is how many goroutines copy regular files while the walk
// makes the other entries. Two keep a two-core machine busy; more gained
// nothing there (most of a small file's copy is system calls, which run
// beside the Go scheduler's processors anyway).
const copyWorkers = 2

// madeDir is a folder the walk made, and its source's stat.
type madeDir struct {
	path string
	st   unix.Stat_t
}

// hardLink is a second name, at path, of the copy at first.
type hardLink struct{ first, path string }

// openDir is a folder of the copy, open until the walk and every file
// sent to a worker are done with it.
type openDir struct {
	fd   int
	refs atomic.Int32
}

func (d *openDir) release() {
	if d.refs.Add(-1) == 0 {
		unix.Close(d.fd)
	}
}

// fileJob is a regular file to copy: the source, open as in, at rel; the
// copy, named name in folder dir.
type fileJob struct {
	rel  string
	in   int
	st   unix.Stat_t
	dir  *openDir
	name string
}

// copyTree copies the tree at src to dst, which must not exist.
func copyTree(src, dst string, mode fileCopy) error {
	return newTreeCopier(dst, mode, copyWorkers).copy(src)
}

// newTreeCopier returns a copier to dst with workers goroutines copying
// regular files (0: the walk copies them itself).
func newTreeCopier(dst string, mode fileCopy, workers int) *treeCopier {
	c := &treeCopier{dst: dst, mode: mode, root: os.Geteuid() == 0, links: map[[2]uint64]string{}}
	if workers > 0 {
		c.files = make(chan fileJob, 64)
		for range workers {
			c.wg.Go(c.work)
		}
	}
	return c
}

// copy copies the tree at src to c.dst, once.
func (c *treeCopier) copy(src string) error {
	err := c.walk(src)
	if c.files != nil {
		close(c.files)
		c.wg.Wait()
	}
	if err == nil {
		err = c.err()
	}
	if err != nil {
		return err
	}
	for _, l := range c.later {
		if err := os.Link(l.first, l.path); err != nil {
			return err
		}
	}
	// Innermost first: setting a folder's attributes changes none of
	// its parent's.
	for _, d := range slices.Backward(c.dirs) {
		if err := c.pathAttrs(d.path, &d.st); err != nil {
			return err
		}
	}
	return nil
}

// walk makes c.dst and the entries of the tree at src in it.
func (c *treeCopier) walk(src string) error {
	srcFD, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: src, Err: err}
	}
	defer unix.Close(srcFD)
	var st unix.Stat_t
	if err := unix.Fstat(srcFD, &st); err != nil {
		return &os.PathError{Op: "stat", Path: src, Err: err}
	}
	if c.merge == nil {
		if err := os.Mkdir(c.dst, 0o700); err != nil {
			return err
		}
	}
	dstFD, err := unix.Open(c.dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: c.dst, Err: err}
	}
	return c.dir(srcFD, newOpenDir(dstFD), ".", &st)
}

func newOpenDir(fd int) *openDir {
	d := &openDir{fd: fd}
	d.refs.Store(1)
	return d
}

// err is the first error of a worker.
func (c *treeCopier) err() error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// dir copies what the source folder open as srcFD holds into the new
// folder dst, both at rel, and releases dst; st is the source folder's.
func (c *treeCopier) dir(srcFD int, dst *openDir, rel string, st *unix.Stat_t) error {
	defer dst.release()
	c.dirs = append(c.dirs, madeDir{path: filepath.Join(c.dst, rel), st: *st})
	if err := c.xattrs(srcFD, dst.fd, true); err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	names, err := readNames(srcFD)
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := c.err(); err != nil {
			return err
		}
		if err := c.entry(srcFD, dst, filepath.Join(rel, name), name); err != nil {
			return err
		}
	}
	return nil
}

// entry copies the entry name, at rel, of the source folder open as srcFD
// into the folder dst.
func (c *treeCopier) entry(srcFD int, dst *openDir, rel, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(srcFD, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lstat", Path: rel, Err: err}
	}
	if c.merge != nil {
		if done, err := c.merge.entry(c.dst, dst.fd, rel, name, &st); done || err != nil {
			return err
		}
	}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return c.subdir(srcFD, dst, rel, name, &st)
	case unix.S_IFREG:
		return c.file(srcFD, dst, rel, name, &st)
	case unix.S_IFLNK:
		var target string
		if target, err = readlinkat(srcFD, name); err == nil {
			err = unix.Symlinkat(target, dst.fd, name)
		}
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO:
		err = unix.Mknodat(dst.fd, name, st.Mode, int(st.Rdev))
	default:
		return nil // a socket: nothing to copy
	}
	if err == nil {
		err = c.atAttrs(dst.fd, name, &st)
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	return nil
}

// subdir makes the folder name in dst and copies the source's into it.
func (c *treeCopier) subdir(srcFD int, dst *openDir, rel, name string, st *unix.Stat_t) error {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	sub, err := unix.Openat(srcFD, name, flags, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: rel, Err: err}
	}
	defer unix.Close(sub)
	if c.merge != nil {
		err = c.merge.dir(c.dst, sub, dst.fd, rel, name)
	} else if err = unix.Mkdirat(dst.fd, name, 0o700); err != nil {
		err = &os.PathError{Op: "mkdir", Path: filepath.Join(c.dst, rel), Err: err}
	}
	if err != nil {
		return err
	}
	dsub, err := unix.Openat(dst.fd, name, flags, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Join(c.dst, rel), Err: err}
	}
	return c.dir(sub, newOpenDir(dsub), rel, st)
}

// file copies the regular file name, at rel, of the source folder open as
// srcFD into dst: a hard link to an earlier copy, made last (or, for
// linkFiles, to the source), or a copy of its own.
func (c *treeCopier) file(srcFD int, dst *openDir, rel, name string, st *unix.Stat_t) error {
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := c.links[key]; ok {
			c.later = append(c.later, hardLink{first: first, path: filepath.Join(c.dst, rel)})
			return nil
		}
		c.links[key] = filepath.Join(c.dst, rel)
	}
	if c.mode == linkFiles && unix.Linkat(srcFD, name, dst.fd, name, 0) == nil {
		return nil
	}
	// O_NONBLOCK: a FIFO put in the file's place does not hold the copy
	// up; copying its data fails instead.
	in, err := unix.Openat(srcFD, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: rel, Err: err}
	}
	dst.refs.Add(1)
	j := fileJob{rel: rel, in: in, st: *st, dir: dst, name: name}
	if c.files == nil {
		return c.copyFile(j)
	}
	c.files <- j
	return nil
}

// work copies the files sent until the channel closes; after a failure it
// only lets them go.
func (c *treeCopier) work() {
	for j := range c.files {
		if c.failed.Load() != nil {
			unix.Close(j.in)
			j.dir.release()
			continue
		}
		if err := c.copyFile(j); err != nil {
			c.failed.CompareAndSwap(nil, &err)
		}
	}
}

// copyFile makes j's copy: unnamed, filled in, then linked into its folder
// where the file system and this process can, else made by name and then
// filled in.
func (c *treeCopier) copyFile(j fileJob) error {
	defer j.dir.release()
	defer unix.Close(j.in)
	if !c.noTmpfile.Load() {
		out, err := unix.Openat(j.dir.fd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err == nil {
			err = c.fill(out, j.in, &j.st)
			if err == nil {
				if lerr := linkUnnamed(out, j.dir.fd, j.name); lerr != nil {
					err = errNoName
				}
			}
			unix.Close(out)
			if err != errNoName {
				return copyErr(j.rel, err)
			}
		}
		c.noTmpfile.Store(true)
	}
	out, err := unix.Openat(j.dir.fd, j.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return copyErr(j.rel, err)
	}
	err = c.fill(out, j.in, &j.st)
	if cerr := unix.Close(out); err == nil {
		err = cerr
	}
	return copyErr(j.rel, err)
}

// errNoName: an unnamed file could not be linked into its folder.
var errNoName = errors.New("cannot name an unnamed file")

func copyErr(rel string, err error) error {
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	return nil
}

// linkUnnamed names the unnamed file open as fd name in the folder open as
// dirFD: through the descriptor, which needs CAP_DAC_READ_SEARCH on
// kernels before 6.10, else through /proc.
func linkUnnamed(fd, dirFD int, name string) error {
	err := unix.Linkat(fd, "", dirFD, name, unix.AT_EMPTY_PATH)
	if err == unix.ENOENT || err == unix.EPERM {
		err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), dirFD, name, unix.AT_SYMLINK_FOLLOW)
	}
	return err
}

// fill gives the new file open as out the data, owner, extended
// attributes, mode and times of the file open as in, described by st.
func (c *treeCopier) fill(out, in int, st *unix.Stat_t) error {
	if err := c.data(out, in); err != nil {
		return err
	}
	if c.root {
		// First: chown drops file capabilities (security.capability)
		// and setuid and setgid bits.
		if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if err := c.xattrs(in, out, false); err != nil {
		return err
	}
	if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
		return err
	}
	ts := times(st)
	// futimens: utimensat with no path.
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(out), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// data fills out with in's bytes (from the start, whatever the files'
// offsets): a reflink where the file system can, else a copy in the
// kernel (copy_file_range), else through a buffer.
func (c *treeCopier) data(out, in int) error {
	if !c.noClone.Load() {
		if unix.IoctlFileClone(out, in) == nil {
			return nil
		}
		c.noClone.Store(true)
	}
	var rOff, wOff int64
	for {
		n, err := unix.CopyFileRange(in, &rOff, out, &wOff, 1<<30, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil && rOff == 0 && (err == unix.EXDEV || err == unix.ENOSYS || err == unix.EOPNOTSUPP || err == unix.EINVAL):
			return copyBuffered(out, in)
		case err != nil:
			return err
		case n == 0:
			return nil
		}
	}
}

// copyBuffered copies in to out through a buffer, for file systems that
// copy_file_range does not serve.
func copyBuffered(out, in int) error {
	buf := make([]byte, 256<<10)
	for off := int64(0); ; {
		n, err := unix.Pread(in, buf, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return err
		}
		for p := buf[:n]; len(p) > 0; {
			w, err := unix.Pwrite(out, p, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return err
			}
			p, off = p[w:], off+int64(w)
		}
	}
}

// atAttrs gives the entry name of the folder open as dirFD (not a regular
// file or folder) the owner, mode and times of st.
func (c *treeCopier) atAttrs(dirFD int, name string, st *unix.Stat_t) error {
	if c.root {
		if err := unix.Fchownat(dirFD, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Fchmodat(dirFD, name, st.Mode&0o7777, 0); err != nil {
			return err
		}
	}
	return unix.UtimesNanoAt(dirFD, name, times(st), unix.AT_SYMLINK_NOFOLLOW)
}

// pathAttrs gives the folder p, which this copy made, the owner, mode and
// times of st.
func (c *treeCopier) pathAttrs(p string, st *unix.Stat_t) error {
	if c.root {
		if err := unix.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, p, st.Mode&0o7777, 0); err != nil {
		return err
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, times(st), unix.AT_SYMLINK_NOFOLLOW)
}

func times(st *unix.Stat_t) []unix.Timespec {
	return []unix.Timespec{st.Atim, st.Mtim}
}

// readNames lists the names in the folder open as fd (not "." and "..").
func readNames(fd int) ([]string, error) {
	buf := make([]byte, 8<<10)
	var names []string
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// readlinkat reads the symlink name in the folder open as dirFD.
func readlinkat(dirFD int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirFD, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// xattrs copies the extended attributes of the file (or, with dir, the
// folder) open as in to the one open as out: all of them (copyXattrs), or
// in a merge as mergeXattrs does.
func (c *treeCopier) xattrs(in, out int, dir bool) error {
	if c.merge != nil {
		return mergeXattrs(in, out, dir)
	}
	return copyXattrs(in, out)
}

// copyXattrs copies the extended attributes of the file open as in to the
// one open as out. overlayfs's own (trusted.overlay.*, user.overlay.* in a
// user namespace) must arrive, or a fork would see deleted folders' old
// contents again; others that this process may not set are skipped.
func copyXattrs(in, out int) error {
	names, err := listXattrsFD(in)
	if err != nil || len(names) == 0 {
		return err
	}
	for _, name := range names {
		val, err := getXattrFD(in, name)
		if err != nil {
			return err
		}
		if err := unix.Fsetxattr(out, name, val, 0); err != nil {
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
func listXattrs(f *os.File) ([]string, error) { return listXattrsFD(int(f.Fd())) }

// getXattr reads one extended attribute of f.
func getXattr(f *os.File, name string) ([]byte, error) { return getXattrFD(int(f.Fd()), name) }

// listXattrsFD lists the names of the extended attributes of the file
// open as fd.
func listXattrsFD(fd int) ([]string, error) {
	var small [256]byte
	buf := small[:]
	for {
		n, err := unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			buf = make([]byte, 4*len(buf))
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

// getXattrFD reads one extended attribute of the file open as fd.
func getXattrFD(fd int, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Fgetxattr(fd, name, buf)
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
