package lite

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// forkWithStandby makes a sandbox, forks it once (destroyed at the end of
// the test) and waits for the container made ahead for its next fork,
// whose ID it returns.
func forkWithStandby(t *testing.T, b *Backend, spec backend.Spec) (*Sandbox, string) {
	t.Helper()
	parent := create(t, b, spec)
	if id := recordOf(t, parent).ForkStandby; id != "" {
		t.Fatalf("a container made ahead (%s) before any fork", id)
	}
	forks, err := parent.Fork(t.Context(), backend.ForkRequest{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forks[0].Destroy(context.Background()) })
	b.waitBackground()
	standby := recordOf(t, parent).ForkStandby
	if standby == "" {
		t.Fatal("no container was made ahead for the next fork")
	}
	return parent, standby
}

func listed(t *testing.T, b *Backend, id string) bool {
	t.Helper()
	infos, err := b.List(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(infos, func(i backend.Info) bool { return i.ID == id })
}

// gone checks that sandbox id's folder and mounts are gone.
func gone(t *testing.T, b *Backend, id string) {
	t.Helper()
	dir := filepath.Join(b.dir, id)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v)", dir, err)
	}
	if left, _ := mountsUnder(dir); len(left) > 0 {
		t.Errorf("mounts left: %v", left)
	}
}

// The container made ahead is no sandbox of List's until a fork takes it;
// the fork then is an ordinary one, sees what the parent wrote after the
// container was made, and writes on its own; the next one is made; and
// destroying the parent destroys it.
func TestForkStandby(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	parent, standby := forkWithStandby(t, b, e.spec("standby"))
	ctx := t.Context()
	if listed(t, b, standby) {
		t.Errorf("List shows the container made ahead, %s", standby)
	}
	if res, err := parent.Exec(ctx, backend.ExecRequest{Shell: "echo later > /later; rm /bin/true"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("changing the parent: %v %+v", err, res)
	}
	forks, err := parent.Fork(ctx, backend.ForkRequest{N: 1, Labels: map[string]string{"task": "t1"}})
	if err != nil {
		t.Fatal(err)
	}
	fk := forks[0]
	t.Cleanup(func() { fk.Destroy(context.Background()) })
	if fk.ID() != standby {
		t.Fatalf("the fork is %s, not the container made ahead (%s)", fk.ID(), standby)
	}
	res, err := fk.Exec(ctx, backend.ExecRequest{Shell: "cat /later; hostname; [ ! -e /bin/true ] && echo no-true; echo mine > /mine"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in the fork: %v %+v", err, res)
	}
	if want := "later\n" + fk.ID() + "\nno-true\n"; string(res.Stdout) != want {
		t.Errorf("the fork says %q, want %q", res.Stdout, want)
	}
	if res, _ := parent.Exec(ctx, backend.ExecRequest{Shell: "cat /mine"}); res.ExitCode == 0 {
		t.Error("the parent sees the fork's file")
	}
	info, err := fk.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != backend.StateRunning || info.Labels["task"] != "t1" || info.Labels[backend.LabelForkOf] != parent.ID() || info.Labels[labelStandbyFor] != "" {
		t.Errorf("the fork's info: %+v", info)
	}
	if !listed(t, b, fk.ID()) {
		t.Error("List leaves the fork out")
	}

	b.waitBackground()
	next := recordOf(t, parent).ForkStandby
	if next == "" || next == standby {
		t.Fatalf("the next container made ahead is %q", next)
	}
	if err := parent.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	gone(t, b, next)
}

// sbx gc (PruneCaches) removes a container made ahead that no sandbox
// names (its taker was killed), but not one a live process is making.
func TestForkStandbyPrune(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	parent, standby := forkWithStandby(t, b, e.spec("standby-prune"))
	ctx := t.Context()
	pm := recordOf(t, parent)
	if err := b.update(pm, func(m *meta) { m.ForkStandby = "" }); err != nil {
		t.Fatal(err)
	}
	sm, err := readMeta(filepath.Join(b.dir, standby))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.update(sm, func(m *meta) { m.Creator = owner.Self() }); err != nil {
		t.Fatal(err)
	}
	names, err := b.PruneCaches(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.Contains(n, standby) }) {
		t.Fatalf("PruneCaches removed a container a live process is making: %v", names)
	}
	if err := b.update(sm, func(m *meta) { m.Creator = "" }); err != nil {
		t.Fatal(err)
	}
	names, err = b.PruneCaches(ctx, true)
	if err != nil || !slices.Contains(names, "fork standby "+standby+" of sandbox "+parent.ID()) {
		t.Fatalf("PruneCaches dry run: %v %v", names, err)
	}
	if _, err := os.Stat(filepath.Join(b.dir, standby)); err != nil {
		t.Fatalf("the dry run removed it: %v", err)
	}
	if _, err := b.PruneCaches(ctx, false); err != nil {
		t.Fatal(err)
	}
	gone(t, b, standby)
	// The parent forks as before, copying its layer.
	forks, err := parent.Fork(ctx, backend.ForkRequest{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	forks[0].Destroy(ctx)
}

// A layer that cannot be merged into the container made ahead (here a
// folder with an overlayfs redirect) is copied as before, and the
// container made ahead is removed.
func TestForkStandbyFallsBack(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	parent, standby := forkWithStandby(t, b, e.spec("standby-fallback"))
	ctx := t.Context()
	if res, err := parent.Exec(ctx, backend.ExecRequest{Shell: "mkdir /redirected && echo x > /redirected/f"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("changing the parent: %v %+v", err, res)
	}
	pm := recordOf(t, parent)
	if err := unix.Setxattr(filepath.Join(upperDir(parent.dir, pm.Gen), "redirected"), "trusted.overlay.redirect", []byte("/no-such-folder"), 0); err != nil {
		t.Fatal(err)
	}
	forks, err := parent.Fork(ctx, backend.ForkRequest{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forks[0].Destroy(context.Background()) })
	if forks[0].ID() == standby {
		t.Fatal("the fork used the container made ahead")
	}
	if res, err := forks[0].Exec(ctx, backend.ExecRequest{Shell: "cat /redirected/f"}); err != nil || string(res.Stdout) != "x\n" {
		t.Errorf("the fork: %v %+v", err, res)
	}
	b.waitBackground()
	gone(t, b, standby)
}
