package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestIDsAndRecords(t *testing.T) {
	root := t.TempDir()
	id, err := NewID()
	if err != nil || !ValidID(id) {
		t.Fatalf("NewID = %q, %v: not a valid ID", id, err)
	}
	for _, bad := range []string{"", "..", "../x/../../y", "zzzzzzzzzzzz", id + "0"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
	dir := filepath.Join(root, id)
	type rec struct{ Name string }
	var got rec
	if err := ReadMeta(dir, &got); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("ReadMeta of a missing record = %v, want ErrNotFound", err)
	}
	if err := WriteMeta(dir, rec{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	if err := ReadMeta(dir, &got); err != nil || got.Name != "main" {
		t.Fatalf("ReadMeta = %+v, %v", got, err)
	}
	os.Mkdir(filepath.Join(root, "not-an-id"), 0o755)
	ids, err := IDs(root)
	if err != nil || !slices.Equal(ids, []string{id}) {
		t.Errorf("IDs = %v, %v; want [%s] (folders that are not IDs left out)", ids, err, id)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(leftovers) != 0 {
		t.Errorf("atomic write left temporary files: %v", leftovers)
	}
}

// List returns the matching records sorted by ID and skips ones it cannot
// read.
func TestList(t *testing.T) {
	type rec struct{ ID, Name string }
	info := func(r *rec) backend.Info { return backend.Info{ID: r.ID, Name: r.Name} }
	root := t.TempDir()
	for _, r := range []rec{{"bbbbbbbbbbbb", "web"}, {"aaaaaaaaaaaa", "web"}, {"cccccccccccc", "db"}} {
		if err := WriteMeta(filepath.Join(root, r.ID), r); err != nil {
			t.Fatal(err)
		}
	}
	damaged := filepath.Join(root, "dddddddddddd")
	if err := os.MkdirAll(damaged, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, MetaFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := List(root, backend.Filter{Name: "web"}, info)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "aaaaaaaaaaaa" || got[1].ID != "bbbbbbbbbbbb" {
		t.Errorf("List(name=web) = %+v", got)
	}
	all, err := List(root, backend.Filter{}, info)
	if err != nil || len(all) != 3 {
		t.Errorf("List(all) = %+v, %v; want the 3 readable records", all, err)
	}
}
