package tartree

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
