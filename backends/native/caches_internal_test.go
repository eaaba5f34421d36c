package native

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// The sbxd volumes of other agent builds are caches gc reclaims once no
// container uses them; this build's volume, and one still mounted, stay.
func TestPruneCaches(t *testing.T) {
	ctx := context.Background()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	b, err := New(Config{PullPolicy: PullNever})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// This build's volume exists once a sandbox was made.
	sb, err := b.Create(ctx, backend.Spec{Image: dockertest.BusyboxImage})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	current := sbxdVolumeOf(t, b)

	stale := func(hash string) string {
		name := "sandboxkit-sbxd-" + hash
		if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: map[string]string{backend.LabelBackend: Name, labelSbxd: hash}}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.VolumeRemove(context.Background(), name, true) })
		return name
	}
	unused, used := stale("0000test0001"), stale("0000test0002")
	user, err := b.helperContainer(ctx, dockertest.BusyboxImage, used, "/v", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.removeHelper(ctx, user)

	dry, err := b.PruneCaches(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dry, unused) || slices.Contains(dry, used) || slices.Contains(dry, current) {
		t.Fatalf("dry run names %v: want %s, not %s (in use) or %s (this build)", dry, unused, used, current)
	}
	if _, err := cli.VolumeInspect(ctx, unused); err != nil {
		t.Fatalf("a dry run removed %s: %v", unused, err)
	}
	pruned, err := b.PruneCaches(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pruned, unused) {
		t.Fatalf("pruned %v, want %s", pruned, unused)
	}
	if _, err := cli.VolumeInspect(ctx, unused); err == nil {
		t.Errorf("%s is still there", unused)
	}
	for _, keep := range []string{used, current} {
		if _, err := cli.VolumeInspect(ctx, keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
}

// A helper container carries the labels gc reads: an ID, this process as
// owner and an expiry, so a maker killed mid-fill leaves nothing gc cannot
// find.
func TestHelperContainerIsReapable(t *testing.T) {
	ctx := context.Background()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	b, err := New(Config{PullPolicy: PullNever})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	vol := "sandboxkit-test-helper-" + newID()
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol}); err != nil {
		t.Fatal(err)
	}
	defer cli.VolumeRemove(context.Background(), vol, true)
	id, err := b.helperContainer(ctx, dockertest.BusyboxImage, vol, "/v", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.removeHelper(ctx, id)
	c, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	l := c.Config.Labels
	if l[backend.LabelID] == "" || l[backend.LabelOwner] != owner.Self() || l[backend.LabelExpiresAt] == "" {
		t.Fatalf("helper labels %v: want an ID, this process as owner and an expiry", l)
	}
	infos, err := b.List(ctx, backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(infos, func(i backend.Info) bool { return i.ID == l[backend.LabelID] }) {
		t.Fatalf("List does not show the helper, so gc could not reap it")
	}
	sb, err := b.Get(ctx, l[backend.LabelID])
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerInspect(ctx, id); err == nil {
		t.Errorf("Destroy left the helper container")
	}
}

// gc's PruneCaches removes the claim records of sandboxes that are gone
// and keeps those of sandboxes that are there.
func TestPruneClaimRecords(t *testing.T) {
	ctx := context.Background()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	b, err := New(Config{PullPolicy: PullNever})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sb, err := b.Create(ctx, backend.Spec{Image: dockertest.BusyboxImage, Labels: map[string]string{
		backend.LabelPool: "test-pool-" + newID(), backend.LabelPoolState: backend.PoolReady}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.WithoutCancel(ctx))
	if _, err := b.Claim(ctx, sb.ID(), backend.Claim{Session: "task"}); err != nil {
		t.Fatal(err)
	}
	gone := "0000test" + newID()[:4]
	orphan := claimVolume(gone)
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: orphan, Labels: map[string]string{
		backend.LabelBackend: Name, labelClaim: gone, labelClaimNonce: "x"}}); err != nil {
		t.Fatal(err)
	}
	defer cli.VolumeRemove(context.Background(), orphan, true)

	dry, err := b.PruneCaches(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dry, orphan) || slices.Contains(dry, claimVolume(sb.ID())) {
		t.Fatalf("dry run names %v: want %s, not the live member's %s", dry, orphan, claimVolume(sb.ID()))
	}
	// Not PruneCaches: that would remove other builds' sbxd volumes too.
	pruned, err := b.pruneClaimRecords(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pruned, orphan) {
		t.Fatalf("pruned %v, want %s", pruned, orphan)
	}
	if _, err := cli.VolumeInspect(ctx, orphan); err == nil {
		t.Errorf("%s is still there", orphan)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Session != "task" {
		t.Errorf("the live member's claim is gone: session %q", info.Session)
	}
}

// A filled sbxd volume carries a mark (a second volume), so the next
// process's first Create uses it without a helper container; without the
// mark the volume is checked and filled through a helper again, and the
// mark made.
func TestSbxdVolumeMark(t *testing.T) {
	ctx := context.Background()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	// Each Backend stands for a new process: its own cache of filled
	// volumes starts empty.
	create := func() {
		t.Helper()
		b, err := New(Config{PullPolicy: PullNever})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		sb, err := b.Create(ctx, backend.Spec{Image: dockertest.BusyboxImage})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(context.WithoutCancel(ctx))
		if res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"/.sbx/sbxd", "version"}}); err != nil || res.ExitCode != 0 {
			t.Fatalf("sbxd in the sandbox: %v %+v", err, res)
		}
	}
	// helpers counts the helper containers this process made from since.
	helpers := func(since time.Time) int {
		t.Helper()
		f := filters.NewArgs(filters.Arg("type", "container"), filters.Arg("event", "create"),
			filters.Arg("label", backend.LabelOwner+"="+owner.Self()), filters.Arg("label", backend.LabelName+"=sandboxkit-helper"))
		msgs, errs := cli.Events(ctx, events.ListOptions{Since: since.Format(time.RFC3339Nano), Until: time.Now().Format(time.RFC3339Nano), Filters: f})
		n := 0
		for {
			select {
			case _, ok := <-msgs:
				if !ok {
					return n
				}
				n++
			case err := <-errs:
				if err != nil && !errors.Is(err, io.EOF) {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	create()
	b, err := New(Config{PullPolicy: PullNever})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mark := sbxdVolumeOf(t, b) + sbxdFilledSuffix
	if _, err := cli.VolumeInspect(ctx, mark); err != nil {
		t.Fatalf("no mark after a fill: %v", err)
	}

	since := time.Now()
	create()
	if n := helpers(since); n != 0 {
		t.Errorf("a Create with the mark in place made %d helper container(s), want none", n)
	}

	if err := cli.VolumeRemove(ctx, mark, false); err != nil {
		t.Fatal(err)
	}
	since = time.Now()
	create()
	if n := helpers(since); n != 1 {
		t.Errorf("a Create without the mark made %d helper container(s), want 1", n)
	}
	if _, err := cli.VolumeInspect(ctx, mark); err != nil {
		t.Errorf("the mark was not made again: %v", err)
	}
}

// sbxdVolumeOf is the name of the sbxd volume of this build on b's engine.
func sbxdVolumeOf(t *testing.T, b *Backend) string {
	t.Helper()
	facts, err := b.facts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	bin, err := sbxdbin.Lookup("", facts.arch)
	if err != nil {
		t.Fatal(err)
	}
	return "sandboxkit-sbxd-" + sbxdHash(bin)
}
