package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/ownertest"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Forks are their maker's until Fork hands them over: made, their files
// copied and their command running, but not handed over, each is listed
// as being created by this process (which is what sbx gc reads: with the
// maker gone, a creation cut short); Destroy removes them. Forks Fork
// returned are listed with no creator, and stay.
func TestForkHandOver(t *testing.T) {
	b, err := New(Config{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	psb, err := b.Create(ctx, backend.Spec{Name: "fork-handover", Command: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { psb.Destroy(context.Background()) })
	parent := psb.(*Sandbox)
	if err := os.WriteFile(filepath.Join(parent.dir, "work", "f"), []byte("parent"), 0o644); err != nil {
		t.Fatal(err)
	}

	forks, err := parent.makeForks(ctx, backend.ForkRequest{N: 2}, "0123456789ab")
	if err != nil {
		t.Fatal(err)
	}
	dead := ownertest.Gone(t)
	for _, f := range forks {
		m, err := f.meta()
		if err != nil {
			t.Fatal(err)
		}
		if data, err := os.ReadFile(filepath.Join(f.dir, "work", "f")); err != nil || string(data) != "parent" || !procfs.Alive(m.MainPID, m.MainStart) {
			t.Errorf("fork %s made but not handed over is not complete: f %q (%v), command running %v", f.id, data, err, procfs.Alive(m.MainPID, m.MainStart))
		}
		if i := ownertest.Listed(t, b, f.id); i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != owner.Self() {
			t.Errorf("fork %s made but not handed over: state %s, creator %q; want creating, by this process", f.id, i.State, i.Labels[backend.LabelCreator])
		}
		// This process stands for one killed before the handover.
		err = statedir.Update(b.dir, f.id, func(r *meta) error {
			r.Creator = dead
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i := ownertest.Listed(t, b, f.id); i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != dead {
			t.Errorf("fork %s of a dead maker: state %s, creator %q; want creating, by %s", f.id, i.State, i.Labels[backend.LabelCreator], dead)
		}
		if err := f.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(f.dir); !os.IsNotExist(err) || procfs.Alive(m.MainPID, m.MainStart) {
			t.Errorf("fork %s: its folder (%v) or its command is left", f.id, err)
		}
	}

	handed, err := parent.Fork(ctx, backend.ForkRequest{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range handed {
		t.Cleanup(func() { f.Destroy(context.Background()) })
		if i := ownertest.Listed(t, b, f.ID()); i.State != backend.StateRunning || i.Labels[backend.LabelCreator] != "" {
			t.Errorf("fork %s handed over: state %s, creator %q; want running, none", f.ID(), i.State, i.Labels[backend.LabelCreator])
		}
	}
}
