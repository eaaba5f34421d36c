package lite

import (
	"context"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/ownertest"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// Forks are their maker's until Fork hands them over: made and running
// but not handed over, each is listed as being created by this process
// (complete forks too, which is what sbx gc reads: with the maker gone,
// a creation cut short); Destroy removes them. Forks Fork returned are
// listed as running, with no creator, and stay.
func TestForkHandOver(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	b.noForkStandby = true
	parent := create(t, b, e.spec("fork-handover"))
	ctx := t.Context()

	plans, err := parent.makeForks(ctx, backend.ForkRequest{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	dead := ownertest.Gone(t)
	for _, p := range plans {
		if !procfs.Alive(p.m.InitPID, p.m.InitStart) {
			t.Errorf("fork %s made but not handed over does not run", p.sb.id)
		}
		if i := ownertest.Listed(t, b, p.sb.id); i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != owner.Self() {
			t.Errorf("fork %s made but not handed over: state %s, creator %q; want creating, by this process", p.sb.id, i.State, i.Labels[backend.LabelCreator])
		}
		// This process stands for one killed before the handover.
		if err := b.update(p.m, func(m *meta) { m.Creator = dead }); err != nil {
			t.Fatal(err)
		}
		if i := ownertest.Listed(t, b, p.sb.id); i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != dead {
			t.Errorf("fork %s of a dead maker: state %s, creator %q; want creating, by %s", p.sb.id, i.State, i.Labels[backend.LabelCreator], dead)
		}
		if err := p.sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		gone(t, b, p.sb.id)
	}

	forks, err := parent.Fork(ctx, backend.ForkRequest{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		t.Cleanup(func() { f.Destroy(context.Background()) })
		if i := ownertest.Listed(t, b, f.ID()); i.State != backend.StateRunning || i.Labels[backend.LabelCreator] != "" {
			t.Errorf("fork %s handed over: state %s, creator %q; want running, none", f.ID(), i.State, i.Labels[backend.LabelCreator])
		}
	}
}
