package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Files the snapshot and fork cases write, relative to the working
// directory (which differs between sandboxes on backends without images).
const snapshotFiles = `set -e
mkdir -p bt-snap/dir/sub bt-snap/opq
printf 'snapshot contents\n' > bt-snap/a.txt
chmod 640 bt-snap/a.txt
printf '#!/bin/sh\necho ran\n' > bt-snap/run.sh
chmod 755 bt-snap/run.sh
chmod 750 bt-snap/dir
ln -s a.txt bt-snap/link
ln -s /bt-nonexistent/target bt-snap/dangling
printf deep > bt-snap/dir/sub/deep
printf old > bt-snap/opq/old1
printf old > bt-snap/opq/old2
printf gone > bt-snap/gone.txt
rm bt-snap/gone.txt
`

// describeSnapFiles prints what snapshotFiles made, as a sandbox sees it.
const describeSnapFiles = `cd bt-snap || exit 1
cat a.txt
stat -c '%n %a' a.txt run.sh dir
readlink link
cat link
readlink dangling
cat dir/sub/deep; echo
ls opq | tr '\n' ' '; echo
for f in gone.txt later.txt; do if [ -e $f ]; then echo "$f present"; else echo "$f absent"; fi; done
`

const wantSnapFiles = "snapshot contents\n" +
	"a.txt 640\nrun.sh 755\ndir 750\n" +
	"a.txt\nsnapshot contents\n/bt-nonexistent/target\ndeep\n" +
	"old1 old2 \n" +
	"gone.txt absent\nlater.txt absent\n"

// testSnapshotter snapshots a sandbox, starts one from the snapshot and
// checks that contents, modes, symlinks and deletions came along and that
// later changes to the parent did not; then, in that second sandbox,
// deletes a file and replaces a folder of its image (the snapshot),
// snapshots it in turn, and checks the deletions hold in a third.
func (s *suite) testSnapshotter(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Snapshotter](sb); !ok {
		t.Skip("the sandbox is not a Snapshotter")
	}
	parent := s.create(t, s.spec("snapshot"))
	ctx := testCtx(t)
	mustExec(t, ctx, parent, backend.ExecRequest{Shell: snapshotFiles})
	checkOutput(t, "the parent's files", mustExec(t, ctx, parent, backend.ExecRequest{Shell: describeSnapFiles}).Stdout, wantSnapFiles)

	first := s.snapshot(t, ctx, parent, "1")
	// After the snapshot: not in it.
	mustExec(t, ctx, parent, backend.ExecRequest{Shell: "echo later > bt-snap/later.txt && echo changed > bt-snap/a.txt"})

	spec := s.spec("from-snapshot")
	spec.Image = first.Ref
	child := s.create(t, spec)
	res := mustExec(t, ctx, child, backend.ExecRequest{Shell: describeSnapFiles})
	checkOutput(t, "the files in a sandbox made from the snapshot", res.Stdout, wantSnapFiles)
	res = mustExec(t, ctx, child, backend.ExecRequest{Shell: "./bt-snap/run.sh"})
	checkOutput(t, "an executable from the snapshot", res.Stdout, "ran\n")

	// The snapshot is this sandbox's image: delete one of its files,
	// replace one of its folders (an opaque folder to overlayfs), and
	// keep both through a second snapshot.
	mustExec(t, ctx, child, backend.ExecRequest{Shell: "set -e; rm bt-snap/a.txt; rm -r bt-snap/opq; mkdir bt-snap/opq; echo new > bt-snap/opq/new; rm bt-snap/link"})
	second := s.snapshot(t, ctx, child, "2")
	spec = s.spec("from-snapshot-2")
	spec.Image = second.Ref
	grandchild := s.create(t, spec)
	res = mustExec(t, ctx, grandchild, backend.ExecRequest{Shell: `cd bt-snap || exit 1
for f in a.txt link opq/old1 opq/old2; do if [ -e $f ] || [ -L $f ]; then echo "$f present"; fi; done
ls opq; cat opq/new dir/sub/deep; echo`})
	checkOutput(t, "a sandbox made from a snapshot of a sandbox that deleted files of its image", res.Stdout, "new\nnew\ndeep\n")
}

