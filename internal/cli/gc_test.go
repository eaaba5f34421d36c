package cli

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// gc reaps a sandbox whose removal or creation was cut short, and leaves
// one still being created by a live process.
func TestReapReasonHalfDone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone, err := owner.Of(cmd.Process.Pid)
	cmd.Wait()
	if err != nil {
		t.Skip("the process exited before it could be named")
	}
	now := time.Now()
	for _, tt := range []struct {
		info backend.Info
		want string
	}{
		{backend.Info{State: backend.StateRemoving}, "its removal was cut short"},
		{backend.Info{State: backend.StateCreating, Labels: map[string]string{backend.LabelCreator: gone}}, "its creation was cut short"},
		{backend.Info{State: backend.StateCreating, Labels: map[string]string{backend.LabelCreator: owner.Self()}}, ""},
		{backend.Info{State: backend.StateRunning}, ""},
	} {
		if got := reapReason(tt.info, now); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("reapReason(%+v) = %q, want %q", tt.info, got, tt.want)
		}
	}
}

// gc reaps a snapshot whose maker died before handing it over
// (LabelCreator, which backends report until Snapshot returns), and an
// expired one; it keeps one being taken by a live process, one handed
// over, and one whose maker is on another host.
func TestSnapshotReapReason(t *testing.T) {
	gone := goneOwner(t)
	now := time.Now()
	for _, tt := range []struct {
		sn   backend.Snapshot
		want string
	}{
		{backend.Snapshot{Labels: map[string]string{backend.LabelCreator: gone}}, "its making was cut short: its maker " + gone + " is gone"},
		{backend.Snapshot{ExpiresAt: now.Add(-time.Minute), Labels: map[string]string{backend.LabelCreator: owner.Self()}}, "expired"},
		{backend.Snapshot{Labels: map[string]string{backend.LabelCreator: owner.Self()}}, ""},
		{backend.Snapshot{Labels: map[string]string{backend.LabelCreator: "elsewhere.example:1:1"}}, ""},
		{backend.Snapshot{ExpiresAt: now.Add(time.Minute), Labels: map[string]string{}}, ""},
	} {
		if got := snapshotReapReason(tt.sn, now); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("snapshotReapReason(%+v) = %q, want %q", tt.sn, got, tt.want)
		}
	}
}

// goneOwner returns the owner string of a process that has finished.
func goneOwner(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone, err := owner.Of(cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return gone
}

// On Docker, gc goes by a pool member's claim record: it reaps a member
// whose claimer is gone, keeps one whose record was lost while its keeper
// lives, and names the record of a member that is gone. Dry runs only: a
// real gc on the shared engine would reap other programs' leftovers (and
// the sbxd volumes of other builds) under their feet.
func TestGCClaimedMembers(t *testing.T) {
	setup(t)
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	t.Setenv("SBX_CONFIG", writeConfig(t, `
[sandbox]
backend = "native"
[sandbox.native]
pull_policy = "never"
[sandbox.sandboxes.main]
image = "`+dockertest.BusyboxImage+`"
`))
	b := openBackend(t)
	cl, ok := backend.AsBackend[backend.Claimer](b)
	if !ok {
		t.Fatal("the native backend is no Claimer")
	}
	ctx := context.Background()
	member := func(claimer string) string {
		t.Helper()
		sb, err := b.Create(ctx, backend.Spec{Name: "member", Image: dockertest.BusyboxImage, Owner: owner.Self(), TTL: time.Hour,
			Labels: map[string]string{backend.LabelPool: "gc-test", backend.LabelPoolState: backend.PoolReady}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		if _, err := cl.Claim(ctx, sb.ID(), backend.Claim{Owner: claimer, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		return sb.ID()
	}
	abandoned := member(goneOwner(t))
	lost := member(owner.Self())
	if err := cli.VolumeRemove(ctx, "sbx-claim-"+lost, false); err != nil {
		t.Fatal(err)
	}
	orphan := "sbx-claim-0000gctest" + abandoned[:2]
	if _, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: orphan, Labels: map[string]string{
		backend.LabelBackend: "native", "sandboxkit.native.claim": "0000gctest" + abandoned[:2]}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.VolumeRemove(context.Background(), orphan, true) })

	var res []gcResult
	if err := json.Unmarshal([]byte(must(t, "--json", "gc", "--dry-run")), &res); err != nil {
		t.Fatal(err)
	}
	named := map[string]gcResult{}
	for _, r := range res {
		named[r.ID] = r
	}
	if r, ok := named[abandoned]; !ok || !strings.Contains(r.Reason, "is gone") {
		t.Errorf("gc names %+v for the member whose claimer is gone, want it reaped", r)
	}
	if r, ok := named[lost]; ok {
		t.Errorf("gc would reap the member whose record was lost while its keeper lives: %+v", r)
	}
	if r, ok := named[orphan]; !ok || r.Kind != "cache" {
		t.Errorf("gc names %+v for the claim record of a sandbox that is gone, want it removed", r)
	}
}
