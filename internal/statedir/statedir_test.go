package statedir

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

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
	if _, err := Read[rec](dir); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Read of a missing record = %v, want ErrNotFound", err)
	}
	if err := WriteMeta(dir, rec{Name: "main"}); err != nil {
		t.Fatal(err)
	}
	if got, err := Read[rec](dir); err != nil || got.Name != "main" {
		t.Fatalf("Read = %+v, %v", got, err)
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
	got, err := List(root, "test", backend.Filter{Name: "web"}, info)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != "aaaaaaaaaaaa" || got[1].ID != "bbbbbbbbbbbb" {
		t.Errorf("List(name=web) = %+v", got)
	}
	all, err := List(root, "test", backend.Filter{}, info)
	if err != nil || len(all) != 3 {
		t.Errorf("List(all) = %+v, %v; want the 3 readable records", all, err)
	}
	var op *backend.OpError
	if _, err := List(filepath.Join(root, "missing"), "test", backend.Filter{}, info); !errors.As(err, &op) || op.Op != "list" || op.Backend != "test" {
		t.Errorf("List of a missing state dir = %v, want an *OpError naming the backend", err)
	}
}

// Get finds a sandbox's folder by ID; a bad ID, a missing or damaged
// record is an error naming the backend and the sandbox.
func TestGet(t *testing.T) {
	type rec struct{ ID string }
	root := t.TempDir()
	id := "aaaaaaaaaaaa"
	if err := WriteMeta(filepath.Join(root, id), rec{id}); err != nil {
		t.Fatal(err)
	}
	dir, err := Get[rec](root, "test", id)
	if err != nil || dir != filepath.Join(root, id) {
		t.Fatalf("Get = %q, %v", dir, err)
	}
	damaged := filepath.Join(root, "dddddddddddd")
	if err := os.MkdirAll(damaged, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(damaged, MetaFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../" + id, "bbbbbbbbbbbb", "dddddddddddd"} {
		_, err := Get[rec](root, "test", bad)
		var op *backend.OpError
		if !errors.As(err, &op) || op.Op != "get" || op.Backend != "test" || op.Sandbox != bad {
			t.Errorf("Get(%q) = %v, want an *OpError for the sandbox", bad, err)
		}
		if notFound := bad != "dddddddddddd"; errors.Is(err, backend.ErrNotFound) != notFound {
			t.Errorf("Get(%q) = %v; ErrNotFound: want %v", bad, err, notFound)
		}
	}
}

// Labels adds sandboxkit's labels to the sandbox's own, leaving out the
// unset ones, and does not change the record's map.
func TestLabels(t *testing.T) {
	own := map[string]string{"team": "a", backend.LabelName: "stale"}
	exp := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	got := Labels(own, backend.Info{ID: "aaaaaaaaaaaa", Backend: "test", Name: "main", Owner: "me", ExpiresAt: exp})
	want := map[string]string{
		"team": "a", backend.LabelID: "aaaaaaaaaaaa", backend.LabelBackend: "test", backend.LabelName: "main",
		backend.LabelOwner: "me", backend.LabelExpiresAt: "2026-01-02T02:04:05Z",
	}
	if !maps.Equal(got, want) {
		t.Errorf("Labels = %v, want %v", got, want)
	}
	if own[backend.LabelName] != "stale" || len(own) != 2 {
		t.Errorf("Labels changed its argument: %v", own)
	}
	if l := Labels(nil, backend.Info{ID: "x", Backend: "test"}); len(l) != 2 {
		t.Errorf("Labels(nil, bare info) = %v, want only the ID and backend", l)
	}
}
