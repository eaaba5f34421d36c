package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
	"github.com/sandboxkit/sandboxkit/internal/rootfs"
)

// bundleState changes a session's main sandbox (a file, a mode, a symlink,
// a deleted file of the image, a file in /shared) and bundleProbe prints
// them: a session restored elsewhere must print the same.
const (
	bundleState = `set -e; cd /root; echo work > f; echo secret > x; chmod 0751 x; ln -s f l; mkdir -p d/e; echo deep > d/e/g
rm /bin/vi; echo shared > /shared/s`
	bundleProbe = `cd /root; cat f d/e/g; stat -c '%a %s' x; readlink l; test -e /bin/vi && echo vi is back || echo vi gone; cat /shared/s`
)

// upSession launches the config's entries with sbx up and returns the
// session and its main sandbox's ID.
func upSession(t *testing.T, cfg string) (string, string) {
	t.Helper()
	var res upResult
	if err := json.Unmarshal([]byte(must(t, "--config", cfg, "--json", "--progress", "none", "up")), &res); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sbx(t, "--config", cfg, "down", res.Session) })
	return res.Session, mainOf(t, res)
}

func mainOf(t *testing.T, res upResult) string {
	t.Helper()
	for _, m := range res.Sandboxes {
		if m.Name == "main" {
			return m.ID
		}
	}
	t.Fatalf("session %s has no main sandbox: %+v", res.Session, res)
	return ""
}

// restored decodes what sbx restore or sbx move printed (--json) and
// registers the new session's removal with cfg.
func restored(t *testing.T, cfg, out string) (string, string) {
	t.Helper()
	var res upResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	t.Cleanup(func() { sbx(t, "--config", cfg, "down", res.Session) })
	return res.Session, mainOf(t, res)
}

// liteConfig writes a config of the lite backend (skipping t without
// runc, unless SBX_REQUIRE_LITE=1) whose folders are the test's, with
// liteKeys added to [sandbox.lite] and an entry main of a busybox image,
// working in /root, with entryKeys added.
func liteConfig(t *testing.T, liteKeys, entryKeys string) string {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil && os.Getenv("SBX_REQUIRE_LITE") != "1" {
		t.Skip("lite: no runc (scripts/lite-setup.sh)")
	}
	fs, err := rootfs.Busybox()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(fs) })
	base := t.TempDir()
	return writeConfig(t, fmt.Sprintf(`[sandbox]
backend = "lite"
[sandbox.lite]
state_dir = %q
image_dir = %q
runtime_root = %q
%s
[sandbox.sandboxes.main]
image = %q
working_dir = "/root"
%s
`, filepath.Join(base, "state"), filepath.Join(base, "images"), filepath.Join(base, "runtime"), liteKeys, "dir:"+fs, entryKeys))
}

