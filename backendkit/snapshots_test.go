package backendkit_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
)

// Names are any string (the file is named by their hash), a missing name
// is ErrNotFound naming the reference, junk in the folder is passed over,
// and List filters by the backend's labels.
func TestSnapshotNames(t *testing.T) {
	d := backendkit.SnapshotNames(filepath.Join(t.TempDir(), "snapshots"))
	if _, err := d.Read("none"); !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), `"snapshot:none"`) {
		t.Fatalf("Read of a missing name: %v", err)
	}
	if all, err := d.All(); err != nil || len(all) != 0 {
		t.Fatalf("All of a folder not made yet: %v %v", all, err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, name := range []string{"a/../b", "with\nnewline", "plain"} {
		r := backendkit.NewSnapshotRecord("lite", "sbx1", "s1", name, "k"+name, now, backend.SnapshotRequest{Labels: map[string]string{"n": name, backend.LabelBackend: "forged"}, TTL: time.Duration(i) * time.Hour})
		if err := d.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(string(d), "junk.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := d.Read("with\nnewline")
	if err != nil || r.Key != "kwith\nnewline" || r.Labels[backend.LabelBackend] != "lite" || r.Labels[backend.LabelSnapshotOf] != "sbx1" ||
		r.Labels[backend.LabelSession] != "s1" || !r.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("Read = %+v, %v", r, err)
	}
	if s := r.Snapshot(); s.Ref != "snapshot:with\nnewline" || backendkit.SnapshotName(s.Ref) != "with\nnewline" {
		t.Fatalf("Snapshot() = %+v", s)
	}
	list, err := d.List("lite", backend.Filter{Labels: map[string]string{"n": "plain"}})
	if err != nil || len(list) != 1 || list[0].Ref != "snapshot:plain" || !list[0].ExpiresAt.Equal(now.Add(2*time.Hour)) {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if err := d.Remove("plain"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("plain"); err != nil {
		t.Fatalf("removing a removed name: %v", err)
	}
	if all, err := d.All(); err != nil || len(all) != 2 {
		t.Fatalf("All after a removal = %d records, %v", len(all), err)
	}
}
