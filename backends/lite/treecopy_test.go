package lite

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestTreeCopy copies a tree with what an overlay's upper layer can hold
// (whiteouts, an opaque folder, hard links, symlinks, setuid and setgid
// files, file capabilities, other owners, odd modes, a read-only folder,
// times) each way the copier can run, and checks that the copy is the
// same tree and shares no inode with it.
func TestTreeCopy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts, owners and trusted.* xattrs need root")
	}
	src := makeUpperTree(t)
	for _, tc := range []struct {
		name      string
		workers   int
		noTmpfile bool
	}{
		{"in line", 0, false},
		{"workers", copyWorkers, false},
		{"workers, files made by name", copyWorkers, true},
		{"one worker", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "copy")
			fds := openFDs(t)
			c := newTreeCopier(dst, cloneFiles, tc.workers)
			c.noTmpfile.Store(tc.noTmpfile)
			if err := c.copy(src); err != nil {
				t.Fatal(err)
			}
			if n := openFDs(t); n != fds {
				t.Errorf("%d descriptors open after the copy, %d before", n, fds)
			}
			compareTrees(t, src, dst)
		})
	}
}

// A copy whose destination exists fails, and its workers leave no
// descriptor open.
func TestTreeCopyFails(t *testing.T) {
	src := t.TempDir()
	for i := range 100 {
		os.WriteFile(filepath.Join(src, fmt.Sprint("f", i)), []byte("x"), 0o644)
	}
	dst := t.TempDir()
	fds := openFDs(t)
	if err := copyTree(src, dst, cloneFiles); err == nil {
		t.Error("a copy onto an existing folder succeeded")
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after a failed copy, %d before", n, fds)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// makeUpperTree makes a tree like an overlay's upper layer and returns its
// path.
func makeUpperTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "upper")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	file := func(rel string, size int, mode os.FileMode, uid, gid int) {
		t.Helper()
		data := make([]byte, size)
		rand.Read(data)
		p := filepath.Join(src, rel)
		must(os.WriteFile(p, data, 0o600))
		must(os.Chown(p, uid, gid))
		must(os.Chmod(p, mode))
	}
	for _, d := range []string{"", "etc", "etc/opq", "many", "many/deeper", "ro", "sgid"} {
		must(os.Mkdir(filepath.Join(src, d), 0o755))
	}
	file("big", 3<<20+17, 0o644, 0, 0)
	file("empty", 0, 0o640, 0, 0)
	for i := range 300 {
		file(fmt.Sprintf("many/f%03d", i), 1+i*37, os.FileMode(0o600+i%3*0o44), i%3*1000, i%2*100)
	}
	file("many/deeper/x", 10, 0o644, 0, 0)
	file("suid", 100, 0o755|os.ModeSetuid, 0, 0)
	file("sgid-file", 100, 0o755|os.ModeSetgid, 1000, 50)
	file("none", 5, 0, 1234, 5678)
	file("etc/opq/kept", 3, 0o644, 0, 0)
	file("ro/inside", 3, 0o444, 0, 0)
	// File capabilities (cap_net_raw, effective), as setcap writes them.
	file("cap", 100, 0o755, 1000, 1000)
	capData := binary.LittleEndian.AppendUint32(nil, 0x02000000|1)
	capData = binary.LittleEndian.AppendUint32(capData, 1<<13)
	capData = append(capData, make([]byte, 12)...)
	must(unix.Setxattr(filepath.Join(src, "cap"), "security.capability", capData, 0))
	must(unix.Setxattr(filepath.Join(src, "etc/opq"), "trusted.overlay.opaque", []byte("y"), 0))
	must(unix.Setxattr(filepath.Join(src, "many/f001"), "user.note", []byte("kept"), 0))
	must(unix.Setxattr(filepath.Join(src, "many/f002"), "trusted.overlay.metacopy", nil, 0))
	// Hard links: two names, and three across folders.
	must(os.Link(filepath.Join(src, "many/f010"), filepath.Join(src, "many/f010-link")))
	must(os.Link(filepath.Join(src, "big"), filepath.Join(src, "etc/big-link")))
	must(os.Link(filepath.Join(src, "big"), filepath.Join(src, "many/deeper/big-link")))
	// Whiteouts and a FIFO.
	must(unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0))
	must(unix.Mknod(filepath.Join(src, "etc/gone"), unix.S_IFCHR, 0))
	must(unix.Mknod(filepath.Join(src, "fifo"), unix.S_IFIFO|0o640, 0))
	must(os.Lchown(filepath.Join(src, "fifo"), 1000, 1000))
	must(os.Symlink("../big", filepath.Join(src, "etc/rel-link")))
	must(os.Symlink("/nowhere/at/all", filepath.Join(src, "dangling")))
	must(os.Lchown(filepath.Join(src, "dangling"), 1000, 1000))
	// A socket: not copied.
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(err)
	must(unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(src, "sock")}))
	unix.Close(sock)
	must(os.Chmod(filepath.Join(src, "ro"), 0o555))
	must(os.Chmod(filepath.Join(src, "sgid"), 0o2775))
	must(os.Chown(filepath.Join(src, "sgid"), 1000, 50))
	must(os.Chmod(src, 0o751))
	// Times last, folders after what they hold.
	var paths []string
	must(filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i, p := range slices.Backward(paths) {
		mt := time.Date(2001, 2, 3, 4, 5, 6, i*1000+7, time.UTC)
		ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
		must(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return src
}

// compareTrees checks that dst holds what src does (but sockets), with the
// same types, modes, owners, sizes, modification times, contents, symlink
// targets, device numbers, extended attributes and hard links, and that
// no inode of dst is one of src.
func compareTrees(t *testing.T, src, dst string) {
	t.Helper()
	srcInodes := map[uint64]bool{}
	copyOf := map[uint64]uint64{} // source inode -> its copy's
	seen := map[string]bool{}
	err := filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		var s, d unix.Stat_t
		if err := unix.Lstat(p, &s); err != nil {
			return err
		}
		srcInodes[s.Ino] = true
		q := filepath.Join(dst, rel)
		if s.Mode&unix.S_IFMT == unix.S_IFSOCK {
			if _, err := os.Lstat(q); err == nil {
				t.Errorf("%s: a socket was copied", rel)
			}
			return nil
		}
		if err := unix.Lstat(q, &d); err != nil {
			t.Errorf("%s: not copied: %v", rel, err)
			return nil
		}
		seen[rel] = true
		if s.Mode != d.Mode || s.Uid != d.Uid || s.Gid != d.Gid || s.Rdev != d.Rdev {
			t.Errorf("%s: mode %o uid %d gid %d rdev %d, want %o %d %d %d", rel, d.Mode, d.Uid, d.Gid, d.Rdev, s.Mode, s.Uid, s.Gid, s.Rdev)
		}
		if s.Mtim != d.Mtim {
			t.Errorf("%s: modified %v, want %v", rel, d.Mtim, s.Mtim)
		}
		if s.Nlink != d.Nlink && s.Mode&unix.S_IFMT != unix.S_IFDIR {
			t.Errorf("%s: %d links, want %d", rel, d.Nlink, s.Nlink)
		}
		if c, ok := copyOf[s.Ino]; ok && c != d.Ino {
			t.Errorf("%s: a name of a hard-linked file is a copy of its own", rel)
		}
		copyOf[s.Ino] = d.Ino
		switch s.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			a, _ := os.ReadFile(p)
			b, err := os.ReadFile(q)
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("%s: content differs (%d bytes, want %d): %v", rel, len(b), len(a), err)
			}
		case unix.S_IFLNK:
			a, _ := os.Readlink(p)
			if b, err := os.Readlink(q); err != nil || a != b {
				t.Errorf("%s: links to %q, want %q: %v", rel, b, a, err)
			}
			return nil // no extended attributes are copied
		}
		if a, b := xattrsOf(t, p), xattrsOf(t, q); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s: extended attributes %q, want %q", rel, b, a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dst, func(q string, _ fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dst, q)
		if err == nil && !seen[rel] {
			t.Errorf("%s: in the copy only", rel)
		}
		var d unix.Stat_t
		if unix.Lstat(q, &d) == nil && srcInodes[d.Ino] {
			t.Errorf("%s: shares its inode with the source", rel)
		}
		return nil
	})
}

// xattrsOf returns the extended attributes of p (not following a
// symlink) as name=value.
func xattrsOf(t *testing.T, p string) []string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	var out []string
	for name := range bytes.SplitSeq(buf[:n], []byte{0}) {
		if len(name) == 0 {
			continue
		}
		val := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, string(name), val)
		if err != nil {
			t.Fatalf("%s: %s: %v", p, name, err)
		}
		out = append(out, fmt.Sprintf("%s=%q", name, val[:m]))
	}
	slices.Sort(out)
	return out
}