// A session on native, written to a bundle and restored on lite, has the
// same files, modes, symlinks, deletions and /shared; the bundle is an OCI
// image layout with Docker's manifest.json; a bad bundle changes nothing.
func TestBundleNativeToLite(t *testing.T) {
	src, _ := dockerConfig(t, fmt.Sprintf("image = %q\nworking_dir = \"/root\"", dockertest.BusyboxImage))
	pruneAtCleanup(t)
	dst := liteConfig(t, "", "")
	sess, main := upSession(t, src)
	must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleState)
	want := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe)
	if !strings.Contains(want, "vi gone") || !strings.Contains(want, "751 7") {
		t.Fatalf("the probe on the source printed %q", want)
	}

	file := filepath.Join(t.TempDir(), "work.tar")
	if got := strings.TrimSpace(must(t, "--config", src, "--progress", "none", "snapshot", "-o", file, sess)); got != file {
		t.Errorf("sbx snapshot -o printed %q, want %q", got, file)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, string(data))
	for _, n := range []string{"sandboxkit-bundle.json", "volumes/shared.tar", "images/oci-layout", "images/index.json", "images/manifest.json"} {
		if !slices.Contains(names, n) {
			t.Errorf("the bundle lacks %s: %v", n, names)
		}
	}
	if names[0] != "sandboxkit-bundle.json" {
		t.Errorf("the bundle's first entry is %s", names[0])
	}
	// The images are an OCI layout that an OCI reader takes as it is:
	// lite's oci: images.
	var m struct {
		Sandboxes map[string]struct{ Image string } `json:"sandboxes"`
	}
	layout := filepath.Join(t.TempDir(), "layout")
	if err := os.Mkdir(layout, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("tar", "-xf", file, "-C", layout).CombinedOutput(); err != nil {
		t.Fatalf("tar -xf: %v: %s", err, out)
	}
	mdata, err := os.ReadFile(filepath.Join(layout, "sandboxkit-bundle.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mdata, &m); err != nil {
		t.Fatal(err)
	}
	img := m.Sandboxes["main"].Image
	tag := img[strings.LastIndexByte(img, ':')+1:]
	if got := must(t, "--config", dst, "run", "--image", "oci:"+filepath.Join(layout, "images")+":"+tag, "--", "cat", "/root/f"); got != "work\n" {
		t.Errorf("/root/f of the bundle's OCI layout (%s) run on lite: %q", img, got)
	}

	// The source keeps running, and its snapshot image is gone again.
	if got := must(t, "--config", src, "exec", main, "--", "cat", "/root/f"); got != "work\n" {
		t.Errorf("the source after the bundle: %q", got)
	}
	if out, err := exec.Command("docker", "images", "-q", "--filter", "reference=sandboxkit-bundle/*").CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("bundle images left on the source engine: %v %q", err, out)
	}

	_, rmain := restored(t, dst, must(t, "--config", dst, "--json", "--progress", "none", "restore", file))
	if got := must(t, "--config", dst, "exec", rmain, "--", "sh", "-c", bundleProbe); got != want {
		t.Errorf("restored on lite, the probe printed\n%s\nwant (as on native)\n%s", got, want)
	}

	// A bundle cut short, or a file that is no bundle, is refused and
	// makes no sandbox.
	before := must(t, "--config", dst, "--json", "ls")
	cut := filepath.Join(t.TempDir(), "cut.tar")
	if err := os.WriteFile(cut, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{cut, src} {
		r := sbx(t, "--config", dst, "--progress", "none", "restore", bad)
		if r.code == 0 {
			t.Errorf("sbx restore %s: exit 0", bad)
		}
		if !strings.Contains(r.stderr, "bundle") {
			t.Errorf("sbx restore %s: %q, want an error about the bundle", bad, r.stderr)
		}
	}
	if after := must(t, "--config", dst, "--json", "ls"); after != before {
		t.Errorf("sandboxes after refused restores:\n%s\nbefore:\n%s", after, before)
	}
}

// A session on native moved to the remote-host harness runs the same
// command with the same output there, and the original is gone.
func TestMoveNativeToRemote(t *testing.T) {
	src, _ := dockerConfig(t, fmt.Sprintf("image = %q\nworking_dir = \"/root\"", dockertest.BusyboxImage))
	pruneAtCleanup(t)
	h := remotetest.Get(t)
	dst := remoteConfig(t, h)
	sess, main := upSession(t, src)
	must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleState)
	want := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe)

	t.Cleanup(func() {
		t.Setenv("SBX_CONFIG", dst)
		sbx(t, "gc")
	})
	r := sbx(t, "--config", src, "--json", "--progress", "plain", "move", sess, "--to", dst)
	r.expect(t, 0)
	if !strings.Contains(r.stderr, "move: ") {
		t.Errorf("sbx move showed no progress: %q", r.stderr)
	}
	nsess, rmain := restored(t, dst, r.stdout)
	if nsess == sess {
		t.Errorf("the moved session kept its ID %s", sess)
	}
	if got := must(t, "--config", dst, "exec", rmain, "--", "sh", "-c", bundleProbe); got != want {
		t.Errorf("moved to the remote host, the probe printed\n%s\nwant\n%s", got, want)
	}
	// The env file is the new session's, written into the volume as it
	// was made.
	if got := must(t, "--config", dst, "exec", rmain, "--", "cat", "/shared/bashrc"); !strings.Contains(got, "session "+nsess) || strings.Contains(got, sess) {
		t.Errorf("/shared/bashrc after the move:\n%s\nwant session %s's (not %s's)", got, nsess, sess)
	}
	if r := sbx(t, "--config", src, "status", sess); r.code == 0 {
		t.Errorf("sbx status %s on the source after the move: exit 0 (the original should be gone)", sess)
	}
	if r := sbx(t, "--config", src, "move", "no-such-session", "--to", dst); r.code == 0 || !strings.Contains(r.stderr, "no-such-session") {
		t.Errorf("sbx move of an unknown session: %d %q", r.code, r.stderr)
	}
}

