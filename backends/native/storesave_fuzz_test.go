package native

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tar-split records are the engine's files, read as they are: no
// record makes eachSplitEntry panic, and no name reaches out of the
// layer's folder.
func FuzzTarSplit(f *testing.F) {
	f.Add([]byte(`{"type":2,"payload":"YQ==","position":0}` + "\n" + `{"type":1,"name":"./etc/group","size":27,"payload":"LlTxxY4zd1E=","position":1}`))
	f.Add([]byte(`{"type":1,"name":"../../etc/passwd","size":1}`))
	f.Add([]byte(`{"type":1,"name_raw":"Ly4uLy4uL3g=","size":3}`))
	f.Add([]byte(`{"type":7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		file := filepath.Join(t.TempDir(), "tar-split.json.gz")
		if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		eachSplitEntry(file, func(e splitEntry) error {
			if rel := e.rel(); rel != "" && !filepath.IsLocal(rel) {
				t.Fatalf("entry %+v names %q, not a name inside the layer's folder", e, rel)
			}
			return nil
		})
	})
}

// A layer record whose file name runs through a symlink out of the
// layer's folder is refused, not read: an image cannot make the save read
// a file of the host.
func TestStoreLayerStaysInside(t *testing.T) {
	root := t.TempDir()
	host := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(host, []byte("host file"), 0o600); err != nil {
		t.Fatal(err)
	}
	diff := "sha256:" + strings.Repeat("a", 64)
	rec := filepath.Join(root, "image", "overlay2", "layerdb", "sha256", strings.Repeat("a", 64))
	dir := filepath.Join(root, "overlay2", "cache1", "diff")
	for _, d := range []string{rec, dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Dir(host), filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	var split bytes.Buffer
	zw := gzip.NewWriter(&split)
	fmt.Fprintf(zw, `{"type":2,"payload":"YQ=="}`+"\n"+`{"type":1,"name":"a/secret","size":%d}`+"\n", len("host file"))
	zw.Close()
	for name, data := range map[string][]byte{"diff": []byte(diff), "cache-id": []byte("cache1"), "tar-split.json.gz": split.Bytes()} {
		if err := os.WriteFile(filepath.Join(rec, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := storeLayer(root, diff, diff); err == nil {
		t.Fatal("storeLayer took a file behind a symlink out of the layer's folder")
	}
	// The same name as a file of the folder is taken.
	if err := os.Remove(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "secret"), []byte("its file!"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := storeLayer(root, diff, diff)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || string(got) != "aits file!" || l.Size != int64(len(got)) {
		t.Fatalf("the layer's bytes %q (size %d): %v", got, l.Size, err)
	}
}
