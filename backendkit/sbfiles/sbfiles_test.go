package sbfiles

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// StatBatchScript, run by the host's sh and stat: a path removed after
// the listing that named it is left out and the others are reported with
// exit 0.
func TestStatBatchScriptSkipsVanishedPaths(t *testing.T) {
	dir := t.TempDir()
	a, nl := filepath.Join(dir, "a"), filepath.Join(dir, "new\nline")
	for _, p := range []string{a, nl} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gone := filepath.Join(dir, "gone")
	run := func(format string, paths ...string) (string, error) {
		out, err := exec.Command("sh", append([]string{"-c", StatBatchScript, "sh", format}, paths...)...).Output()
		return string(out), err
	}
	out, err := run("%f %s %Y", a, gone, nl)
	if err != nil {
		t.Fatalf("a listing with a vanished path failed: %v (%q)", err, out)
	}
	recs, complete := StatRecords([]byte(out))
	if !complete {
		t.Fatalf("stat records cut short: %q", out)
	}
	var names []string
	for _, r := range recs {
		fi, err := ParseStatLine(r)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, fi.Name())
	}
	if want := []string{"new\nline", "a"}; !slices.Equal(names, want) {
		t.Errorf("records %q, want %q", names, want)
	}
	if out, err := run("%f %s %Y", gone); err != nil || out != "" {
		t.Errorf("a listing of only a vanished path: %v %q, want nothing and exit 0", err, out)
	}
	if _, err := run("%f %s %Y", a); err != nil {
		t.Errorf("a listing of one file failed: %v", err)
	}
}
