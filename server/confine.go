package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// On a backend without isolation (local) a sandbox is a folder on the host,
// and a path in a file tool is a host path. The server confines the file
// tools (ls, read_file, write_file, edit_file, glob, grep) to the sandbox's
// folder, so an agent cannot read other sandboxes' folders and meta.json
// files or the host's files through them. It does so by handing package
// fileops a sandbox (confinedSandbox) whose file access goes through an
// os.Root opened on that folder, which neither ".." nor symlinks can leave.
// Commands are not confined: execute runs host processes, and the tool
// descriptions say so.

// toolKey marks a call's context with the tool it serves.
type toolKey struct{}

func withTool(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, toolKey{}, name)
}

func toolOf(ctx context.Context) string {
	name, _ := ctx.Value(toolKey{}).(string)
	return name
}

// sandboxFolder is the local backend's sandbox: Dir is its folder on the
// host (<state dir>/<id>, holding meta.json and work/).
type sandboxFolder interface {
	Dir() string
}

// confineRoot returns the host folder the file tools of sb are confined
// to: its work folder (<dir>/work), or its working directory when the config
// put that elsewhere on the host. "" means there is nothing to confine to.
func confineRoot(info backend.Info, sb backend.Sandbox) string {
	wd := ""
	if filepath.IsAbs(info.WorkDir) {
		wd = filepath.Clean(info.WorkDir)
	}
	if f, ok := backend.As[sandboxFolder](sb); ok && f.Dir() != "" {
		work := filepath.Join(f.Dir(), "work")
		if wd == "" || within(work, wd) {
			return work
		}
	}
	return wd
}

// within reports whether p is dir or below it (both clean and absolute).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// OutsideError is the cause of a file tool's failure on a path outside the
// sandbox's folder. It matches fs.ErrPermission.
type OutsideError struct {
	Path string // as the agent gave it
	Root string // the folder file tools are confined to
}

func (e *OutsideError) Error() string {
	if e.Root == "" {
		return fmt.Sprintf("%s: file tools are disabled: this sandbox has no folder to confine them to", e.Path)
	}
	return fmt.Sprintf("%s is outside the sandbox's folder %s", e.Path, e.Root)
}

func (e *OutsideError) Is(target error) bool { return target == fs.ErrPermission }

// agentText is what the agent reads about e.
func (e *OutsideError) agentText() string {
	if e.Root == "" {
		return "Error: file tools are disabled for this sandbox: the backend gives no isolation and the sandbox has no folder to confine them to. Use execute."
	}
	return fmt.Sprintf("Error: '%s' is outside this sandbox's folder (%s). The backend gives no isolation, so file tools only reach files inside that folder; "+
		"use paths relative to the working directory, or absolute paths under the folder.", e.Path, e.Root)
}

// confinedSandbox is the sandbox the file tools see on a backend without
// isolation: files through an os.Root on the sandbox's folder, Exec only
// for the execute tool. It has no Unwrap on purpose: capabilities of the
// sandbox below (the sbxd client's file access) would reach the whole host,
// so fileops must find only these.
type confinedSandbox struct {
	sb backend.Sandbox
	// root is the folder; realRoot the same with symlinks resolved, for
	// absolute paths an agent got from pwd -P.
	root, realRoot string
	workDir        string
}

var (
	_ backend.FileSystem = (*confinedSandbox)(nil)
	_ fileops.FileWalker = (*confinedSandbox)(nil)
)

func newConfinedSandbox(ctx context.Context, sb backend.Sandbox) (*confinedSandbox, error) {
	info, err := sb.Info(ctx)
	if err != nil {
		return nil, err
	}
	c := &confinedSandbox{sb: sb, root: confineRoot(info, sb), workDir: info.WorkDir}
	if c.workDir == "" {
		c.workDir = c.root
	}
	c.realRoot = c.root
	if real, err := filepath.EvalSymlinks(c.root); err == nil && c.root != "" {
		c.realRoot = real
	}
	return c, nil
}

func (c *confinedSandbox) ID() string                                     { return c.sb.ID() }
func (c *confinedSandbox) Info(ctx context.Context) (backend.Info, error) { return c.sb.Info(ctx) }
func (c *confinedSandbox) Destroy(ctx context.Context) error              { return c.sb.Destroy(ctx) }

