// Package tartree writes host folders and files as tar streams, the way
// docker cp and docker build send them: modes, sizes, times and symlinks
// kept, owner names left out.
package tartree

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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
		return Entry(tw, p, rel, fi, false)
	})
}
