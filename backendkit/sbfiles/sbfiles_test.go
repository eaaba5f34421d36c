package sbfiles

import (
	"io/fs"
	"testing"
)

func TestParseStatLine(t *testing.T) {
	fi, err := ParseStatLine("41ed 4096 1700000000 /srv/my dir")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name() != "my dir" || !fi.IsDir() || fi.Mode().Perm() != 0o755 || fi.ModTime().Unix() != 1700000000 {
		t.Errorf("got %s %v %v", fi.Name(), fi.Mode(), fi.ModTime())
	}
	fi, _ = ParseStatLine("a1ff 7 1 /l")
	if fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("mode %v, want a symlink", fi.Mode())
	}
	if _, err := ParseStatLine("garbage"); err == nil {
		t.Error("ParseStatLine(garbage) succeeded")
	}
}
