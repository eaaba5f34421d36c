package lite

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// overlayFixture is a lower layer and the mounts made over it.
type overlayFixture struct {
	t     *testing.T
	base  string
	lower string
}

func newOverlayFixture(t *testing.T) *overlayFixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting overlays needs root")
	}
	f := &overlayFixture{t: t, base: t.TempDir()}
	f.lower = filepath.Join(f.base, "lower")
	f.sh(f.lower, `mkdir -p etc/sub bin opq/deep dir-to-file keep work && echo pw > etc/passwd && echo h > etc/hosts
echo sub > etc/sub/f && for i in 1 2 3; do echo $i > bin/b$i; done && echo o > opq/deep/x && echo o > opq/y
echo f > file-to-dir && echo d > dir-to-file/in && ln -s etc lnk-to-dir && echo w > work/w && echo o > keep/old && chmod 700 keep`)
	return f
}

// sh runs script in dir (made first) with sh.
func (f *overlayFixture) sh(dir, script string) {
	f.t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// mount mounts the lower layer under a new upper layer called name and
// returns the mount point and the upper layer's path; unmounted at the
// end of the test.
func (f *overlayFixture) mount(name string) (merged, upper string) {
	f.t.Helper()
	upper, work, merged := filepath.Join(f.base, name+"-upper"), filepath.Join(f.base, name+"-work"), filepath.Join(f.base, name)
	for _, d := range []string{upper, work, merged} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	f.remount(merged, upper)
	return merged, upper
}

func (f *overlayFixture) remount(merged, upper string) {
	f.t.Helper()
	work := strings.TrimSuffix(upper, "-upper") + "-work"
	if err := syscall.Mount("overlay", merged, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", f.lower, upper, work)); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { unmount(merged) })
}

// describeTree lists what the tree at root shows: each entry's type, mode,
// owner, and a file's size, contents and user.* attributes, or a
// symlink's target.
func describeTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %d %x mtime=%d", len(data), sha256.Sum256(data), fi.ModTime().UnixNano())
			if v, err := unixGetxattr(p, "user.note"); err == nil {
				fmt.Fprintf(&b, " note=%s", v)
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintf(&b, " -> %s", target)
		}
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func unixGetxattr(p, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// A layer made by a real overlay (whiteouts and opaque folders as the
// kernel makes them), merged over another mount of the same lower layer,
// shows there what it shows over its own: deleted files and folders, a
// folder emptied and filled again, a folder replaced by a file and a file
// by a folder, a symlink by a folder, new files with hard links, modes,
// owners, times and user attributes, changes deep in lower folders, and
// the working folder emptied (which stays the same folder).
func TestMergeLayer(t *testing.T) {
	f := newOverlayFixture(t)
	a, upperA := f.mount("a")
	f.sh(a, `rm bin/b2 && echo changed > etc/passwd && chmod 600 etc/passwd && echo new > etc/sub/g
rm -rf opq && mkdir -p opq/other && echo n > opq/other/z
rm -rf dir-to-file && echo "now a file" > dir-to-file
rm file-to-dir && mkdir file-to-dir && echo in > file-to-dir/f
rm lnk-to-dir && mkdir lnk-to-dir && echo x > lnk-to-dir/x
rm -rf work/w && mkdir -p new/deep && echo hi > new/deep/f && ln new/deep/f new/hard && ln -s deep/f new/link
chown -R 1000:50 new && chmod 4755 new/deep/f && mkfifo new/fifo && touch -d 2001-02-03 etc/sub/f
rm -rf keep && mkdir keep && echo k > keep/k && chmod 750 keep`)
	if err := unix.Setxattr(filepath.Join(a, "new/deep/f"), "user.note", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	want := describeTree(t, a)
	unmount(a)

	b, upperB := f.mount("b")
	inode := func() uint64 {
		fi, err := os.Stat(filepath.Join(b, "keep"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	cwd := inode()
	if err := mergeLayer(upperA, b, []string{"/", "/proc", "/etc/hosts"}, "/keep"); err != nil {
		t.Fatal(err)
	}
	if got := describeTree(t, b); got != want {
		t.Errorf("the merged mount shows:\n%s\nthe layer's own:\n%s", got, want)
	}
	// The working folder, emptied and filled again, is the same folder.
	if inode() != cwd {
		t.Error("the working folder was made anew")
	}
	// And so does the merged layer mounted again, on its own.
	unmount(b)
	f.remount(b, upperB)
	if got := describeTree(t, b); got != want {
		t.Errorf("the merged layer mounted again shows:\n%s\nwant:\n%s", got, want)
	}
}

// What the layer holds at a mount point, a file or a whiteout, is left
// alone (the mount hides it); a change that would remove a folder above a
// mount point, and overlayfs's redirects, cannot be merged.
func TestMergeLayerRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, change string
		mounts       []string
		redirect     string // a folder of the layer given a redirect
		ok           bool
	}{
		{name: "a file at a mount point", change: "echo mine > etc/hosts", mounts: []string{"/etc/hosts"}, ok: true},
		{name: "a deleted mount point", change: "rm etc/hosts", mounts: []string{"/etc/hosts"}, ok: true},
		{name: "a deleted folder above one", change: "rm -rf etc", mounts: []string{"/etc/sub/f"}},
		{name: "an emptied folder above one", change: "rm -rf etc && mkdir etc", mounts: []string{"/etc/hosts"}},
		{name: "a folder replaced above one", change: "rm -rf etc && echo x > etc", mounts: []string{"/etc/hosts"}},
		{name: "a redirect", change: "mkdir moved", redirect: "moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newOverlayFixture(t)
			a, upperA := f.mount("a")
			f.sh(a, tc.change)
			unmount(a)
			if tc.redirect != "" {
				if err := unix.Setxattr(filepath.Join(upperA, tc.redirect), "trusted.overlay.redirect", []byte("/opq"), 0); err != nil {
					t.Fatal(err)
				}
			}
			b, _ := f.mount("b")
			before, _ := os.ReadFile(filepath.Join(b, "etc/hosts"))
			err := mergeLayer(upperA, b, tc.mounts, "/")
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if after, _ := os.ReadFile(filepath.Join(b, "etc/hosts")); !bytes.Equal(after, before) {
					t.Errorf("the mount point's file became %q, was %q", after, before)
				}
				return
			}
			if !errors.Is(err, errMergeUnsupported) {
				t.Fatalf("mergeLayer: %v, want errMergeUnsupported", err)
			}
			if _, err := os.Stat(filepath.Join(b, "etc/hosts")); err != nil && tc.redirect == "" {
				t.Errorf("the mount point went: %v", err)
			}
		})
	}
}
