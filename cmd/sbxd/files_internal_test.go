//go:build linux

package main

import (
	"bytes"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// FuzzPutRecord: what sbxd ls and stat print for a file reads back, with
// backend's parser, as that one file, whatever its name.
func FuzzPutRecord(f *testing.F) {
	f.Add("evil\n41ed 0 0 FAKE_DIR", false, uint32(0o100644), int64(3), int64(1700000000))
	f.Add("sp ace", true, uint32(0o40755), int64(4096), int64(-1))
	f.Add("\n", false, uint32(0o10644), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, name string, nul bool, mode uint32, size, mtime int64) {
		if name == "" || strings.ContainsAny(name, "/\x00") || size < 0 {
			return // not a file name, or not a size
		}
		st := &syscall.Stat_t{Mode: mode, Size: size}
		st.Mtim.Sec = mtime
		var b bytes.Buffer
		putRecord(&b, st, name, nul)
		putRecord(&b, st, "next", false)
		records, complete := sbfiles.StatRecords(b.Bytes())
		if !complete || len(records) != 2 {
			t.Fatalf("%q: %d records (complete %v)", b.Bytes(), len(records), complete)
		}
		fi, err := sbfiles.ParseStatLine(records[0])
		if err != nil {
			t.Fatal(err)
		}
		if fi.Name() != name || fi.Size() != size || fi.ModTime().Unix() != mtime || fi.Mode() != sbfiles.ModeFromUnix(mode) {
			t.Fatalf("%q read back as %q %d %d %v", b.Bytes(), fi.Name(), fi.Size(), fi.ModTime().Unix(), fi.Mode())
		}
	})
}
