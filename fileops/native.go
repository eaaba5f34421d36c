package fileops

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// FileWalker is implemented by sandboxes that list a directory tree
// natively in one call, such as the sbxd client. Glob and Grep then list
// files with it instead of running find through Exec, so they need no
// shell tools in the sandbox and cost one round trip.
//
// WalkFiles calls fn for every entry below root that is not a directory,
// depth first: root is followed if it is a symlink, nothing below it is.
// maxDepth > 0 limits the depth (1: root's children). Directories named in
// skip (a base name, or an absolute path when it starts with "/") are not
// entered; directories below root that cannot be read are skipped. Errors
// about root itself are *fs.PathError wrapping fs.ErrNotExist,
// fs.ErrPermission or syscall.ENOTDIR. A walker that cannot serve the call
// returns an error wrapping errors.ErrUnsupported, and the find path is
// used.
type FileWalker interface {
	WalkFiles(ctx context.Context, root string, maxDepth int, skip []string, fn func(path string, info fs.FileInfo) error) error
}

// maxWalkEntries bounds a native listing, as maxListOutput bounds find's.
const maxWalkEntries = 1 << 20

var errWalkFull = errors.New("listing full")

// walkNative is listFiles through a FileWalker. ok is false when the
// walker cannot serve the call.
func (t *Tools) walkNative(ctx context.Context, base string, spec listSpec) (files []fileEntry, truncated, ok bool, err error) {
	w, found := backend.As[FileWalker](t.sb)
	if !found {
		return nil, false, false, nil
	}
	var skip []string
	if base == "/" {
		skip = append(skip, prunedRoots...)
	}
	if spec.skipVCS {
		skip = append(skip, vcsDirs...)
	}
	err = w.WalkFiles(ctx, base, spec.depth, skip, func(p string, fi fs.FileInfo) error {
		if spec.depth > 0 && strings.Count(relTo(base, p), "/")+1 != spec.depth {
			return nil
		}
		if spec.regular && !fi.Mode().IsRegular() {
			return nil
		}
		if spec.name != "" {
			if m, _ := path.Match(spec.name, fi.Name()); !m {
				return nil
			}
		}
		if len(files) == maxWalkEntries {
			return errWalkFull
		}
		files = append(files, fileEntry{path: p, size: fi.Size(), mtime: fi.ModTime().Unix()})
		return nil
	})
	switch {
	case errors.Is(err, errWalkFull):
		return files, true, true, nil
	case errors.Is(err, errors.ErrUnsupported):
		return nil, false, false, nil
	case err != nil:
		return nil, false, true, err
	}
	return files, false, true, nil
}