// A move whose restore fails keeps the original session as it was, and
// leaves nothing on the remote engine: the new session's network and
// volumes, made while the images loaded, go again. The same holds for a
// restore of a bundle cut short in its images, which fails after they
// were made.
func TestMoveFailureKeepsOriginal(t *testing.T) {
	src, _ := dockerConfig(t, fmt.Sprintf("image = %q\nworking_dir = \"/root\"", dockertest.BusyboxImage))
	pruneAtCleanup(t)
	h := remotetest.Get(t)
	// The sandbox's create fails on the remote engine, after the images
	// loaded and the volumes were made.
	bad := remoteConfigEntry(t, h, "network = \"sbx-test-no-such-network\"\n")
	t.Cleanup(func() {
		t.Setenv("SBX_CONFIG", bad)
		sbx(t, "gc")
	})
	sess, main := upSession(t, src)
	must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleState)
	want := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe)
	// remoteSessionThings lists the remote engine's volumes, networks and
	// containers labelled with a session (filter "=ID": that one's).
	remoteSessionThings := func(filter string) string {
		t.Helper()
		var out []string
		for _, kind := range []string{"volume", "network", "container"} {
			args := []string{"-H", "unix://" + h.DockerSocket, kind, "ls", "-q", "--filter", "label=sandboxkit.session" + filter}
			if kind == "container" {
				args = append(args, "--all")
			}
			b, err := exec.Command("docker", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, b)
			}
			out = append(out, kind+": "+strings.Join(strings.Fields(string(b)), " "))
		}
		return strings.Join(out, "\n")
	}
	// Other packages' tests share the engine (go test runs packages at
	// once), so what goes away meanwhile is theirs: the refused restore
	// below must only add nothing.
	before := remoteSessionThings("")
	// The original's container: stopped once the images were in, it is
	// started again (a later start, running).
	started := func() string {
		t.Helper()
		out, err := exec.Command("docker", "ps", "-a", "--filter", "label=sandboxkit.id="+main, "--format", "{{.State}} {{.ID}}").Output()
		if err != nil {
			t.Fatal(err)
		}
		state, cid, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		at, err := exec.Command("docker", "inspect", "-f", "{{.State.StartedAt}}", cid).Output()
		if err != nil {
			t.Fatal(err)
		}
		return state + " " + strings.TrimSpace(string(at))
	}
	startedBefore := started()

	r := sbx(t, "--config", src, "--progress", "plain", "move", sess, "--to", bad)
	if r.code == 0 || !strings.Contains(r.stderr, "session "+sess+" is kept") || !strings.Contains(r.stderr, "sbx-test-no-such-network") {
		t.Errorf("sbx move to a config whose sandbox cannot be created: exit %d\n%s", r.code, r.stderr)
	}
	// "sbx: session NEW: sandbox "main": create: ..."
	if _, rest, ok := strings.Cut(r.stderr, "sbx: session "); ok {
		nsess, _, _ := strings.Cut(rest, ":")
		if left := remoteSessionThings("=" + nsess); left != remoteSessionThings("=no-such-session") {
			t.Errorf("session %s's things on the remote engine after the failed move:\n%s", nsess, left)
		}
	} else {
		t.Errorf("the error names no new session: %q", r.stderr)
	}
	if after := started(); !strings.HasPrefix(after, "running ") || after == startedBefore {
		t.Errorf("the original's container after the failed move: %q (before it: %q); want it stopped and started again", after, startedBefore)
	}
	if got := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe); got != want {
		t.Errorf("the original after the failed move printed\n%s\nwant\n%s", got, want)
	}

	file := filepath.Join(t.TempDir(), "work.tar")
	must(t, "--config", src, "--progress", "none", "snapshot", "-o", file, sess)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.tar")
	if err := os.WriteFile(cut, data[:len(data)-len(data)/4], 0o644); err != nil {
		t.Fatal(err)
	}
	if r := sbx(t, "--config", remoteConfig(t, h), "--progress", "none", "restore", cut); r.code == 0 || !strings.Contains(r.stderr, "bundle") {
		t.Errorf("sbx restore of a bundle cut short: exit %d %q", r.code, r.stderr)
	}
	// Other packages' tests make sessions on the same engine meanwhile
	// (backends/remotedocker's, which label all they make with
	// sandboxkit.test-run; nothing of this test's carries that label).
	var ours []string
	for _, thing := range strings.Split(addedThings(before, remoteSessionThings("")), ", ") {
		kind, name, ok := strings.Cut(thing, " ")
		if !ok {
			continue
		}
		var out []byte
		var err error
		if kind == "container" {
			out, err = exec.Command("docker", "-H", "unix://"+h.DockerSocket, "inspect", "--format", `{{index .Config.Labels "sandboxkit.test-run"}}`, name).CombinedOutput()
		} else {
			out, err = exec.Command("docker", "-H", "unix://"+h.DockerSocket, kind, "inspect", "--format", `{{index .Labels "sandboxkit.test-run"}}`, name).CombinedOutput()
		}
		if err == nil && strings.TrimSpace(string(out)) != "" {
			continue // another package's test's
		}
		if err != nil && strings.Contains(string(out), "No such") {
			continue // gone again: made and removed by another test meanwhile
		}
		ours = append(ours, thing)
	}
	if len(ours) > 0 {
		t.Errorf("on the remote engine after the refused restore, new: %s\nbefore:\n%s", strings.Join(ours, ", "), before)
	}
}

