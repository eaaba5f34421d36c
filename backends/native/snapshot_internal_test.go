package native

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/ownertest"
)

// handOverBackend is a backend and a running busybox sandbox of it,
// removed at the end of t.
func handOverBackend(t *testing.T) (*Backend, *Sandbox) {
	t.Helper()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	b, err := New(Config{PullPolicy: PullNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	sb, err := b.Create(t.Context(), backend.Spec{Name: "handover", Image: dockertest.BusyboxImage, Command: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sb.Destroy(context.Background())
		b.PruneCaches(context.Background(), false) // the forks' image
	})
	return b, sb.(*Sandbox)
}

// listedInfo is sandbox id's entry in b.List.
func listedInfo(t *testing.T, b *Backend, id string) (backend.Info, bool) {
	t.Helper()
	infos, err := b.List(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(infos, func(i backend.Info) bool { return i.ID == id })
	if i < 0 {
		return backend.Info{}, false
	}
	return infos[i], true
}

// Forks are their maker's until Fork hands them over: made and running
// but not handed over, each is listed (and its Info says) as being
// created by its maker, which is what sbx gc reads: with the maker gone,
// a creation cut short. Forks Fork returned are listed as running, with
// no creator, and keep their names.
func TestForkHandOver(t *testing.T) {
	b, parent := handOverBackend(t)
	ctx := t.Context()
	dead := ownertest.Gone(t)
	forks, _, err := parent.makeForks(ctx, backend.ForkRequest{N: 2}, dead)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		t.Cleanup(func() { f.sb.Destroy(context.Background()) })
		c, err := f.sb.inspect(ctx)
		if err != nil || c.State == nil || !c.State.Running {
			t.Fatalf("fork %s made but not handed over does not run: %v", f.sb.id, err)
		}
		i, ok := listedInfo(t, b, f.sb.id)
		if !ok || i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != dead {
			t.Errorf("fork %s of a dead maker: listed %v, state %s, creator %q; want creating, by %s", f.sb.id, ok, i.State, i.Labels[backend.LabelCreator], dead)
		}
		if i, err := f.sb.Info(ctx); err != nil || i.State != backend.StateCreating || i.Labels[backend.LabelCreator] != dead {
			t.Errorf("Info of fork %s of a dead maker: state %s, creator %q (%v); want creating, by %s", f.sb.id, i.State, i.Labels[backend.LabelCreator], err, dead)
		}
	}

	handed, err := parent.Fork(ctx, backend.ForkRequest{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range handed {
		t.Cleanup(func() { f.Destroy(context.Background()) })
		i, ok := listedInfo(t, b, f.ID())
		if !ok || i.State != backend.StateRunning || i.Labels[backend.LabelCreator] != "" || i.Labels[labelMaker] != "" {
			t.Errorf("fork %s handed over: listed %v, state %s, labels %v; want running, no creator", f.ID(), ok, i.State, i.Labels)
		}
		c, err := f.(*Sandbox).inspect(ctx)
		if err != nil || strings.HasSuffix(c.Name, makingSuffix) {
			t.Errorf("fork %s handed over is named %q (%v)", f.ID(), c.Name, err)
		}
	}
}

// snapshotRefs lists b's snapshots by reference.
func snapshotRefs(t *testing.T, b *Backend) map[string]backend.Snapshot {
	t.Helper()
	sns, err := b.ListSnapshots(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]backend.Snapshot{}
	for _, sn := range sns {
		out[sn.Ref] = sn
	}
	return out
}

// A snapshot is its maker's until Snapshot returns it: committed but not
// handed over, it is listed by its making tag with its maker as
// LabelCreator (what sbx gc reads), and not by its reference. One handed
// over is listed by its reference with no creator. One whose maker was
// killed between tagging and untagging is handed over, and PruneCaches
// takes the making tag off.
func TestSnapshotHandOver(t *testing.T) {
	b, parent := handOverBackend(t)
	ctx := t.Context()
	cli := dockertest.Client(t)
	ref := "sandboxkit-test/handover:" + newID()
	dead := ownertest.Gone(t)
	sn, making, err := parent.makeSnapshot(ctx, backend.SnapshotRequest{Ref: ref}, dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.RemoveSnapshot(context.Background(), making) })
	if sn.Ref != ref || !isMakingTag(making) {
		t.Fatalf("makeSnapshot: ref %q, making tag %q", sn.Ref, making)
	}
	refs := snapshotRefs(t, b)
	if got, ok := refs[making]; !ok || got.Labels[backend.LabelCreator] != dead || got.Labels[backend.LabelSnapshotOf] != parent.id {
		t.Errorf("the snapshot of a dead maker: listed %v with labels %v; want its maker %s as creator", ok, got.Labels, dead)
	}
	if _, ok := refs[ref]; ok {
		t.Errorf("a snapshot not handed over is listed by its reference %s", ref)
	}
	if err := b.RemoveSnapshot(ctx, making); err != nil { // as sbx gc does
		t.Fatal(err)
	}
	if _, err := cli.ImageInspect(ctx, making); err == nil {
		t.Errorf("the image of a snapshot cut short is still there")
	}

	handed, err := parent.Snapshot(ctx, backend.SnapshotRequest{Ref: ref})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.RemoveSnapshot(context.Background(), handed.Ref) })
	refs = snapshotRefs(t, b)
	if got, ok := refs[ref]; !ok || got.Labels[backend.LabelCreator] != "" || got.Labels[labelMaker] != "" || handed.Labels[labelMaker] != "" {
		t.Errorf("the snapshot handed over: listed %v with labels %v (returned with %v); want no creator", ok, got.Labels, handed.Labels)
	}
	for r := range refs {
		if isMakingTag(r) && strings.Contains(r, parent.id) {
			t.Errorf("a making tag %s is left after Snapshot", r)
		}
	}

	// Killed after the tag, before the untag.
	ref2 := "sandboxkit-test/handover:" + newID()
	_, making2, err := parent.makeSnapshot(ctx, backend.SnapshotRequest{Ref: ref2}, dead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.RemoveSnapshot(context.Background(), ref2); b.RemoveSnapshot(context.Background(), making2) })
	if err := cli.ImageTag(ctx, making2, ref2); err != nil {
		t.Fatal(err)
	}
	refs = snapshotRefs(t, b)
	if got, ok := refs[ref2]; !ok || got.Labels[backend.LabelCreator] != "" {
		t.Errorf("a snapshot tagged but not untagged: listed %v with labels %v; want it, with no creator", ok, got.Labels)
	}
	if _, ok := refs[making2]; ok {
		t.Errorf("a snapshot tagged but not untagged is listed by its making tag too")
	}
	pruned, err := b.PruneCaches(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pruned, func(p string) bool { return strings.Contains(p, making2) }) {
		t.Errorf("PruneCaches named %v, want the making tag %s", pruned, making2)
	}
	img, err := cli.ImageInspect(ctx, ref2)
	if err != nil || slices.ContainsFunc(img.RepoTags, isMakingTag) {
		t.Errorf("after PruneCaches the snapshot has tags %v (%v), want %s alone", img.RepoTags, err, ref2)
	}

	// The tag call failed (its ctx cancelled) after the engine made the
	// tag: the caller is told the snapshot failed, so neither tag stays.
	ref3 := "sandboxkit-test/handover:" + newID()
	_, making3, err := parent.makeSnapshot(ctx, backend.SnapshotRequest{Ref: ref3}, owner.Self())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.RemoveSnapshot(context.Background(), ref3); b.RemoveSnapshot(context.Background(), making3) })
	if err := cli.ImageTag(ctx, making3, ref3); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.handOverSnapshot(cancelled, making3, ref3); err == nil {
		t.Fatal("a hand-over whose tag call failed succeeded")
	}
	for _, r := range []string{ref3, making3} {
		if _, err := cli.ImageInspect(ctx, r); err == nil {
			t.Errorf("a snapshot reported failed left its tag %s", r)
		}
	}
}
