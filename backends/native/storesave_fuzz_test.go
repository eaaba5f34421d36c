package native

import (
	"bytes"
	"compress/gzip"
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
		dir := filepath.Join(t.TempDir(), "diff")
		eachSplitEntry(file, func(e splitEntry) error {
			if p := e.path(dir); p != dir && !strings.HasPrefix(p, dir+string(filepath.Separator)) {
				t.Fatalf("entry %+v reaches %s, outside %s", e, p, dir)
			}
			return nil
		})
	})
}
