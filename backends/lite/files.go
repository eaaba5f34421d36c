package lite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/ctxio"
	"github.com/sandboxkit/sandboxkit/internal/hostfs"
)

// Files are read and written on the host side of the sandbox: the merged
// overlay directory (and the host folders of bind volumes), with no exec.
// Every path is resolved the way the kernel resolves it inside the
// sandbox, as if chrooted: ".." stops at "/", absolute symlinks start again
// at the sandbox's root, so nothing a sandbox process does (symlinks to
// "/", "../../..", "/proc/self/root/...") can make the host program touch a
// host file. Each step goes through an os.Root, which refuses any path
// that would leave its folder even if a symlink is swapped in between the
// resolution and the operation.

// maxSymlinks bounds the symlinks one resolution follows, as the kernel's
// ELOOP limit does.
const maxSymlinks = 40

// hostOnly are sandbox paths whose content the host side does not see
// (kernel file systems, tmpfs, single-file bind mounts): operations on them
// return errors.ErrUnsupported, so sbfiles.ReadFile and friends fall back
// to Exec.
var hostOnly = []string{"/proc", "/sys", "/dev", sbxdDir, "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"}

// viewMount maps a sandbox folder to a host folder.
type viewMount struct {
	target   string // inside the sandbox, absolute and clean
	source   string // on the host
	readOnly bool
}

// view is a sandbox's file system as seen from the host.
type view struct {
	mounts []viewMount // longest target first
	roots  map[string]*os.Root
}

func newView(m *meta, dir string) *view { return newViewGen(m, dir, m.Gen) }

// newViewGen is newView on generation gen's root file system: its host
// mount point, or for a rootless sandbox (mounted only in its own
// namespaces) the root its running first process sees.
func newViewGen(m *meta, dir string, gen int) *view {
	root := rootfsDir(dir, gen)
	if m.Rootless && gen == m.Gen {
		root = procRoot(m.InitPID)
	}
	return newViewAt(m, root)
}

// newViewAt is a view whose root file system is the host folder root.
func newViewAt(m *meta, root string) *view {
	v := &view{mounts: []viewMount{{target: "/", source: root, readOnly: m.ReadOnly}}}
	for _, vol := range m.Volumes {
		v.mounts = append(v.mounts, viewMount{target: path.Clean(vol.Target), source: vol.Source, readOnly: vol.ReadOnly})
	}
	slices.SortStableFunc(v.mounts, func(a, b viewMount) int { return len(b.target) - len(a.target) })
	return v
}

// close closes the roots the view opened.
func (v *view) close() {
	for _, r := range v.roots {
		r.Close()
	}
	v.roots = nil
}

// route returns the mount holding sandbox path p (absolute, clean), its
// os.Root, and p relative to that root ("." for the root itself).
func (v *view) route(p string) (viewMount, *os.Root, string, error) {
	for _, m := range v.mounts {
		if m.target == "/" || p == m.target || strings.HasPrefix(p, m.target+"/") {
			rel := strings.TrimPrefix(strings.TrimPrefix(p, m.target), "/")
			if rel == "" {
				rel = "."
			}
			if v.roots == nil {
				v.roots = map[string]*os.Root{}
			}
			r, ok := v.roots[m.source]
			if !ok {
				var err error
				if r, err = os.OpenRoot(m.source); err != nil {
					return m, nil, "", err
				}
				v.roots[m.source] = r
			}
			return m, r, rel, nil
		}
	}
	return viewMount{}, nil, "", fs.ErrNotExist // unreachable: "/" matches all
}

func (v *view) lstat(p string) (fs.FileInfo, error) {
	_, r, rel, err := v.route(p)
	if err != nil {
		return nil, err
	}
	return r.Lstat(rel)
}

// resolve returns the sandbox path p leads to with every symlink resolved
// (the last component's too when followLast), chroot-style. Components
// from the first one that does not exist on are kept as they are.
func (v *view) resolve(p string, followLast bool) (string, error) {
	rest := splitPath(p)
	cur := "/"
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		if len(rest) == 0 && !followLast {
			return next, nil
		}
		if isHostOnly(next) {
			return path.Join(append([]string{next}, rest...)...), nil
		}
		fi, err := v.lstat(next)
		if err != nil {
			// Missing (or not a directory): the operation reports it.
			return path.Join(append([]string{next}, rest...)...), nil
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if links++; links > maxSymlinks {
			return "", syscall.ELOOP
		}
		_, r, rel, err := v.route(next)
		if err != nil {
			return "", err
		}
		target, err := r.Readlink(rel)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		rest = append(splitPath(target), rest...)
	}
	return cur, nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }

