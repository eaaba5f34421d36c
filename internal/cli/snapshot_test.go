package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// sbx snapshot and sbx fork on the backends that have them; the config is
// the test's SBX_CONFIG.
func TestSnapshotAndForkLocal(t *testing.T) {
	setup(t)
	checkSnapshotAndFork(t)
}

func TestSnapshotAndForkLite(t *testing.T) {
	setup(t)
	t.Setenv("SBX_CONFIG", liteConfig(t, "", ""))
	checkSnapshotAndFork(t)
}

func TestSnapshotAndForkNative(t *testing.T) {
	// dockerConfig checks that nothing labelled with the test's run is
	// left: the forks' containers and the snapshot's image carry it.
	dockerConfig(t, fmt.Sprintf("image = %q\nworking_dir = \"/root\"", dockertest.BusyboxImage))
	pruneAtCleanup(t)
	checkSnapshotAndFork(t)
}

func TestSnapshotAndForkRemoteDocker(t *testing.T) {
	setup(t)
	h := remotetest.Get(t)
	t.Setenv("SBX_CONFIG", remoteConfig(t, h))
	pruneAtCleanup(t)
	checkSnapshotAndFork(t)
}

// pruneAtCleanup prunes the caches of the test's Docker backend at the end
// of t, after the cleanups registered later: a fork's image stays,
// untagged, until the last fork is gone and caches are pruned (sbx gc
// does it; here only that part of it).
func pruneAtCleanup(t *testing.T) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b := openBackend(t)
		p, ok := backend.AsBackend[backend.CachePruner](b)
		if !ok {
			t.Fatalf("the %s backend has no CachePruner", b.Name())
		}
		if _, err := p.PruneCaches(ctx, false); err != nil {
			t.Errorf("PruneCaches: %v", err)
		}
	})
}

// checkSnapshotAndFork keeps a "main" sandbox with a file, forks it and
// snapshots it, and checks that the forks and a sandbox run from the
// snapshot have the file, and that no write shows anywhere else.
func checkSnapshotAndFork(t *testing.T) {
	parent := keep(t, "echo parent > f")
	t.Cleanup(func() { sbx(t, "rm", parent) })

	out := must(t, "fork", "-n", "2", parent)
	forks := strings.Fields(out)
	t.Cleanup(func() { sbx(t, append([]string{"rm"}, forks...)...) })
	if len(forks) != 2 || slices.Contains(forks, parent) || forks[0] == forks[1] {
		t.Fatalf("sbx fork -n 2 printed %q, want two new IDs", out)
	}
	for i, id := range forks {
		if got := must(t, "exec", id, "--", "cat", "f"); got != "parent\n" {
			t.Errorf("fork %d's f: %q, want the parent's", i, got)
		}
		must(t, "exec", id, "--", "sh", "-c", fmt.Sprintf("echo fork%d > f", i))
	}
	if got := must(t, "exec", parent, "--", "cat", "f"); got != "parent\n" {
		t.Errorf("the parent's f after its forks wrote theirs: %q", got)
	}
	if got := must(t, "exec", forks[0], "--", "cat", "f"); got != "fork0\n" {
		t.Errorf("fork 0's f after fork 1 wrote its own: %q", got)
	}
	var listed int
	for _, s := range listSandboxes(t) {
		if s.Labels[backend.LabelForkOf] == parent {
			listed++
		}
	}
	if listed != 2 {
		t.Errorf("sbx ls shows %d sandboxes labelled %s=%s, want 2", listed, backend.LabelForkOf, parent)
	}

	var fj []forkJSON
	if err := json.Unmarshal([]byte(must(t, "--json", "fork", parent)), &fj); err != nil {
		t.Fatal(err)
	}
	for _, f := range fj {
		t.Cleanup(func() { sbx(t, "rm", f.ID) })
	}
	if len(fj) != 1 || fj[0].ForkOf != parent || fj[0].ID == "" || fj[0].Backend == "" {
		t.Errorf("sbx --json fork: %+v", fj)
	}

	name := "sandboxkit-test/sbx-snapshot:" + randomHex(t)
	ref := strings.TrimSpace(must(t, "snapshot", "--ref", name, "--ttl", "1h", parent))
	t.Cleanup(func() { removeSnapshot(t, ref) })
	if ref == "" || strings.Contains(ref, "\n") {
		t.Fatalf("sbx snapshot printed %q, want one reference", ref)
	}
	must(t, "exec", parent, "--", "sh", "-c", "echo later > f")
	if got := must(t, "run", "--image", ref, "--", "cat", "f"); got != "parent\n" {
		t.Errorf("f in a sandbox run from the snapshot %s: %q, want the parent's at the time", ref, got)
	}

	var sj snapshotJSON
	if err := json.Unmarshal([]byte(must(t, "--json", "snapshot", "--ttl", "1h", parent)), &sj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeSnapshot(t, sj.Ref) })
	if sj.Ref == "" || sj.Ref == ref || sj.Sandbox != parent || sj.ExpiresAt == nil || sj.Labels[backend.LabelSnapshotOf] != parent {
		t.Errorf("sbx --json snapshot: %+v", sj)
	}

	// sbx gc removes a snapshot whose TTL ran out (native keeps expiry
	// times to the second).
	short := strings.TrimSpace(must(t, "snapshot", "--ttl", "1s", parent))
	t.Cleanup(func() { removeSnapshot(t, short) })
	time.Sleep(2100 * time.Millisecond)
	var gc []gcResult
	if err := json.Unmarshal([]byte(must(t, "--json", "gc")), &gc); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(gc, func(r gcResult) bool { return r.Kind == "snapshot" && r.ID == short && r.Removed }) {
		t.Errorf("sbx gc after the snapshot %s expired: %+v, want it removed", short, gc)
	}
	if slices.ContainsFunc(gc, func(r gcResult) bool { return r.ID == ref || r.ID == sj.Ref }) {
		t.Errorf("sbx gc removed a snapshot whose TTL has not run out: %+v (ref %q, json %q, short %q)", gc, ref, sj.Ref, short)
	}
	if r := sbx(t, "run", "--image", short, "--", "true"); r.code == 0 {
		t.Errorf("sbx run --image %s after sbx gc removed it: exit 0", short)
	}

	// sbx snapshot ls lists what sbx snapshot made; sbx snapshot rm
	// removes it.
	if out := must(t, "snapshot", "ls"); !strings.Contains(out, ref) || !strings.Contains(out, "REF") {
		t.Errorf("sbx snapshot ls lacks %s:\n%s", ref, out)
	}
	var listed2 []snapshotJSON
	if err := json.Unmarshal([]byte(must(t, "--json", "snapshot", "ls")), &listed2); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(listed2, func(j snapshotJSON) bool { return j.Ref == ref && j.Sandbox == parent }) {
		t.Errorf("sbx --json snapshot ls: %+v, want %s of %s", listed2, ref, parent)
	}
	if out := must(t, "snapshot", "rm", ref); strings.TrimSpace(out) != ref {
		t.Errorf("sbx snapshot rm printed %q", out)
	}
	if out := must(t, "snapshot", "ls"); strings.Contains(out, ref) {
		t.Errorf("sbx snapshot ls after rm still lists %s:\n%s", ref, out)
	}

	r := sbx(t, "fork", "-n", "0", parent)
	r.expect(t, 1)
	r = sbx(t, "snapshot", "no-such-sandbox")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, "no-such-sandbox") {
		t.Errorf("sbx snapshot of an unknown sandbox: %q", r.stderr)
	}
}

