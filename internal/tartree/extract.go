package tartree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Extract unpacks a tar stream into dst, confined to it with os.Root:
// names are cleaned of "..", and symlinks in the archive cannot redirect
// later entries outside dst. Ownership (when run as root), modes (setuid,
// setgid and sticky included), hard links and the modification times of
// files and folders are kept; an entry replaces a file of another kind in
// its way. Device nodes cannot be made through os.Root; their names go to
// skipped (nil: ignored silently).
func Extract(r io.Reader, dst string, skipped *[]string) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	var dirs []*tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if err := ExtractEntry(root, hdr, tr, skipped); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, hdr)
		}
	}
	// Folder times last: making their entries changed them.
	for _, hdr := range dirs {
		if name := entryName(hdr.Name); name != "" {
			root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		}
	}
	return nil
}

// entryName is a tar entry's name relative to the folder it unpacks into.
func entryName(name string) string { return strings.TrimPrefix(path.Clean("/"+name), "/") }

// ExtractEntry makes the file hdr describes in root, with content's bytes
// for a regular file (a folder's time is left to the caller: its later
// entries change it).
func ExtractEntry(root *os.Root, hdr *tar.Header, content io.Reader, skipped *[]string) error {
	name := entryName(hdr.Name)
	if name == "" {
		return nil
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
			root.Remove(name)
		}
		if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case tar.TypeReg:
		RemoveNonDir(root, name)
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		RemoveNonDir(root, name)
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		return lchown(root, name, hdr.Uid, hdr.Gid)
	case tar.TypeLink:
		RemoveNonDir(root, name)
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		return root.Link(target, name)
	default:
		if skipped != nil {
			*skipped = append(*skipped, name)
		}
		return nil
	}
	// chown before chmod: chown clears setuid and setgid bits.
	if err := lchown(root, name, hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := root.Chmod(name, Mode(hdr)); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeReg {
		return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

// Mode is the mode of hdr's file: its permissions with the setuid,
// setgid and sticky bits.
func Mode(hdr *tar.Header) fs.FileMode {
	mode := fs.FileMode(hdr.Mode).Perm()
	if hdr.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// lchown sets the owner of an unpacked file. Only root may: what an
// unprivileged process unpacks is its own.
func lchown(root *os.Root, name string, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return root.Lchown(name, uid, gid)
}

// RemoveNonDir removes name from root unless it is a folder.
func RemoveNonDir(root *os.Root, name string) {
	if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
		root.Remove(name)
	}
}