func isHostOnly(p string) bool {
	for _, h := range hostOnly {
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	return false
}

// mkdirAll makes sandbox folder p and its parents.
func (v *view) mkdirAll(p string) error {
	defer v.close()
	real, err := v.resolve(p, true)
	if err != nil {
		return err
	}
	_, r, rel, err := v.route(real)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	return r.MkdirAll(rel, 0o755)
}

// readFile returns the content of sandbox file p (used for /etc/passwd).
func (v *view) readFile(p string) ([]byte, error) {
	defer v.close()
	real, err := v.resolve(p, true)
	if err != nil {
		return nil, err
	}
	_, r, rel, err := v.route(real)
	if err != nil {
		return nil, err
	}
	return r.ReadFile(rel)
}

// The FileSystem methods.

// abs turns a sandbox name into an absolute, clean sandbox path.
func (s *Sandbox) abs(m *meta, name string) string {
	if path.IsAbs(name) {
		return path.Clean(name)
	}
	return path.Join(m.WorkDir, name)
}

// open resolves name and returns the view, the resolved path's mount,
// root and relative path. The caller closes the view.
func (s *Sandbox) open(op, name string, followLast bool) (*meta, *view, viewMount, *os.Root, string, error) {
	m, err := s.meta()
	if err != nil {
		return nil, nil, viewMount{}, nil, "", s.opErr(op, err)
	}
	v := newView(m, s.dir)
	real, err := v.resolve(s.abs(m, name), followLast)
	if err == nil && isHostOnly(real) {
		err = fmt.Errorf("%w: %s is not on the sandbox's overlay (kernel file system, tmpfs or single-file mount)", errUnsupported, real)
	}
	if err != nil {
		v.close()
		return nil, nil, viewMount{}, nil, "", &fs.PathError{Op: op, Path: name, Err: err}
	}
	mnt, r, rel, err := v.route(real)
	if err != nil {
		v.close()
		return nil, nil, viewMount{}, nil, "", s.pathErr(op, name, err)
	}
	return m, v, mnt, r, rel, nil
}

// pathErr reports err as an *fs.PathError on the caller's name; os.Root's
// refusal to leave its folder (only possible when a symlink is swapped in
// during the operation) is a permission error.
func (s *Sandbox) pathErr(op, name string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if err != nil && strings.Contains(err.Error(), "escapes from parent") {
		err = fs.ErrPermission
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// sentryMiss makes a miss on the host side of a gVisor sandbox
// errors.ErrUnsupported as well as fs.ErrNotExist, so that sbfiles asks
// the sandbox through Exec: gVisor keeps the named pipes made inside in
// its sentry, not in the root file system the host sees, and the
// sandbox's answer (not found, or what the file is) is the one that
// counts. runc's host side sees every file, so there a miss is final.
func (s *Sandbox) sentryMiss(err error) error {
	var pe *fs.PathError
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &pe) {
		return err
	}
	if m, merr := s.meta(); merr != nil || !m.runtime().gvisor() {
		return err
	}
	return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: fmt.Errorf("%w on the host's side of this gVisor sandbox (%w there: its named pipes live in its sentry)", pe.Err, errUnsupported)}
}

func (s *Sandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	_, v, _, r, rel, err := s.open("read", name, true)
	if err != nil {
		return nil, s.sentryMiss(err)
	}
	defer v.close()
	// Without blocking, and regular files only: a named pipe would block
	// the open until a writer came.
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, s.sentryMiss(s.pathErr("read", name, err))
	}
	fi, err := f.Stat()
	if err == nil {
		err = hostfs.CheckRegular("read", name, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, s.pathErr("read", name, err)
	}
	return f, nil
}

// Readlink returns the target of the symlink name, as stored.
func (s *Sandbox) Readlink(ctx context.Context, name string) (string, error) {
	_, v, _, r, rel, err := s.open("readlink", name, false)
	if err != nil {
		return "", err
	}
	defer v.close()
	target, err := r.Readlink(rel)
	if err != nil {
		return "", s.pathErr("readlink", name, err)
	}
	return target, nil
}

// WriteFile replaces name atomically (a temporary file renamed over it),
// following a symlink at name to its target. New files and folders belong
// to the sandbox's user; a replaced file keeps its owner.
func (s *Sandbox) WriteFile(ctx context.Context, name string, src io.Reader, perm fs.FileMode) error {
	m, v, mnt, r, rel, err := s.open("write", name, true)
	if err != nil {
		return err
	}
	defer v.close()
	if mnt.readOnly {
		return &fs.PathError{Op: "write", Path: name, Err: fmt.Errorf("read-only file system: %w", fs.ErrPermission)}
	}
	if rel == "." {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	}
	uid, gid := m.hostOwner()
	if fi, err := r.Stat(rel); err == nil {
		if fi.IsDir() {
			return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	dir := path.Dir(rel)
	if dir != "." {
		if _, err := r.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			if err := mkdirAllOwned(r, dir, uid, gid); err != nil {
				return s.pathErr("write", name, err)
			}
		}
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	tmp := path.Join(dir, "."+path.Base(rel)+".sbx-"+hex.EncodeToString(rnd[:]))
	f, err := r.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return s.pathErr("write", name, err)
	}
	_, err = io.Copy(f, ctxio.Reader(ctx, src))
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Chmod(perm.Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = r.Rename(tmp, rel)
	}
	if err != nil {
		r.Remove(tmp)
		return s.pathErr("write", name, err)
	}
	return nil
}

// mkdirAllOwned makes dir and its missing parents, owned by uid:gid.
func mkdirAllOwned(r *os.Root, dir string, uid, gid int) error {
	var missing []string
	for d := dir; d != "." && d != "/"; d = path.Dir(d) {
		if _, err := r.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
	}
	if err := r.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range missing {
		if err := r.Lchown(d, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	_, v, _, r, rel, err := s.open("stat", name, true)
	if err != nil {
		return nil, s.sentryMiss(err)
	}
	defer v.close()
	fi, err := r.Stat(rel)
	if err != nil {
		return nil, s.sentryMiss(s.pathErr("stat", name, err))
	}
	return fi, nil
}

func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	_, v, _, r, rel, err := s.open("readdir", name, true)
	if err != nil {
		return nil, err
	}
	defer v.close()
	f, err := r.Open(rel)
	if err != nil {
		return nil, s.pathErr("readdir", name, err)
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, s.pathErr("readdir", name, err)
	}
	infos := make([]fs.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return nil, s.pathErr("readdir", name, err)
		}
		infos = append(infos, fi)
	}
	sbfiles.SortByName(infos)
	return infos, nil
}
