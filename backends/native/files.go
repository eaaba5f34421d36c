package native

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Files move through the engine's archive API (what docker cp uses): no
// shell or tools are needed in the image, and modes are kept. The engine
// reads and writes as root, whatever the sandbox's user.

// pathErr reports a failed file operation on name as *fs.PathError with
// the contract's sentinels.
func (s *Sandbox) pathErr(op, name string, err error) error {
	err = s.b.translate(err)
	switch {
	case errors.Is(err, backend.ErrNotFound):
		err = fs.ErrNotExist
	case strings.Contains(err.Error(), "read-only"), strings.Contains(err.Error(), "permission denied"):
		err = fmt.Errorf("%w: %s", fs.ErrPermission, err.Error())
	case strings.Contains(err.Error(), "not a directory"):
		err = syscall.ENOTDIR
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// PutArchive extracts tarStream into dir, which must exist.
func (s *Sandbox) PutArchive(ctx context.Context, dir string, tarStream io.Reader) error {
	abs := s.resolve(dir)
	// Docker refuses a missing directory but Podman creates it: look first,
	// so both behave as the contract says.
	st, err := s.b.cli.ContainerStatPath(ctx, s.cid, abs)
	if err == nil && st.Mode&fs.ModeSymlink == 0 && !st.Mode.IsDir() {
		err = fmt.Errorf("%s is not a directory", dir)
	}
	if err == nil {
		err = s.b.cli.CopyToContainer(ctx, s.cid, abs, tarStream, container.CopyToContainerOptions{})
	}
	if err != nil {
		if errors.Is(s.b.translate(err), backend.ErrNotFound) {
			// The container may be what is missing, not the directory.
			if _, ierr := s.inspect(ctx); errors.Is(ierr, backend.ErrNotFound) {
				return s.opErr("put", ierr)
			}
		}
		return s.pathErr("put", dir, err)
	}
	return nil
}

// GetArchive returns a tar stream of path (see backend.Archiver).
func (s *Sandbox) GetArchive(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, _, err := s.b.cli.CopyFromContainer(ctx, s.cid, s.resolve(name))
	if err != nil {
		if _, ierr := s.inspect(ctx); errors.Is(ierr, backend.ErrNotFound) {
			return nil, s.opErr("get", ierr)
		}
		return nil, s.pathErr("get", name, err)
	}
	return rc, nil
}

// ReadFile reads a regular file (following symlinks) out of the archive
// stream, without buffering it.
func (s *Sandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	abs := s.resolve(name)
	fi, err := s.Stat(ctx, abs)
	if err != nil {
		return nil, renamed(err, name)
	}
	if fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	}
	// Stat resolved symlinks; the archive API does not follow them.
	if st, err := s.b.cli.ContainerStatPath(ctx, s.cid, abs); err == nil && st.LinkTarget != "" && st.Mode&os.ModeSymlink != 0 {
		abs = st.LinkTarget
	}
	rc, err := s.GetArchive(ctx, abs)
	if err != nil {
		return nil, renamed(err, name)
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		rc.Close()
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("reading archive: %w", err)}
	}
	if hdr.Typeflag != tar.TypeReg {
		rc.Close()
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file (tar type %q)", hdr.Typeflag)}
	}
	return struct {
		io.Reader
		io.Closer
	}{tr, rc}, nil
}

// WriteFile creates or replaces name, creating missing parents (mode 0755,
// owned by root).
func (s *Sandbox) WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	abs := s.resolve(name)
	if abs == "/" {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	}
	switch fi, err := s.Stat(ctx, abs); {
	case err == nil && fi.IsDir():
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	case errors.Is(err, syscall.ENOTDIR):
		return &fs.PathError{Op: "write", Path: name, Err: syscall.ENOTDIR}
	}
	// The engine would replace a file standing where a parent should be;
	// a local write fails there, so this does too.
	for dir := path.Dir(abs); dir != "/"; dir = path.Dir(dir) {
		fi, err := s.Stat(ctx, dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return renamed(err, name)
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "write", Path: name, Err: syscall.ENOTDIR}
		}
		break
	}
	// Write through a symlink, as a local write does; the engine would
	// replace the link itself.
	if st, err := s.b.cli.ContainerStatPath(ctx, s.cid, abs); err == nil && st.Mode&os.ModeSymlink != 0 && st.LinkTarget != "" {
		abs = st.LinkTarget
	}
	stream, err := backend.FileTar(abs, r, perm)
	if err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	defer stream.Close()
	err = s.PutArchive(ctx, "/", stream)
	return renamed(err, name)
}

