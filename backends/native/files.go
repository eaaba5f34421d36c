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
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
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
	if s.ownKernel() {
		return s.putInSandbox(ctx, dir, abs, tarStream)
	}
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
	if s.ownKernel() {
		return s.getInSandbox(ctx, name, s.resolve(name))
	}
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
	if inKernelFS(abs) || s.ownKernel() {
		return s.readInSandbox(ctx, name, abs)
	}
	fi, err := s.Stat(ctx, abs)
	if err != nil {
		return nil, renamed(err, name)
	}
	switch {
	case fi.IsDir():
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	case !fi.Mode().IsRegular():
		// A named pipe, socket or device: refused at once, as every
		// backend does (the archive would not have its bytes anyway).
		return nil, &fs.PathError{Op: "read", Path: name, Err: backend.ErrNotRegular}
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
	if s.ownKernel() {
		return s.writeInSandbox(ctx, name, abs, r, perm)
	}
	switch fi, err := s.Stat(ctx, abs); {
	case err == nil && fi.IsDir():
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ELOOP):
		return reop("write", name, err)
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
	stream, err := sbfiles.FileTar(abs, r, perm)
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
	if inKernelFS(abs) || s.ownKernel() {
		return s.statInSandbox(ctx, name, abs)
	}
	st, err := s.b.cli.ContainerStatPath(ctx, s.cid, abs)
	if err != nil {
		if _, ierr := s.inspect(ctx); errors.Is(ierr, backend.ErrNotFound) {
			return nil, s.opErr("stat", ierr)
		}
		if errors.Is(s.b.translate(err), backend.ErrNotFound) {
			return nil, s.pathErr("stat", name, err)
		}
		// The engine answers a path it cannot resolve (through a file, or
		// a symlink loop) with a bare 500 (stat is a HEAD request: no
		// message): ask in the sandbox what is wrong.
		return s.statInSandbox(ctx, name, abs)
	}
	if st.Mode&os.ModeSymlink != 0 && st.LinkTarget != "" {
		// The engine resolves the link; stat what it points to.
		target, err := s.b.cli.ContainerStatPath(ctx, s.cid, st.LinkTarget)
		if err != nil {
			if errors.Is(s.b.translate(err), backend.ErrNotFound) {
				return nil, s.pathErr("stat", name, err)
			}
			return s.statInSandbox(ctx, name, abs)
		}
		st.Size, st.Mode, st.Mtime = target.Size, target.Mode, target.Mtime
	}
	return backend.NewFileInfo(path.Base(abs), st.Size, st.Mode, st.Mtime), nil
}

// kernelFS are the folders whose files the engine's archive API does not
// see (they are mounted in the container only: /proc, /sys, /dev); file
// operations there run in the sandbox.
var kernelFS = []string{"/proc", "/sys", "/dev"}

func inKernelFS(abs string) bool {
	for _, k := range kernelFS {
		if abs == k || strings.HasPrefix(abs, k+"/") {
			return true
		}
	}
	return false
}

// errOldSbxd: the sandbox's sbxd predates the file command asked for.
var errOldSbxd = errors.New("the sandbox's sbxd is too old for this file command")

// sbxdFileErr is the *fs.PathError of a failed sbxd file command (exit
// codes as package backend's scripts), or one wrapping errOldSbxd when
// that sbxd does not know the command (a usage error, exit code 125).
func sbxdFileErr(op, name string, res backend.ExecResult) error {
	if res.ExitCode == 125 && strings.HasPrefix(string(res.Stderr), "usage:") {
		return &fs.PathError{Op: op, Path: name, Err: errOldSbxd}
	}
	return sbfiles.ScriptError(op, name, res)
}

// statInSandbox is Stat by a command in the sandbox (sbxd stat, else sh
// and stat), as the sandbox's user.
func (s *Sandbox) statInSandbox(ctx context.Context, name, abs string) (fs.FileInfo, error) {
	if !s.plain {
		infos, err := sbfiles.StatLines(ctx, s, "stat", name, []string{sbxdPath, "stat", abs}, sbxdFileErr)
		switch {
		case err == nil && len(infos) == 1:
			i := infos[0]
			return backend.NewFileInfo(path.Base(abs), i.Size(), i.Mode(), i.ModTime()), nil
		case err == nil:
			return nil, &fs.PathError{Op: "stat", Path: name, Err: fmt.Errorf("unexpected sbxd stat output (%d records)", len(infos))}
		case !errors.Is(err, errOldSbxd):
			return nil, err
		}
	} else if !inKernelFS(abs) && s.fileInTheWay(ctx, abs) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: syscall.ENOTDIR}
	}
	fi, err := sbfiles.Stat(ctx, execOnly{s}, abs)
	if err != nil {
		return nil, reop("stat", name, err)
	}
	return fi, nil
}

// readInSandbox is ReadFile by a command in the sandbox (sbxd cat, else sh
// and cat), as the sandbox's user.
func (s *Sandbox) readInSandbox(ctx context.Context, name, abs string) (io.ReadCloser, error) {
	if !s.plain {
		rc, err := sbfiles.ScriptOutput(ctx, s, "read", name, []string{sbxdPath, "cat", abs}, sbxdFileErr)
		if !errors.Is(err, errOldSbxd) {
			return rc, err
		}
	}
	rc, err := sbfiles.ReadFile(ctx, execOnly{s}, abs)
	if err != nil {
		return nil, reop("read", name, err)
	}
	return rc, nil
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
// as they do to Exec; no tools are needed in the image. Names are framed
// so that none can split or forge an entry (see sbfiles.StatRecords).
func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	abs := s.resolve(name)
	if !s.plain {
		infos, err := sbfiles.StatLines(ctx, s, "readdir", name, []string{sbxdPath, "ls", "-0", abs}, sbxdFileErr)
		if err == nil {
			sbfiles.SortByName(infos)
			return infos, nil
		}
		if !errors.Is(err, errOldSbxd) {
			return nil, err
		}
		// An sbxd from before framed listings: the generic path.
	}
	infos, err := sbfiles.ReadDir(ctx, execOnly{s}, abs)
	if err != nil {
		return nil, reop("readdir", name, err)
	}
	return infos, nil
}

// Readlink returns the target of the symlink name (sbxd readlink; without
// sbxd, sbfiles.Readlink's generic path).
func (s *Sandbox) Readlink(ctx context.Context, name string) (string, error) {
	if s.plain {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: errors.ErrUnsupported}
	}
	res, err := s.Exec(ctx, backend.ExecRequest{Cmd: []string{sbxdPath, "readlink", s.resolve(name)}, OutputLimit: -1})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		err := sbxdFileErr("readlink", name, res)
		if errors.Is(err, errOldSbxd) {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("%w: %w", errors.ErrUnsupported, errOldSbxd)}
		}
		return "", err
	}
	return string(res.Stdout), nil
}

// execOnly hides every capability of a sandbox but Exec, so package
// backend's helpers take their generic paths.
type execOnly struct{ backend.Sandbox }

// reop reports a failed file operation op on name: an *fs.PathError's
// cause under op and name, any other error as it is.
func reop(op, name string, err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return &fs.PathError{Op: op, Path: name, Err: pe.Err}
	}
	return err
}

// renamed reports a *fs.PathError under the path the caller used.
func renamed(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != name {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}
