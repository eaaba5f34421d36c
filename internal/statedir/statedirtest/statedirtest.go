// Package statedirtest checks that a backend keeping its records with
// package statedir follows its lifecycle protocol: half-made and
// half-removed sandboxes stay visible, and Destroy finishes them.
package statedirtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Run checks b, whose records are under stateDir; spec is a Spec it can
// create.
func Run(t *testing.T, b backend.Backend, stateDir string, spec backend.Spec) {
	ctx := t.Context()
	find := func(id string) (backend.Info, bool) {
		t.Helper()
		infos, err := b.List(ctx, backend.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range infos {
			if i.ID == id {
				return i, true
			}
		}
		return backend.Info{}, false
	}
	finish := func(id string) {
		t.Helper()
		sb, err := b.Get(ctx, id)
		if err != nil {
			t.Fatalf("Get of a half-done sandbox: %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("Destroy of a half-done sandbox: %v", err)
		}
		if _, ok := find(id); ok {
			t.Fatal("still listed after Destroy")
		}
		if _, err := os.Stat(filepath.Join(stateDir, id)); !os.IsNotExist(err) {
			t.Fatalf("its folder is still there: %v", err)
		}
	}
	editRecord := func(id string, edit func(map[string]any)) {
		t.Helper()
		dir := filepath.Join(stateDir, id)
		data, err := os.ReadFile(filepath.Join(dir, statedir.MetaFile))
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatal(err)
		}
		edit(rec)
		if err := statedir.WriteMeta(dir, rec); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("removal cut short", func(t *testing.T) {
		sb, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		// As a Destroy killed after its first step leaves it.
		if err := statedir.MarkRemoving(filepath.Join(stateDir, sb.ID())); err != nil {
			t.Fatal(err)
		}
		if i, ok := find(sb.ID()); !ok || i.State != backend.StateRemoving {
			t.Fatalf("listed %v with state %q, want removing", ok, i.State)
		}
		finish(sb.ID())
	})

	t.Run("folder without a record", func(t *testing.T) {
		id, err := statedir.NewID()
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(stateDir, id)
		if err := os.MkdirAll(filepath.Join(dir, "work", "left"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, ok := find(id); ok {
			t.Fatal("a young folder without a record is listed: it may be a Create in progress")
		}
		old := time.Now().Add(-2 * statedir.HalfGrace)
		if err := os.Chtimes(dir, old, old); err != nil {
			t.Fatal(err)
		}
		if i, ok := find(id); !ok || i.State != backend.StateRemoving {
			t.Fatalf("listed %v with state %q, want removing", ok, i.State)
		}
		finish(id)
	})

	t.Run("creation cut short", func(t *testing.T) {
		sb, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Destroy(t.Context()) })
		// A creator that has exited.
		cmd := exec.Command("true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		gone, err := owner.Of(cmd.Process.Pid)
		cmd.Wait()
		if err != nil {
			t.Skipf("the creator exited before it could be named: %v", err)
		}
		editRecord(sb.ID(), func(rec map[string]any) { rec["creator"] = gone })
		i, ok := find(sb.ID())
		if !ok || i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != gone {
			t.Fatalf("listed %v, state %q, creator %q: want creating by %s", ok, i.State, i.Labels[backend.LabelCreator], gone)
		}
		if alive, known := owner.Alive(gone); !known || alive {
			t.Fatalf("owner.Alive(%s) = %v, %v: a reaper could not tell", gone, alive, known)
		}
		finish(sb.ID())
	})

	t.Run("complete sandbox has no creator", func(t *testing.T) {
		sb, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(t.Context())
		i, ok := find(sb.ID())
		if !ok || i.State == backend.StateCreating || i.Labels[backend.LabelCreator] != "" {
			t.Fatalf("listed %v, state %q, creator %q", ok, i.State, i.Labels[backend.LabelCreator])
		}
	})
}