// Stat describes name, following symlinks.
func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	abs := s.resolve(name)
	st, err := s.b.cli.ContainerStatPath(ctx, s.cid, abs)
	if err != nil {
		if _, ierr := s.inspect(ctx); errors.Is(ierr, backend.ErrNotFound) {
			return nil, s.opErr("stat", ierr)
		}
		// The engine answers a path through a file with a bare 500 (stat
		// is a HEAD request: no message); find the file in the way.
		if !errors.Is(s.b.translate(err), backend.ErrNotFound) && s.fileInTheWay(ctx, abs) {
			return nil, &fs.PathError{Op: "stat", Path: name, Err: syscall.ENOTDIR}
		}
		return nil, s.pathErr("stat", name, err)
	}
	if st.Mode&os.ModeSymlink != 0 && st.LinkTarget != "" {
		// The engine resolves the link; stat what it points to.
		target, err := s.b.cli.ContainerStatPath(ctx, s.cid, st.LinkTarget)
		if err != nil {
			return nil, s.pathErr("stat", name, err)
		}
		st.Size, st.Mode, st.Mtime = target.Size, target.Mode, target.Mtime
	}
	return backend.NewFileInfo(path.Base(abs), st.Size, st.Mode, st.Mtime), nil
}

// fileInTheWay reports whether an ancestor of abs is not a directory.
func (s *Sandbox) fileInTheWay(ctx context.Context, abs string) bool {
	for dir := path.Dir(abs); dir != "/"; dir = path.Dir(dir) {
		st, err := s.b.cli.ContainerStatPath(ctx, s.cid, dir)
		if err != nil {
			continue
		}
		return !st.Mode.IsDir() && st.Mode&os.ModeSymlink == 0
	}
	return false
}

// ReadDir lists a directory with `sbxd ls` in an exec (the archive API
// would send the whole tree), as the sandbox's user, so permissions apply
// as they do to Exec; no tools are needed in the image.
func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	if s.plain {
		// No sbxd: the generic path, with the image's shell and tools.
		return backend.ReadDir(ctx, execOnly{s}, s.resolve(name))
	}
	res, err := s.Exec(ctx, backend.ExecRequest{Cmd: []string{sbxdPath, "ls", s.resolve(name)}, OutputLimit: -1})
	if err != nil {
		return nil, err
	}
	switch res.ExitCode {
	case 0:
	case 102:
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	case 104:
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrPermission}
	case 105:
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
	default:
		return nil, &fs.PathError{Op: "readdir", Path: name,
			Err: fmt.Errorf("sbxd ls: exit code %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))}
	}
	var infos []fs.FileInfo
	for line := range strings.SplitSeq(strings.TrimSuffix(string(res.Stdout), "\n"), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, " ", 4)
		if len(parts) != 4 {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: fmt.Errorf("unexpected sbxd ls output %q", line)}
		}
		raw, err1 := strconv.ParseUint(parts[0], 16, 32)
		size, err2 := strconv.ParseInt(parts[1], 10, 64)
		mtime, err3 := strconv.ParseInt(parts[2], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: fmt.Errorf("unexpected sbxd ls output %q: %w", line, err)}
		}
		infos = append(infos, backend.NewFileInfo(parts[3], size, backend.ModeFromUnix(uint32(raw)), time.Unix(mtime, 0)))
	}
	backend.SortByName(infos)
	return infos, nil
}

// execOnly hides every capability of a sandbox but Exec, so package
// backend's helpers take their generic paths.
type execOnly struct{ backend.Sandbox }

// renamed reports a *fs.PathError under the path the caller used.
func renamed(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != name {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}