// keep runs shell in a sandbox sbx run --keeps and returns its ID (the
// last line sbx run prints on stderr; k8s's and opensandbox's progress
// comes before it).
func keep(t *testing.T, shell string) string {
	t.Helper()
	r := sbx(t, "run", "--keep", "--", "sh", "-c", shell)
	r.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	return lines[len(lines)-1]
}

// removeSnapshot removes a snapshot through the backend sbx uses, at a
// test's cleanup (where sbx snapshot rm could not fail the test).
func removeSnapshot(t *testing.T, ref string) {
	b := openBackend(t)
	m, ok := backend.AsBackend[backend.SnapshotManager](b)
	if !ok {
		t.Errorf("the %s backend has snapshots but no SnapshotManager", b.Name())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.RemoveSnapshot(ctx, ref); err != nil {
		t.Errorf("removing the snapshot %s: %v", ref, err)
	}
}

// On a backend without snapshots and forks sbx says which backend and why:
// opensandbox (against the in-process OpenSandbox server) and k8s.
func TestSnapshotAndForkUnsupported(t *testing.T) {
	for _, c := range []struct {
		backend string
		config  func(t *testing.T) string
		why     string
	}{
		{"opensandbox", func(t *testing.T) string {
			srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: "k"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			t.Setenv("OPEN_SANDBOX_API_KEY", "k")
			return writeConfig(t, `
[sandbox]
backend = "opensandbox"
default_image = "ubuntu:24.04"
[sandbox.opensandbox]
domain = "`+srv.Domain()+`"
[sandbox.sandboxes.main]
`)
		}, "OpenSandbox API has no call"},
		{"k8s", func(t *testing.T) string {
			c := k8stest.Get(t)
			return writeConfig(t, fmt.Sprintf(`[sandbox]
backend = "k8s"
[sandbox.k8s]
kubeconfig = %q
namespace = %q
image_pull_policy = "IfNotPresent"
[sandbox.sandboxes.main]
image = %q
`, c.Kubeconfig, c.Namespace(t), k8stest.BusyboxImage))
		}, "Kubernetes has no API"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			setup(t)
			t.Setenv("SBX_CONFIG", c.config(t))
			id := keep(t, "true")
			t.Cleanup(func() { sbx(t, "rm", id) })
			for _, args := range [][]string{{"snapshot", id}, {"fork", "-n", "2", id}} {
				r := sbx(t, args...)
				r.expect(t, 1)
				if !strings.Contains(r.stderr, "the "+c.backend+" backend cannot") || !strings.Contains(r.stderr, c.why) {
					t.Errorf("sbx %s: stderr %q, want the backend and why", strings.Join(args, " "), r.stderr)
				}
			}
			if left := listSandboxes(t); len(left) != 1 {
				t.Errorf("sandboxes after the refused fork: %+v, want only %s", left, id)
			}
		})
	}
}
