package lite

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The folder a Snapshot fills before renaming it into place names its
// maker: PruneCaches (sbx gc) removes one whose maker is gone (a Snapshot
// killed on the way), and leaves one a live process fills and folders of
// other names.
func TestPruneSnapshotTemp(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	ctx := t.Context()
	if err := os.MkdirAll(b.images.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mine, err := snapshotTemp(b.images.dir)
	if err != nil {
		t.Fatal(err)
	}
	// No process 999999999 started 1 tick after boot: a gone process's.
	dead := filepath.Join(b.images.dir, snapshotTempPrefix+"999999999.1-123")
	other := filepath.Join(b.images.dir, snapshotTempPrefix+"123")
	for _, d := range []string{dead, other} {
		if err := os.MkdirAll(filepath.Join(d, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dead, "layer.tar"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := func(dryRun bool) []string {
		t.Helper()
		got, err := b.PruneCaches(ctx, dryRun)
		if err != nil {
			t.Fatal(err)
		}
		return slices.DeleteFunc(got, func(n string) bool { return !strings.Contains(n, snapshotTempPrefix) })
	}
	if got := names(true); len(got) != 1 || !strings.HasPrefix(got[0], dead) {
		t.Fatalf("PruneCaches(dry run) names %v, want %s alone", got, dead)
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("a dry run removed %s: %v", dead, err)
	}
	if got := names(false); len(got) != 1 || !strings.HasPrefix(got[0], dead) {
		t.Fatalf("PruneCaches names %v, want %s alone", got, dead)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dead, err)
	}
	for _, keep := range []string{mine, other} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}
