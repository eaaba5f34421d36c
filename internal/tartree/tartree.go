// Package tartree writes host folders and files as tar streams, the way
// docker cp and docker build send them: modes, sizes, times and symlinks
// kept, owner names left out.
package tartree

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Entry writes the file, folder or symlink at host path p to tw as name (a
// slash-separated path; a folder gets a trailing slash). The owner's IDs
// are kept when keepOwner is set, else the entry belongs to root. A file's
// bytes are its size when it was stat'ed (fi), so a file that grows
// meanwhile cannot overrun its header.
func Entry(tw *tar.Writer, p, name string, fi fs.FileInfo, keepOwner bool) error {
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	hdr.Name = name
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname = "", ""
	if !keepOwner {
		hdr.Uid, hdr.Gid = 0, 0
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.CopyN(tw, f, hdr.Size)
	return err
}

// Options says what Dir leaves out.
type Options struct {
	// Skip, when set, excludes entries by their slash-separated path
	// relative to the folder; an excluded folder is still walked when
	// descend is set (its entries may be included again).
	Skip func(rel string, isDir bool) (exclude, descend bool)
	// SkipSpecial leaves out what is neither a regular file, a folder nor
	// a symlink (devices, FIFOs, sockets).
	SkipSpecial bool
	// KeepOwner keeps the owners' IDs (see Entry); else root owns all.
	KeepOwner bool
}

// Dir writes the tree under dir to tw: names relative to dir, entries
// owned by root (see Entry).
func Dir(tw *tar.Writer, dir string, opts Options) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if opts.Skip != nil {
			if exclude, descend := opts.Skip(rel, d.IsDir()); exclude {
				if d.IsDir() && !descend {
					return filepath.SkipDir
				}
				return nil
			}
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if opts.SkipSpecial && !fi.Mode().IsRegular() && !fi.IsDir() && fi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		return Entry(tw, p, rel, fi, opts.KeepOwner)
	})
}

// Source checks from, a host folder or a .tar, .tar.gz or .tgz file, and
// returns what opens its contents as a tar stream: a folder as Dir writes
// it (with opts), a .tar as it is, a gzipped one as it is or, with gunzip,
// decompressed. Bad input is an error wrapping backend.ErrInvalidConfig.
func Source(from string, opts Options, gunzip bool) (func() (io.ReadCloser, error), error) {
	fi, err := os.Stat(from)
	if err != nil {
		return nil, fmt.Errorf("%w: volume contents %s: %v", backend.ErrInvalidConfig, from, errors.Unwrap(err))
	}
	low := strings.ToLower(from)
	gz := strings.HasSuffix(low, ".tar.gz") || strings.HasSuffix(low, ".tgz")
	switch {
	case fi.IsDir():
		return func() (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			go func() {
				tw := tar.NewWriter(pw)
				err := Dir(tw, from, opts)
				if err == nil {
					err = tw.Close()
				}
				pw.CloseWithError(err)
			}()
			return pr, nil
		}, nil
	case gz && gunzip:
		return func() (io.ReadCloser, error) {
			f, err := os.Open(from)
			if err != nil {
				return nil, err
			}
			zr, err := gzip.NewReader(f)
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %w", from, err)
			}
			return readCloser{zr, f}, nil
		}, nil
	case gz, strings.HasSuffix(low, ".tar"):
		return func() (io.ReadCloser, error) { return os.Open(from) }, nil
	}
	return nil, fmt.Errorf("%w: volume contents %s: want a folder or a .tar.gz, .tgz or .tar file", backend.ErrInvalidConfig, from)
}

type readCloser struct {
	io.Reader
	io.Closer
}
