package lite

import (
	"archive/tar"
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

	"github.com/sandboxkit/sandboxkit/internal/tartree"
	"golang.org/x/sys/unix"
)

// An overlay's writable (upper) layer and an OCI image layer say the same
// things differently:
//
//	deleted file or folder X   overlayfs: X is a 0/0 character device
//	                           OCI: an empty file .wh.X
//	folder D replaced whole    overlayfs: D has xattr trusted.overlay.opaque=y
//	(removed and made again)   (user.overlay.opaque in a user namespace)
//	                           OCI: an empty file D/.wh..wh..opq
//
// writeLayer turns the first into the second, applyLayer applies the
// second to a folder.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// Overlayfs's extended attributes that writeLayer reads.
var (
	opaqueXattrs   = []string{"trusted.overlay.opaque", "user.overlay.opaque"}
	whiteoutXattrs = []string{"trusted.overlay.whiteout", "user.overlay.whiteout"}
	// Features that would leave part of a file's or folder's truth in
	// the lower layer (redirect_dir, metacopy). lite mounts without them
	// (the kernel's defaults are off), and a layer with them is refused.
	lowerRefXattrs = []string{"trusted.overlay.redirect", "user.overlay.redirect", "trusted.overlay.metacopy", "user.overlay.metacopy"}
)

// layerWriter writes an upper layer as an OCI layer (an uncompressed tar).
type layerWriter struct {
	src *os.Root
	tw  *tar.Writer
	// rootless: files belong to this process's user on the host and to
	// root inside; the layer says root.
	rootless bool
	links    map[uint64]string
}

// writeLayer writes the overlay upper folder upper to w as an OCI layer.
// The upper folder's own root entry is left out: the image's root stays.
func writeLayer(w io.Writer, upper string, rootless bool) error {
	r, err := os.OpenRoot(upper)
	if err != nil {
		return err
	}
	defer r.Close()
	lw := &layerWriter{src: r, tw: tar.NewWriter(w), rootless: rootless, links: map[uint64]string{}}
	if err := lw.dir("."); err != nil {
		return err
	}
	return lw.tw.Close()
}

// dir writes the entries of folder rel, sorted by name.
func (lw *layerWriter) dir(rel string) error {
	f, err := lw.src.Open(rel)
	if err != nil {
		return err
	}
	entries, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if err := lw.entry(path.Join(rel, e.Name())); err != nil {
			return fmt.Errorf("%s: %w", e.Name(), err)
		}
	}
	return nil
}

func (lw *layerWriter) entry(rel string) error {
	fi, err := lw.src.Lstat(rel)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	hdr := &tar.Header{
		Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: fi.ModTime(), Format: tar.FormatPAX,
	}
	if lw.rootless {
		hdr.Uid, hdr.Gid = 0, 0
	}
	var content *os.File
	switch fi.Mode().Type() {
	case fs.ModeDevice | fs.ModeCharDevice:
		if st.Rdev == 0 {
			return lw.whiteout(path.Dir(rel), whiteoutPrefix+path.Base(rel))
		}
		hdr.Typeflag = tar.TypeChar
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case fs.ModeDevice:
		hdr.Typeflag = tar.TypeBlock
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case fs.ModeNamedPipe:
		hdr.Typeflag = tar.TypeFifo
	case fs.ModeSymlink:
		hdr.Typeflag = tar.TypeSymlink
		if hdr.Linkname, err = lw.src.Readlink(rel); err != nil {
			return err
		}
	case fs.ModeDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		if content, err = lw.src.Open(rel); err != nil {
			return err
		}
		defer content.Close()
	case 0:
		if first, ok := lw.links[st.Ino]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return lw.tw.WriteHeader(hdr)
		}
		if content, err = lw.src.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW, 0); err != nil {
			return err
		}
		defer content.Close()
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	default:
		return nil // a socket
	}
	opaque := false
	if content != nil {
		names, err := listXattrs(content)
		if err != nil {
			return err
		}
		for _, name := range names {
			val, err := getXattr(content, name)
			if err != nil {
				return err
			}
			switch {
			case slices.Contains(opaqueXattrs, name):
				opaque = string(val) == "y"
			case slices.Contains(whiteoutXattrs, name) && hdr.Typeflag == tar.TypeReg:
				return lw.whiteout(path.Dir(rel), whiteoutPrefix+path.Base(rel))
			case slices.Contains(lowerRefXattrs, name):
				return fmt.Errorf("%w: the overlay keeps part of %s in the lower layer (%s); a layer cannot say so", errors.ErrUnsupported, rel, name)
			case isOverlayXattr(name):
				// origin, impure, ...: overlayfs's bookkeeping.
			default:
				if hdr.PAXRecords == nil {
					hdr.PAXRecords = map[string]string{}
				}
				hdr.PAXRecords["SCHILY.xattr."+name] = string(val)
			}
		}
	}
	if err := lw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeReg:
		if st.Nlink > 1 {
			lw.links[st.Ino] = rel
		}
		// A file the sandbox grows meanwhile is cut at the size the
		// header says; one it shrinks fails the write.
		if _, err := io.Copy(lw.tw, io.LimitReader(content, hdr.Size)); err != nil {
			return err
		}
	case tar.TypeDir:
		if opaque {
			if err := lw.whiteout(rel, whiteoutOpaque); err != nil {
				return err
			}
		}
		return lw.dir(rel)
	}
	return nil
}

