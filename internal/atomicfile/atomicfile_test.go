package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b", "file")
	if err := atomicfile.Write(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "two" {
		t.Fatalf("read %q, %v; want %q", got, err, "two")
	}
	// Nothing but the file is left beside it.
	ents, err := os.ReadDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("%d entries beside the file, want none: %v", len(ents)-1, ents)
	}
	// A symlink at the target is replaced, not followed.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(link, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "kept" {
		t.Fatalf("the link's target changed to %q", got)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the link was not replaced by a file: %v, %v", fi, err)
	}
}

func TestWriteFailsWithoutLeftovers(t *testing.T) {
	dir := t.TempDir()
	// A directory at the target: the rename fails, the temporary goes.
	p := filepath.Join(dir, "d")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(p, []byte("data")); err == nil {
		t.Fatal("no error writing over a non-empty directory")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("leftovers beside the target: %v", ents)
	}
}
