package lite

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// writeLayer turns overlayfs's whiteouts (0/0 character devices) and
// opaque folders (trusted.overlay.opaque=y) into OCI's .wh. files, and
// applyLayer applies them to a copy of the image hard-linked to it,
// leaving the image as it was.
func TestLayerWhiteoutsRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making whiteouts and trusted.* xattrs needs root")
	}
	dir := t.TempDir()
	base, upper := filepath.Join(dir, "base"), filepath.Join(dir, "upper")
	write := func(p, s string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(base, "keep"), "image", 0o644)
	write(filepath.Join(base, "gone"), "image", 0o644)
	write(filepath.Join(base, "opq/old"), "image", 0o644)
	write(filepath.Join(base, "changed"), "image", 0o644)

	write(filepath.Join(upper, "changed"), "sandbox", 0o600)
	write(filepath.Join(upper, "opq/new"), "sandbox", 0o755)
	if err := unix.Mknod(filepath.Join(upper, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "opq"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("this file system takes no trusted.* xattrs: %v", err)
	}
	if err := os.Symlink("changed", filepath.Join(upper, "link")); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := writeLayer(&buf, upper, false); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	want := []string{"changed", ".wh.gone", "link", "opq/", "opq/.wh..wh..opq", "opq/new"}
	if !slices.Equal(names, want) {
		t.Fatalf("layer entries %q, want %q", names, want)
	}

	rootfs := filepath.Join(dir, "rootfs")
	if err := copyTree(base, rootfs, linkFiles); err != nil {
		t.Fatal(err)
	}
	if err := applyLayer(bytes.NewReader(buf.Bytes()), rootfs); err != nil {
		t.Fatal(err)
	}
	check := func(root string, want map[string]string) {
		t.Helper()
		got := map[string]string{}
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				rel, _ := filepath.Rel(root, p)
				if fi.Mode()&os.ModeSymlink != 0 {
					l, _ := os.Readlink(p)
					got[rel] = "-> " + l
				} else {
					data, _ := os.ReadFile(p)
					got[rel] = string(data) + " " + fi.Mode().Perm().String()
				}
			}
			return nil
		})
		if len(got) != len(want) {
			t.Errorf("%s holds %v, want %v", root, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s/%s = %q, want %q", root, k, got[k], v)
			}
		}
	}
	check(rootfs, map[string]string{"keep": "image -rw-r--r--", "changed": "sandbox -rw-------", "opq/new": "sandbox -rwxr-xr-x", "link": "-> changed"})
	check(base, map[string]string{"keep": "image -rw-r--r--", "gone": "image -rw-r--r--", "opq/old": "image -rw-r--r--", "changed": "image -rw-r--r--"})
	var st1, st2 syscall.Stat_t
	syscall.Stat(filepath.Join(base, "keep"), &st1)
	syscall.Stat(filepath.Join(rootfs, "keep"), &st2)
	if st1.Ino != st2.Ino {
		t.Errorf("an unchanged file of the image was copied, not linked")
	}
}

// A fork's copy of a writable layer keeps whiteouts and opaque marks and
// shares no inode with the original.
func TestCopyTreeKeepsOverlayMarks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making whiteouts and trusted.* xattrs needs root")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "opq"), 0o750)
	os.WriteFile(filepath.Join(src, "f"), []byte("data"), 0o640)
	os.Link(filepath.Join(src, "f"), filepath.Join(src, "hard"))
	if err := unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(src, "opq"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("this file system takes no trusted.* xattrs: %v", err)
	}
	dst := filepath.Join(dir, "dst")
	if err := copyTree(src, dst, cloneFiles); err != nil {
		t.Fatal(err)
	}
	var st, orig syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(dst, "gone"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("whiteout copy: mode %o rdev %d, %v; want a 0/0 character device", st.Mode, st.Rdev, err)
	}
	val := make([]byte, 8)
	if n, err := unix.Getxattr(filepath.Join(dst, "opq"), "trusted.overlay.opaque", val); err != nil || string(val[:n]) != "y" {
		t.Errorf("opaque mark of the copy: %q, %v", val[:n], err)
	}
	syscall.Stat(filepath.Join(src, "f"), &orig)
	syscall.Stat(filepath.Join(dst, "f"), &st)
	if st.Ino == orig.Ino || st.Mode&0o777 != 0o640 {
		t.Errorf("copy of f: inode shared %v, mode %o", st.Ino == orig.Ino, st.Mode&0o777)
	}
	var hard syscall.Stat_t
	syscall.Stat(filepath.Join(dst, "hard"), &hard)
	if hard.Ino != st.Ino {
		t.Errorf("the hard link within the layer was not kept")
	}
}