// snapshot takes a snapshot of sb, checks what Snapshot says of it, and
// removes it at the end of t (after the sandboxes made from it).
func (s *suite) snapshot(t *testing.T, ctx context.Context, sb backend.Sandbox, n string) backend.Snapshot {
	t.Helper()
	sn, _ := backend.As[backend.Snapshotter](sb)
	ref := "sandboxkit-backendtest/snapshot-" + n + ":" + s.runID
	got, err := sn.Snapshot(ctx, backend.SnapshotRequest{Ref: ref, TTL: defaultTTL, Labels: map[string]string{labelRun: s.runID}})
	if err != nil {
		t.Fatalf("Snapshot(%q): %v", ref, err)
	}
	if got.Ref == "" {
		t.Fatalf("Snapshot(%q) returned no reference", ref)
	}
	t.Cleanup(func() { s.removeSnapshot(t, got.Ref) })
	if got.Labels[backend.LabelSnapshotOf] != sb.ID() || got.Labels[labelRun] != s.runID {
		t.Errorf("Snapshot(%q).Labels = %v, want %s=%s (and the request's %s)", ref, got.Labels, backend.LabelSnapshotOf, sb.ID(), labelRun)
	}
	if got.ExpiresAt.IsZero() || got.CreatedAt.IsZero() {
		t.Errorf("Snapshot(%q): CreatedAt %v, ExpiresAt %v; want both set (a TTL was asked for)", ref, got.CreatedAt, got.ExpiresAt)
	}
	if m, ok := backend.AsBackend[backend.SnapshotManager](s.b); ok {
		list, err := m.ListSnapshots(ctx, backend.Filter{Labels: map[string]string{labelRun: s.runID}})
		if err != nil {
			t.Fatalf("ListSnapshots: %v", err)
		}
		if !slices.ContainsFunc(list, func(x backend.Snapshot) bool { return x.Ref == got.Ref }) {
			t.Errorf("ListSnapshots by the run's label = %v, want %s in it", list, got.Ref)
		}
	}
	return got
}

// removeSnapshot removes a snapshot the case made: through the backend's
// SnapshotManager, else WithImageRemover's function, else it is left
// (labelled with its TTL for sbx gc) and logged.
func (s *suite) removeSnapshot(t *testing.T, ref string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), destroyTimeout)
	defer cancel()
	m, ok := backend.AsBackend[backend.SnapshotManager](s.b)
	switch {
	case ok:
		if err := m.RemoveSnapshot(ctx, ref); err != nil {
			t.Errorf("cleanup: RemoveSnapshot(%s): %v", ref, err)
			return
		}
		if err := m.RemoveSnapshot(ctx, ref); err != nil {
			t.Errorf("cleanup: RemoveSnapshot(%s) of a removed snapshot: %v, want nil", ref, err)
		}
		list, err := m.ListSnapshots(ctx, backend.Filter{})
		if err != nil {
			t.Errorf("cleanup: ListSnapshots: %v", err)
		}
		for _, x := range list {
			if x.Ref == ref {
				t.Errorf("cleanup: ListSnapshots after RemoveSnapshot(%s) still lists it", ref)
			}
		}
	case s.cfg.removeImage != nil:
		if err := s.cfg.removeImage(ctx, ref); err != nil {
			t.Errorf("cleanup: removing the snapshot %s: %v", ref, err)
		}
	default:
		t.Logf("the snapshot %s is left behind for sbx gc (its TTL is %s; Run has no WithImageRemover)", ref, defaultTTL)
	}
}