// Exec runs commands for the execute tool only. The file tools' fallbacks
// that run commands (find, stat, cat) would not be confined, so they fail
// instead.
func (c *confinedSandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if toolOf(ctx) != "execute" {
		return backend.ExecResult{}, fmt.Errorf("%w: file tools do not run commands in an unisolated sandbox (they are confined to its folder)", errors.ErrUnsupported)
	}
	return c.sb.Exec(ctx, req)
}

// abs resolves name as the local backend does: absolute names are host
// paths, relative ones are under the working directory.
func (c *confinedSandbox) abs(name string) string {
	if filepath.IsAbs(name) {
		return filepath.Clean(name)
	}
	return filepath.Join(c.workDir, name)
}

// open opens the root and returns name's path in it, or an *fs.PathError
// wrapping *OutsideError.
func (c *confinedSandbox) open(op, name string) (*os.Root, string, error) {
	p := c.abs(name)
	rel := ""
	for _, root := range []string{c.root, c.realRoot} {
		if root != "" && within(root, p) {
			rel, _ = filepath.Rel(root, p)
			break
		}
	}
	if rel == "" {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: &OutsideError{Path: name, Root: c.root}}
	}
	r, err := os.OpenRoot(c.root)
	if err != nil {
		return nil, "", c.pathErr(op, name, err)
	}
	return r, rel, nil
}

// pathErr names the agent's path in err, and turns os.Root's refusal of a
// symlink that leaves the folder into an *OutsideError.
func (c *confinedSandbox) pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	inner := err
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		inner = pe.Err
	}
	// os.Root's error for a path that leaves the root is unexported; its
	// text is all there is to know it by.
	if inner.Error() == "path escapes from parent" {
		inner = &OutsideError{Path: name, Root: c.root}
	}
	return &fs.PathError{Op: op, Path: name, Err: inner}
}

func (c *confinedSandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	r, rel, err := c.open("read", name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// O_NONBLOCK: opening a FIFO must not wait for a writer.
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, c.pathErr("read", name, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, c.pathErr("read", name, err)
	}
	switch {
	case fi.IsDir():
		f.Close()
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file (%s)", fi.Mode().Type())}
	}
	return f, nil
}

func (c *confinedSandbox) WriteFile(ctx context.Context, name string, rd io.Reader, perm fs.FileMode) error {
	r, rel, err := c.open("write", name)
	if err != nil {
		return err
	}
	defer r.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return c.pathErr("write", name, err)
		}
	}
	// A symlink is followed (inside the folder only), as a plain write
	// does; O_NONBLOCK keeps a FIFO from blocking the call.
	f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, perm)
	if err != nil {
		return c.pathErr("write", name, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		_, err = io.Copy(f, rd)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return c.pathErr("write", name, err)
}

func (c *confinedSandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	r, rel, err := c.open("stat", name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	return fi, c.pathErr("stat", name, err)
}

func (c *confinedSandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	r, rel, err := c.open("readdir", name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	entries, err := fs.ReadDir(r.FS(), filepath.ToSlash(rel))
	if err != nil {
		return nil, c.pathErr("readdir", name, err)
	}
	infos := make([]fs.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // gone since the listing
		}
		infos = append(infos, fi)
	}
	sbfiles.SortByName(infos)
	return infos, nil
}

// WalkFiles implements fileops.FileWalker, so glob and grep list files
// through the root too instead of running find.
func (c *confinedSandbox) WalkFiles(ctx context.Context, root string, maxDepth int, skip []string, fn func(string, fs.FileInfo) error) error {
	r, rel, err := c.open("walk", root)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	if err != nil {
		return c.pathErr("walk", root, err)
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "walk", Path: root, Err: syscall.ENOTDIR}
	}
	base := filepath.ToSlash(c.abs(root))
	start := filepath.ToSlash(rel)
	return fs.WalkDir(r.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if p == start {
			if err != nil {
				return c.pathErr("walk", root, err)
			}
			return nil
		}
		if err != nil {
			return nil // unreadable below the root: skipped, as find does
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		below := p
		if start != "." {
			below = strings.TrimPrefix(p, start+"/")
		}
		full := path.Join(base, below)
		depth := strings.Count(below, "/") + 1
		if d.IsDir() {
			if slices.Contains(skip, d.Name()) || slices.Contains(skip, full) || (maxDepth > 0 && depth >= maxDepth) {
				return fs.SkipDir
			}
			return nil
		}
		if maxDepth > 0 && depth > maxDepth {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // gone since the listing
		}
		return fn(full, info)
	})
}