// addedThings names the things (lines "kind: name name ...") in after
// that before lacks.
func addedThings(before, after string) string {
	had := map[string]bool{}
	for line := range strings.Lines(before) {
		kind, names, _ := strings.Cut(strings.TrimSpace(line), ":")
		for _, n := range strings.Fields(names) {
			had[kind+" "+n] = true
		}
	}
	var added []string
	for line := range strings.Lines(after) {
		kind, names, _ := strings.Cut(strings.TrimSpace(line), ":")
		for _, n := range strings.Fields(names) {
			if !had[kind+" "+n] {
				added = append(added, kind+" "+n)
			}
		}
	}
	return strings.Join(added, ", ")
}

// A session whose sandbox stopped (as an sbx move killed after it stopped
// the original leaves it) is started again by the commands that take up
// the session, with its files, and moves: nothing of it is lost.
func TestStoppedSessionStartsAgain(t *testing.T) {
	src, _ := dockerConfig(t, fmt.Sprintf("image = %q\nworking_dir = \"/root\"", dockertest.BusyboxImage))
	h := remotetest.Get(t)
	dst := remoteConfig(t, h)
	pruneAtCleanup(t)
	sess, main := upSession(t, src)
	must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleState)
	want := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe)
	stop := func() {
		t.Helper()
		if out, err := exec.Command("sh", "-c", "docker kill $(docker ps -q --filter label=sandboxkit.id="+main+")").CombinedOutput(); err != nil {
			t.Fatalf("docker kill: %v: %s", err, out)
		}
		if r := sbx(t, "--config", src, "exec", main, "--", "true"); r.code == 0 {
			t.Fatal("sbx exec in the killed sandbox: exit 0")
		}
	}
	stop()
	if r := sbx(t, "--config", src, "status", sess); r.code != 0 || !strings.Contains(r.stderr, "started it again") {
		t.Fatalf("sbx status of the stopped session: exit %d\n%s", r.code, r.stderr)
	}
	if got := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe); got != want {
		t.Errorf("after the start, the probe printed\n%s\nwant\n%s", got, want)
	}
	stop()
	_, nmain := restored(t, dst, must(t, "--config", src, "--json", "--progress", "none", "move", sess, "--to", dst))
	if got := must(t, "--config", dst, "exec", nmain, "--", "sh", "-c", bundleProbe); got != want {
		t.Errorf("moved from stopped, the probe printed\n%s\nwant\n%s", got, want)
	}
}

// The local backend cannot save images: sbx snapshot -o says so, naming
// it, and writes no file; -o with --ref is a usage error.
func TestBundleRefusedOnLocal(t *testing.T) {
	setup(t)
	cfg := os.Getenv("SBX_CONFIG")
	sess, _ := upSession(t, cfg)
	file := filepath.Join(t.TempDir(), "work.tar")
	r := sbx(t, "snapshot", "-o", file, sess)
	if r.code == 0 || !strings.Contains(r.stderr, "the local backend cannot save images") {
		t.Errorf("sbx snapshot -o on local: exit %d, %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) > 0 {
		t.Errorf("sbx snapshot -o that failed left %v", entries)
	}
	if r := sbx(t, "snapshot", "-o", file, "--ref", "x:1", sess); r.code != 2 && r.code != 1 || !strings.Contains(r.stderr, "--ref") {
		t.Errorf("sbx snapshot -o --ref: exit %d, %q", r.code, r.stderr)
	}
}

// A session on lite moved to native (lite writes its images as an OCI
// layout with manifest.json, which Docker 20.10's load reads) runs the
// same command with the same output there.
func TestMoveLiteToNative(t *testing.T) {
	dst, _ := dockerConfig(t, fmt.Sprintf("image = %q\nworking_dir = \"/root\"", dockertest.BusyboxImage))
	pruneAtCleanup(t)
	src := liteConfig(t, "", "")
	sess, main := upSession(t, src)
	must(t, "--config", src, "exec", main, "--", "sh", "-c", "mkdir -p /root && "+bundleState)
	want := must(t, "--config", src, "exec", main, "--", "sh", "-c", bundleProbe)
	if !strings.Contains(want, "vi gone") {
		t.Fatalf("the probe on lite printed %q", want)
	}
	_, rmain := restored(t, dst, must(t, "--config", src, "--json", "--progress", "none", "move", sess, "--to", dst))
	if got := must(t, "--config", dst, "exec", rmain, "--", "sh", "-c", bundleProbe); got != want {
		t.Errorf("moved to native, the probe printed\n%s\nwant (as on lite)\n%s", got, want)
	}
	if r := sbx(t, "--config", src, "status", sess); r.code == 0 {
		t.Errorf("sbx status %s on lite after the move: exit 0 (the original should be gone)", sess)
	}
}
