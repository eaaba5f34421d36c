package statedir

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type batchRec struct {
	Lifecycle
	ID string `json:"id"`
}

// writeBatch writes n records being made by creator in batch.
func writeBatch(t *testing.T, root, creator, batch string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		id, err := NewID()
		if err != nil {
			t.Fatal(err)
		}
		if err := WriteMeta(filepath.Join(root, id), &batchRec{Lifecycle: Lifecycle{Creator: creator, Batch: batch}, ID: id}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func creators(t *testing.T, root string, ids []string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		r, err := Read[batchRec](filepath.Join(root, id))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Creator)
	}
	return out
}

// A batch is being made until its mark exists, and complete, every record
// of it, from then on: a HandOver killed after it rewrote some records
// leaves none of them being made. PruneBatches removes a mark only once no
// record names its batch.
func TestHandOverAllAtOnce(t *testing.T) {
	root := t.TempDir()
	batch, err := NewBatch()
	if err != nil {
		t.Fatal(err)
	}
	ids := writeBatch(t, root, "maker", batch, 3)
	other := writeBatch(t, root, "maker", "", 1) // made alone, not handed over
	if got := creators(t, root, ids); !slices.Equal(got, []string{"maker", "maker", "maker"}) {
		t.Fatalf("before the hand-over, creators %q; want all the maker", got)
	}

	// A HandOver killed after the mark and one record.
	if err := WriteFileAtomic(handedMark(root, batch), nil); err != nil {
		t.Fatal(err)
	}
	if err := Update(root, ids[0], func(*batchRec) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := creators(t, root, ids); !slices.Equal(got, []string{"", "", ""}) {
		t.Errorf("after a hand-over cut short past its mark, creators %q; want none", got)
	}
	if got := creators(t, root, other); got[0] != "maker" {
		t.Errorf("a record of no batch lost its creator: %q", got)
	}
	if names, err := PruneBatches(root, false); err != nil || len(names) != 0 {
		t.Errorf("PruneBatches removed %q (%v) while records name the batch", names, err)
	}
	if _, err := os.Stat(handedMark(root, batch)); err != nil {
		t.Fatalf("the mark went while records name it: %v", err)
	}

	// Finished (HandOver is idempotent): the records no longer name it.
	if err := HandOver[batchRec](root, batch, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(handedMark(root, batch)); !os.IsNotExist(err) {
		t.Errorf("HandOver left its mark: %v", err)
	}
	for _, id := range ids {
		// As written, not as Read settles it.
		data, err := os.ReadFile(filepath.Join(root, id, MetaFile))
		if err != nil || strings.Contains(string(data), batch) || strings.Contains(string(data), "maker") {
			t.Fatalf("record %s after HandOver still names its batch or creator: %s (%v)", id, data, err)
		}
	}
	// A leftover mark (HandOver killed before its last step) goes with gc.
	if err := WriteFileAtomic(handedMark(root, batch), nil); err != nil {
		t.Fatal(err)
	}
	names, err := PruneBatches(root, true)
	if err != nil || !slices.Equal(names, []string{"hand-over mark " + batch}) {
		t.Errorf("dry run: %q, %v; want the mark named", names, err)
	}
	if _, err := os.Stat(handedMark(root, batch)); err != nil {
		t.Errorf("a dry run removed the mark: %v", err)
	}
	if _, err := PruneBatches(root, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(handedMark(root, batch)); !os.IsNotExist(err) {
		t.Errorf("PruneBatches left an unnamed mark: %v", err)
	}
	if got, err := IDs(root); err != nil || len(got) != 4 {
		t.Errorf("IDs = %q, %v; want the four records", got, err)
	}
	// Nothing but the sandboxes' folders is left (a state folder a
	// backend's owner may check is empty once its sandboxes are gone).
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if !e.IsDir() || !ValidID(e.Name()) {
			t.Errorf("left in the state folder: %s", e.Name())
		}
	}

	// One record alone needs no batch; a malformed one is refused and
	// changes nothing.
	if err := HandOver[batchRec](root, "", other); err != nil || creators(t, root, other)[0] != "" {
		t.Errorf("HandOver of one record: %v, creator %q", err, creators(t, root, other))
	}
	bad := writeBatch(t, root, "maker", "../../x", 2)
	if err := HandOver[batchRec](root, "../../x", bad); err == nil {
		t.Error("HandOver took a batch token that is a path")
	}
	if got := creators(t, root, bad); got[0] != "maker" || got[1] != "maker" {
		t.Errorf("a refused HandOver changed records: %q", got)
	}
}