// whiteout writes the empty file name in folder dir that marks a deletion.
func (lw *layerWriter) whiteout(dir, name string) error {
	return lw.tw.WriteHeader(&tar.Header{Name: path.Join(dir, name), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX})
}

// applyLayer applies an OCI layer to the folder rootfs: its whiteouts
// remove what rootfs had, its other entries are made (replacing what was
// there). Entries stay inside rootfs (os.Root). Files are written anew,
// never changed in place, so rootfs may hold hard links to files of
// another tree (copyTree's linkFiles) without touching them.
func applyLayer(r io.Reader, rootfs string) error {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	// added holds the entries of this layer: an opaque folder hides only
	// what was there before.
	added := map[string]bool{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		dir, base := path.Dir(name), path.Base(name)
		switch {
		case base == whiteoutOpaque:
			err = emptyDir(root, dir, added)
		case strings.HasPrefix(base, whiteoutPrefix):
			err = root.RemoveAll(path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix)))
		default:
			err = applyEntry(root, name, hdr, tr)
			added[name] = true
		}
		if err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
	}
}

// emptyDir removes what folder dir holds except the entries in keep.
func emptyDir(root *os.Root, dir string, keep map[string]bool) error {
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := root.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if p := path.Join(dir, n); !keep[p] {
			if err := root.RemoveAll(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyEntry makes the entry hdr describes at name.
func applyEntry(root *os.Root, name string, hdr *tar.Header, content io.Reader) error {
	if fi, err := root.Lstat(name); err == nil && fi.IsDir() && hdr.Typeflag != tar.TypeDir {
		if err := root.RemoveAll(name); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return mknodIn(root, name, hdr)
	}
	if err := tartree.ExtractEntry(root, hdr, content, nil); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir {
		return nil
	}
	var f *os.File
	for k, v := range hdr.PAXRecords {
		xattr, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		if f == nil {
			var err error
			if f, err = root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0); err != nil {
				return err
			}
			defer f.Close()
		}
		// Best effort, as docker's: an attribute this process may not set
		// (security.*, trusted.* without root) is skipped.
		unix.Fsetxattr(int(f.Fd()), xattr, []byte(v), 0)
	}
	return nil
}

// mknodIn makes a device node or FIFO at name, in its parent folder
// opened through root (os.Root has no mknod).
func mknodIn(root *os.Root, name string, hdr *tar.Header) error {
	dir := path.Dir(name)
	if err := root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tartree.RemoveNonDir(root, name)
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeChar:
		mode |= unix.S_IFCHR
	case tar.TypeBlock:
		mode |= unix.S_IFBLK
	default:
		mode |= unix.S_IFIFO
	}
	base := filepath.Base(name)
	if err := unix.Mknodat(int(d.Fd()), base, mode, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := unix.Fchownat(int(d.Fd()), base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return unix.Fchmodat(int(d.Fd()), base, uint32(hdr.Mode&0o7777), 0)
}
