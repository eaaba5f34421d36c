package local

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/ctxio"
	"github.com/sandboxkit/sandboxkit/internal/hostfs"
)

// path resolves a sandbox path: absolute paths are host paths, relative
// ones resolve against the working directory (as Exec resolves them).
func (s *Sandbox) path(name string) (string, error) {
	m, err := s.meta()
	if err != nil {
		return "", err
	}
	if filepath.IsAbs(name) {
		return filepath.Clean(name), nil
	}
	return filepath.Join(m.WorkDir, name), nil
}

func (s *Sandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, s.opErr("read", err)
	}
	// Regular files only: a named pipe would block the open until a
	// writer came.
	f, _, err := hostfs.OpenRegular("read", p)
	if err != nil {
		return nil, renamePathErr(err, name)
	}
	return f, nil
}

// WriteFile replaces name atomically: the bytes go to a temporary file in
// the same directory, which is renamed over name once complete, so a reader
// never sees half a file.
func (s *Sandbox) WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	p, err := s.path(name)
	if err != nil {
		return s.opErr("write", err)
	}
	// Write through a symlink to its target (a dangling one too), as a
	// plain write would, rather than replacing the link.
	if p, err = hostfs.FollowLinks("write", p); err != nil {
		return renamePathErr(err, name)
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return renamePathErr(err, name)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".sbx-*")
	if err != nil {
		return renamePathErr(err, name)
	}
	_, err = io.Copy(tmp, ctxio.Reader(ctx, r))
	if err == nil {
		err = tmp.Chmod(perm.Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return renamePathErr(err, name)
		}
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	return nil
}

func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, s.opErr("stat", err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, renamePathErr(err, name)
	}
	return fi, nil
}

func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	p, err := s.path(name)
	if err != nil {
		return nil, s.opErr("readdir", err)
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, renamePathErr(err, name)
	}
	infos := make([]fs.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listing
		}
		if err != nil {
			return nil, renamePathErr(err, name)
		}
		infos = append(infos, fi)
	}
	sbfiles.SortByName(infos)
	return infos, nil
}

// Readlink returns the target of the symlink name.
func (s *Sandbox) Readlink(ctx context.Context, name string) (string, error) {
	p, err := s.path(name)
	if err != nil {
		return "", s.opErr("readlink", err)
	}
	target, err := os.Readlink(p)
	if err != nil {
		return "", renamePathErr(err, name)
	}
	return target, nil
}

// renamePathErr reports a host *fs.PathError under the sandbox path the
// caller used, not the resolved host path.
func renamePathErr(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}
