package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// A snapshot's archive is written under a name naming its maker and
// renamed into place whole: PruneCaches (sbx gc) removes what a Snapshot
// killed on the way left at once, leaves what a live process writes, and
// removes an archive no record names once statedir.HalfGrace old (younger,
// it may be waiting for its record). A Snapshot leaves no temporary.
func TestPruneSnapshotLeftovers(t *testing.T) {
	b, err := New(Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sb, err := b.Create(ctx, backend.Spec{Name: "snap-leftovers"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	snap, err := sb.(*Sandbox).Snapshot(ctx, backend.SnapshotRequest{Ref: "kept"})
	if err != nil {
		t.Fatal(err)
	}
	dir := b.snapshotDir()
	entries := func() []string {
		t.Helper()
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	for _, e := range entries() {
		if strings.HasPrefix(e, backendkit.SnapshotTempPrefix) {
			t.Fatalf("Snapshot left its temporary %s", e)
		}
	}

	write := func(name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine, err := os.CreateTemp(dir, backendkit.SnapshotTempPattern())
	if err != nil {
		t.Fatal(err)
	}
	mine.Close()
	// No process 999999999 started 1 tick after boot: a gone process's.
	dead := write(backendkit.SnapshotTempPrefix + "999999999.1-123")
	young := write("0123456789ab.tar")
	old := write("ba9876543210.tar")
	then := time.Now().Add(-statedir.HalfGrace - time.Second)
	if err := os.Chtimes(old, then, then); err != nil {
		t.Fatal(err)
	}

	pruned := func(dryRun bool) []string {
		t.Helper()
		got, err := b.PruneCaches(ctx, dryRun)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	want := []string{dead + " (a snapshot cut short)", old}
	slices.Sort(want)
	if got := pruned(true); !slices.Equal(got, want) {
		t.Fatalf("PruneCaches(dry run) = %v, want %v", got, want)
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("a dry run removed %s: %v", dead, err)
	}
	if got := pruned(false); !slices.Equal(got, want) {
		t.Fatalf("PruneCaches = %v, want %v", got, want)
	}
	for _, gone := range []string{dead, old} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", gone, err)
		}
	}
	for _, keep := range []string{mine.Name(), young} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	if got, err := b.ListSnapshots(ctx, backend.Filter{}); err != nil || len(got) != 1 || got[0].Ref != snap.Ref {
		t.Errorf("snapshots after the prune: %v (%v), want %s alone", got, err, snap.Ref)
	}
	r, err := b.names().Read("kept")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, r.Key+".tar")); err != nil {
		t.Errorf("the snapshot's archive: %v", err)
	}
}
