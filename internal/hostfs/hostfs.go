// Package hostfs holds the file access rules that code reading and
// writing files directly (the local backend on the host, sbxd inside a
// sandbox) shares, so that every backend answers the same way: only
// regular files are read, and a write follows a symbolic link at its
// target name, a dangling one too.
package hostfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/sandboxkit/sandboxkit/internal/errdefs"
)

// MaxSymlinks bounds the symbolic links one resolution follows, as the
// kernel's ELOOP limit does.
const MaxSymlinks = 40

// OpenRegular opens name for reading when it is a regular file (symbolic
// links followed). A directory is an *fs.PathError wrapping
// syscall.EISDIR, anything else (a named pipe, a socket, a device) one
// wrapping errdefs.ErrNotRegular. The file is opened without blocking, so
// a named pipe that no one writes to cannot hold the call up; reads of
// the regular file it returns block as usual.
func OpenRegular(op, name string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = CheckRegular(op, name, fi.Mode())
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// CheckRegular returns OpenRegular's error for a file of mode m, or nil
// for a regular file.
func CheckRegular(op, name string, m fs.FileMode) error {
	switch {
	case m.IsDir():
		return &fs.PathError{Op: op, Path: name, Err: syscall.EISDIR}
	case !m.IsRegular():
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w (%s)", errdefs.ErrNotRegular, Kind(m))}
	}
	return nil
}

// Kind names the type of a file of mode m: "regular file", "directory",
// "symbolic link", "named pipe", "socket", "device" or "special file".
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// FollowLinks returns the path a write of name lands on: every symbolic
// link at the end of the path is followed, one whose target does not
// exist too (the write creates the target, as a shell's > does). More
// than MaxSymlinks links are an *fs.PathError wrapping syscall.ELOOP. The
// directory of the result has its own links resolved where it exists.
func FollowLinks(op, name string) (string, error) {
	p := name
	for i := 0; ; i++ {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		if i == MaxSymlinks {
			return "", &fs.PathError{Op: op, Path: name, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		p = target
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		p = filepath.Join(dir, filepath.Base(p))
	}
	return p, nil
}
