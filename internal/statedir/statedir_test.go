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