// testForker forks a sandbox three ways and checks that each fork starts
// with the parent's files and that no write, in a fork or in the parent,
// shows anywhere else.
func (s *suite) testForker(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Forker](sb); !ok {
		t.Skip("the sandbox is not a Forker")
	}
	parent := s.create(t, s.spec("fork"))
	f, _ := backend.As[backend.Forker](parent)
	ctx := testCtx(t)
	mustExec(t, ctx, parent, backend.ExecRequest{Shell: snapshotFiles + "echo parent > bt-snap/shared.txt\n"})

	_, err := f.Fork(ctx, backend.ForkRequest{N: 0})
	if errors.Is(err, errors.ErrUnsupported) {
		// A wrapper (sbxd's client) over a sandbox that cannot fork.
		t.Skipf("Fork: %v", err)
	}
	checkErr(t, "Fork of 0 sandboxes", err, backend.ErrInvalidConfig)

	// Made is told the forks' IDs before they are handed over; an error
	// from it drops them and fails Fork with it.
	errTold := errors.New("backendtest: the caller could tell no one")
	var dropped []string
	_, err = f.Fork(ctx, backend.ForkRequest{N: 2, Made: func(ids []string) error { dropped = ids; return errTold }})
	if !errors.Is(err, errTold) {
		t.Errorf("Fork whose Made fails: %v, want its error", err)
	}
	if len(dropped) != 2 {
		t.Errorf("Made was told %q, want 2 IDs", dropped)
	}
	for _, id := range dropped {
		if _, err := s.b.Get(ctx, id); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("Get(%s), a fork whose Made failed: %v, want ErrNotFound", id, err)
		}
	}

	const n = 3
	var told []string
	forks, err := f.Fork(ctx, backend.ForkRequest{N: n, Labels: map[string]string{"backendtest.fork": "yes"},
		Made: func(ids []string) error { told = ids; return nil }})
	if err != nil {
		t.Fatalf("Fork(%d): %v", n, err)
	}
	for _, fk := range forks {
		destroyAtCleanup(t, fk)
	}
	if len(forks) != n {
		t.Fatalf("Fork(%d) made %d sandboxes", n, len(forks))
	}
	for i, fk := range forks {
		if i >= len(told) || told[i] != fk.ID() {
			t.Errorf("Made was told %q, Fork returned fork %d as %s", told, i, fk.ID())
		}
	}
	ids := []string{parent.ID()}
	for i, fk := range forks {
		if slices.Contains(ids, fk.ID()) {
			t.Fatalf("fork %d has ID %s, which the parent or another fork has", i, fk.ID())
		}
		ids = append(ids, fk.ID())
		info, err := fk.Info(ctx)
		if err != nil {
			t.Fatalf("Info of fork %d: %v", i, err)
		}
		if info.Labels[backend.LabelForkOf] != parent.ID() || info.Labels["backendtest.fork"] != "yes" || info.Labels[labelRun] != s.runID {
			t.Errorf("fork %d's labels = %v, want %s=%s, the request's and the parent's own", i, info.Labels, backend.LabelForkOf, parent.ID())
		}
		if info.Name != "fork" || info.Session != s.runID {
			t.Errorf("fork %d: name %q, session %q; want the parent's", i, info.Name, info.Session)
		}
	}
	listed, err := s.b.List(ctx, backend.Filter{Labels: map[string]string{backend.LabelForkOf: parent.ID()}})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(listed) != n {
		t.Errorf("List by %s=%s found %d sandboxes, want %d", backend.LabelForkOf, parent.ID(), len(listed), n)
	}

	for i, fk := range forks {
		res := mustExec(t, ctx, fk, backend.ExecRequest{Shell: describeSnapFiles})
		checkOutput(t, fmt.Sprintf("fork %d's files", i), res.Stdout, wantSnapFiles)
		mustExec(t, ctx, fk, backend.ExecRequest{Shell: fmt.Sprintf("echo fork%d > bt-snap/own.txt && echo fork%d >> bt-snap/shared.txt && rm bt-snap/run.sh", i, i)})
	}
	mustExec(t, ctx, parent, backend.ExecRequest{Shell: "echo parent-only > bt-snap/parent-only.txt && echo parent2 > bt-snap/shared.txt && chmod 600 bt-snap/a.txt"})

	const show = `cd bt-snap; cat shared.txt; for f in own.txt parent-only.txt run.sh; do [ -e $f ] && { printf '%s: ' $f; cat $f; }; done; stat -c '%a' a.txt`
	res := mustExec(t, ctx, parent, backend.ExecRequest{Shell: show})
	checkOutput(t, "the parent after its forks wrote", res.Stdout, "parent2\nparent-only.txt: parent-only\nrun.sh: #!/bin/sh\necho ran\n600\n")
	for i, fk := range forks {
		res := mustExec(t, ctx, fk, backend.ExecRequest{Shell: show})
		want := fmt.Sprintf("parent\nfork%d\nown.txt: fork%d\n640\n", i, i)
		checkOutput(t, fmt.Sprintf("fork %d after the parent and the other forks wrote", i), res.Stdout, want)
	}
	if t.Failed() {
		return
	}
	// Destroying the parent leaves the forks whole.
	if err := parent.Destroy(ctx); err != nil {
		t.Fatalf("Destroy of the parent: %v", err)
	}
	res = mustExec(t, ctx, forks[0], backend.ExecRequest{Shell: "cat bt-snap/own.txt bt-snap/dir/sub/deep"})
	if !strings.HasPrefix(string(res.Stdout), "fork0\ndeep") {
		t.Errorf("fork 0 after the parent was destroyed: %q, want its files", res.Stdout)
	}
}
