package tartree

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestDir(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub", "skipped"), 0o750)
	os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("data"), 0o640)
	os.WriteFile(filepath.Join(dir, "sub", "skipped", "x"), nil, 0o600)
	os.Symlink("sub/f", filepath.Join(dir, "link"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	skip := func(rel string, isDir bool) (bool, bool) { return rel == "sub/skipped", false }
	if err := Dir(tw, dir, Options{Skip: skip, SkipSpecial: true}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	got := map[string]*tar.Header{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Name == "sub/f" {
			if data, _ := io.ReadAll(tr); string(data) != "data" {
				t.Errorf("sub/f holds %q", data)
			}
		}
		got[hdr.Name] = hdr
	}
	for _, name := range []string{"sub/", "sub/f", "link"} {
		hdr := got[name]
		if hdr == nil {
			t.Errorf("%s missing from %v", name, got)
			continue
		}
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" {
			t.Errorf("%s owned by %d:%d %q, want root without names", name, hdr.Uid, hdr.Gid, hdr.Uname)
		}
	}
	if h := got["sub/f"]; h != nil && h.Mode&0o777 != 0o640 {
		t.Errorf("sub/f mode %o, want 640", h.Mode)
	}
	if h := got["link"]; h != nil && (h.Typeflag != tar.TypeSymlink || h.Linkname != "sub/f") {
		t.Errorf("link: %+v", h)
	}
	for _, name := range []string{"fifo", "sub/skipped/", "sub/skipped/x"} {
		if got[name] != nil {
			t.Errorf("%s was written", name)
		}
	}
}

// Extract keeps a folder's time (set after its entries), makes hard links,
// keeps names inside the folder ("../x" lands at x), and replaces a file
// standing where a later entry of another kind goes.
func TestExtract(t *testing.T) {
	when := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body string) {
		t.Helper()
		h.Size = int64(len(body))
		if h.ModTime.IsZero() {
			h.ModTime = when
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	add(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750}, "")
	add(&tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o640}, "data")
	add(&tar.Header{Name: "d/hard", Typeflag: tar.TypeLink, Linkname: "d/f"}, "")
	add(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o600}, "in")
	add(&tar.Header{Name: "was-file", Typeflag: tar.TypeReg, Mode: 0o600}, "x")
	add(&tar.Header{Name: "was-file", Typeflag: tar.TypeSymlink, Linkname: "d/f"}, "")
	tw.Close()

	parent := t.TempDir()
	dst := filepath.Join(parent, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Extract(&buf, dst, nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst, "d"))
	if err != nil || !fi.ModTime().Equal(when) || fi.Mode().Perm() != 0o750 {
		t.Errorf("folder d: %v %v %v", fi.ModTime(), fi.Mode(), err)
	}
	a, _ := os.Stat(filepath.Join(dst, "d/f"))
	b, err := os.Stat(filepath.Join(dst, "d/hard"))
	if err != nil || !os.SameFile(a, b) {
		t.Errorf("d/hard is not a hard link of d/f: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(dst, "escape")); err != nil || string(data) != "in" {
		t.Errorf("../escape: %q %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(parent, "escape")); err == nil {
		t.Error("../escape was written outside the folder")
	}
	if target, err := os.Readlink(filepath.Join(dst, "was-file")); err != nil || target != "d/f" {
		t.Errorf("was-file: %q %v, want a symlink to d/f", target, err)
	}
}
