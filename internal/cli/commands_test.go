package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// up makes the named entries' sandboxes and returns their IDs by name.
func up(t *testing.T, args ...string) map[string]string {
	t.Helper()
	var res upResult
	if err := json.Unmarshal([]byte(must(t, append([]string{"--json", "up"}, args...)...)), &res); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, r := range res.Sandboxes {
		ids[r.Name] = r.ID
	}
	return ids
}

func TestUpExecRm(t *testing.T) {
	setup(t)
	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
[sandbox.sandboxes.worker]
environment = { ROLE = "worker" }
`)
	t.Setenv("SBX_CONFIG", cfg)

	out := must(t, "up")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "session ") || !strings.HasPrefix(lines[1], "NAME") ||
		!strings.HasPrefix(lines[2], "main ") || !strings.HasPrefix(lines[3], "worker ") ||
		!strings.Contains(lines[1], "ISOLATION") || !strings.Contains(lines[2], " none ") {
		t.Fatalf("sbx up printed:\n%s", out)
	}
	list := listSandboxes(t)
	if len(list) != 2 {
		t.Fatalf("sandboxes: %+v", list)
	}
	for _, s := range list {
		if s.Owner != "" {
			t.Errorf("sbx up sandbox %s has owner %q", s.ID, s.Owner)
		}
		if s.Isolation != backend.IsolationNone {
			t.Errorf("sbx ls --json says sandbox %s of the local backend has isolation %q", s.ID, s.Isolation)
		}
	}
	ls := must(t, "ls")
	if !strings.HasPrefix(ls, "ID ") || !strings.Contains(ls, "EXPIRES") || !strings.Contains(ls, "in 23h") ||
		!strings.Contains(ls, "ISOLATION") || !strings.Contains(ls, " none ") {
		t.Errorf("sbx ls:\n%s", ls)
	}

	// By name, with the exit code passed through.
	r := sbx(t, "exec", "worker", "--", "sh", "-c", "echo $ROLE; exit 4")
	r.expect(t, 4)
	if r.stdout != "worker\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	// By ID, without "--", with flags for the command.
	var workerID string
	for _, s := range list {
		if s.Name == "worker" {
			workerID = s.ID
		}
	}
	if out := must(t, "exec", workerID, "echo", "-n", "x"); out != "x" {
		t.Errorf("stdout %q", out)
	}
	r = sbx(t, "exec", "--timeout", "100ms", "worker", "--", "sleep", "10")
	r.expect(t, 124)
	r = sbxIn(t, context.Background(), "in", "exec", "-i", "worker", "--", "cat")
	r.expect(t, 0)
	if r.stdout != "in" {
		t.Errorf("exec -i stdout %q", r.stdout)
	}

	// rm: an unknown ID is reported, the others are still removed.
	r = sbx(t, "rm", "nosuchid", workerID, "main")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, `"nosuchid"`) || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("stderr %q", r.stderr)
	}
	if len(strings.Fields(r.stdout)) != 2 {
		t.Errorf("rm printed %q, want two IDs", r.stdout)
	}
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after rm: %+v", got)
	}
	r = sbx(t, "exec", "main", "--", "true")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, `no sandbox with ID or name "main"`) {
		t.Errorf("stderr %q", r.stderr)
	}
}

func TestUpUnknownEntry(t *testing.T) {
	setup(t)
	r := sbx(t, "up", "main", "nope")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, `"nope"`) {
		t.Errorf("stderr %q", r.stderr)
	}
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after failed up: %+v", got)
	}
}

func TestUpRollback(t *testing.T) {
	setup(t)
	// worker cannot be made on the local backend (no resource limits):
	// main, made concurrently, must be removed again.
	cfg := writeConfig(t, `
[sandbox]
backend = "local"
[sandbox.sandboxes.main]
[sandbox.sandboxes.worker]
mem_limit = "1g"
`)
	r := sbx(t, "--config", cfg, "up")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, `"worker"`) || !strings.Contains(r.stderr, "mem_limit") {
		t.Errorf("stderr %q", r.stderr)
	}
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after failed up: %+v", got)
	}
}

func TestExecAmbiguousName(t *testing.T) {
	setup(t)
	a, b := up(t)["main"], up(t)["main"]
	r := sbx(t, "exec", "main", "--", "true")
	r.expect(t, 1)
	if !strings.Contains(r.stderr, a) || !strings.Contains(r.stderr, b) || !strings.Contains(r.stderr, "pass an ID") {
		t.Errorf("stderr %q, want both IDs", r.stderr)
	}
	must(t, "exec", a, "--", "true")
}

func TestGC(t *testing.T) {
	setup(t)
	b := openBackend(t)
	ctx := context.Background()

	// An owner string of a process that has finished.
	child := exec.Command("sleep", "10")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	dead, err := owner.Of(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = child.Process.Kill()
	_ = child.Wait()

	create := func(spec backend.Spec) string {
		t.Helper()
		sb, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return sb.ID()
	}
	expired := create(backend.Spec{Name: "expired", TTL: time.Millisecond})
	orphan := create(backend.Spec{Name: "orphan", Owner: dead})
	owned := create(backend.Spec{Name: "owned", Owner: owner.Self()})
	foreign := create(backend.Spec{Name: "foreign", Owner: "elsewhere.example:1:1"})
	unowned := create(backend.Spec{Name: "unowned", TTL: time.Hour})
	time.Sleep(5 * time.Millisecond)

	out := must(t, "gc", "--dry-run")
	if !strings.Contains(out, "would remove "+expired) || !strings.Contains(out, "would remove "+orphan) ||
		strings.Count(out, "\n") != 2 {
		t.Errorf("gc --dry-run printed:\n%s", out)
	}
	if got := listSandboxes(t); len(got) != 5 {
		t.Fatalf("gc --dry-run removed something: %+v", got)
	}

	var res []gcResult
	if err := json.Unmarshal([]byte(must(t, "--json", "gc")), &res); err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, r := range res {
		if r.Removed {
			removed = append(removed, r.ID)
		}
	}
	slices.Sort(removed)
	want := []string{expired, orphan}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Errorf("gc removed %v, want %v (%+v)", removed, want, res)
	}
	var left []string
	for _, s := range listSandboxes(t) {
		left = append(left, s.ID)
	}
	want = []string{owned, foreign, unowned}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	if out := must(t, "gc"); out != "" {
		t.Errorf("second gc printed %q", out)
	}
}

func TestCp(t *testing.T) {
	setup(t)
	id := up(t, "main")["main"]
	host := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(host, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(host, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	inSandbox := func(script string) string {
		t.Helper()
		return must(t, "exec", id, "--", "sh", "-c", script)
	}

	// A file in, to a new name and into an existing directory.
	write("a.txt", "alpha\n")
	must(t, "cp", filepath.Join(host, "a.txt"), id+":copy.txt")
	must(t, "exec", id, "--", "mkdir", "dir")
	must(t, "cp", filepath.Join(host, "a.txt"), "main:dir")
	if got := inSandbox("cat copy.txt dir/a.txt; stat -c %a copy.txt"); got != "alpha\nalpha\n640\n" {
		t.Errorf("in sandbox: %q", got)
	}

	// A directory in: becomes DST when it does not exist, goes into it when
	// it does, and "/." copies its contents.
	write("tree/x", "x\n")
	write("tree/sub/y", "y\n")
	if err := os.Mkdir(filepath.Join(host, "tree", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	must(t, "cp", filepath.Join(host, "tree"), id+":new")
	must(t, "cp", filepath.Join(host, "tree"), id+":dir")
	must(t, "cp", filepath.Join(host, "tree")+"/.", id+":dir")
	got := inSandbox("find new dir | sort")
	want := "dir\ndir/a.txt\ndir/empty\ndir/sub\ndir/sub/y\ndir/tree\ndir/tree/empty\ndir/tree/sub\ndir/tree/sub/y\ndir/tree/x\ndir/x\n" +
		"new\nnew/empty\nnew/sub\nnew/sub/y\nnew/x\n"
	if got != want {
		t.Errorf("sandbox tree:\n%s\nwant:\n%s", got, want)
	}

	// And out again.
	must(t, "cp", id+":dir/sub/y", filepath.Join(host, "y.out"))
	if got := read("y.out"); got != "y\n" {
		t.Errorf("y.out %q", got)
	}
	must(t, "cp", id+":new", filepath.Join(host, "back"))
	if read("back/x") != "x\n" || read("back/sub/y") != "y\n" {
		t.Error("directory copied out wrong")
	}
	if fi, err := os.Stat(filepath.Join(host, "back", "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory not copied out: %v", err)
	}

	// Onto an existing file: replaced.
	write("y.out", "old")
	must(t, "cp", id+":copy.txt", filepath.Join(host, "y.out"))
	if got := read("y.out"); got != "alpha\n" {
		t.Errorf("replaced file: %q", got)
	}

	// A tar stream out on stdout and in from stdin.
	r := sbx(t, "cp", id+":new", "-")
	r.expect(t, 0)
	names := tarNames(t, r.stdout)
	if want := []string{"new/", "new/empty/", "new/sub/", "new/sub/y", "new/x"}; !slices.Equal(names, want) {
		t.Errorf("tar entries %v, want %v", names, want)
	}
	r = sbxIn(t, context.Background(), r.stdout, "cp", "-", id+":dir/sub")
	r.expect(t, 0)
	if got := inSandbox("cat dir/sub/new/x"); got != "x\n" {
		t.Errorf("extracted from stdin: %q", got)
	}

	// Errors.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cp", id + ":nope", host}, "nope"},
		{[]string{"cp", "nosuch:/x", host}, `"nosuch"`},
		{[]string{"cp", filepath.Join(host, "a.txt"), filepath.Join(host, "b")}, "ID:PATH"},
		{[]string{"cp", id + ":new", id + ":copy.txt"}, "onto file"},
	} {
		r := sbx(t, c.args...)
		r.expect(t, 1)
		if !strings.Contains(r.stderr, c.want) {
			t.Errorf("sbx %v: stderr %q, want %q", c.args, r.stderr, c.want)
		}
	}
}

func tarNames(t *testing.T, stream string) []string {
	t.Helper()
	tr := tar.NewReader(strings.NewReader(stream))
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
}

func TestCopyOutRefusesEscapes(t *testing.T) {
	// A sandbox controls the tar stream it sends: entries must not land
	// outside the destination.
	dir := t.TempDir()
	dst := filepath.Join(dir, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, entries := range [][]tar.Header{
		{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "link", Typeflag: tar.TypeSymlink, Linkname: ".."}, {Name: "link/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			if err := tw.WriteHeader(&h); err != nil {
				t.Fatal(err)
			}
		}
		tw.Close()
		if err := (hostTree{}).Untar(context.Background(), dst, &buf); err == nil {
			t.Errorf("%+v: no error", entries)
		}
		if _, err := os.Stat(filepath.Join(dir, "evil")); err == nil {
			t.Fatalf("%+v: wrote outside the destination", entries)
		}
	}
}

func TestTools(t *testing.T) {
	setup(t)
	up(t, "main")

	r := sbxIn(t, context.Background(), "one\ntwo\nthree\n", "tools", "write", "main", "notes/a.txt")
	r.expect(t, 0)
	r = sbx(t, "tools", "write", "main", "notes/a.txt", "--content", "again")
	r.expect(t, 1)
	if !strings.HasPrefix(r.stdout, "Error: File already exists") || r.stderr != "" {
		t.Errorf("write onto existing file: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if out := must(t, "tools", "read", "main", "notes/a.txt", "--offset", "1", "--limit", "1"); !strings.HasPrefix(out, "     2\ttwo\n") ||
		strings.Contains(out, "three") {
		t.Errorf("read: %q", out)
	}
	must(t, "tools", "edit", "main", "notes/a.txt", "--old", "two", "--new", "TWO")
	if out := must(t, "tools", "read", "main", "notes/a.txt"); !strings.Contains(out, "\tTWO\n") {
		t.Errorf("after edit: %q", out)
	}
	if out := must(t, "tools", "grep", "main", "t[wh]", "--mode", "content", "-i"); !strings.Contains(out, "a.txt:2:TWO") ||
		!strings.Contains(out, "a.txt:3:three") {
		t.Errorf("grep: %q", out)
	}
	wd := listSandboxes(t)[0].WorkDir
	if out := must(t, "tools", "glob", "main", "**/*.txt", "--path", wd); !strings.Contains(out, "a.txt") {
		t.Errorf("glob: %q", out)
	}
	if out := must(t, "tools", "ls", "main", "notes"); !strings.Contains(out, "a.txt") {
		t.Errorf("ls: %q", out)
	}
	r = sbx(t, "tools", "execute", "main", "echo", "hi;", "exit", "5")
	r.expect(t, 5)
	if !strings.Contains(r.stdout, "hi") || !strings.Contains(r.stdout, "5") {
		t.Errorf("execute: %q", r.stdout)
	}
	r = sbx(t, "tools", "execute", "--timeout", "1s", "main", "sleep 10")
	r.expect(t, 124)
	if !strings.Contains(r.stdout, "timed out") {
		t.Errorf("execute timeout: %q", r.stdout)
	}
	r = sbx(t, "tools", "read", "main", "missing.txt")
	r.expect(t, 1)
	if !strings.HasPrefix(r.stdout, "Error: ") {
		t.Errorf("read missing: %q", r.stdout)
	}
}

func TestVolumeReapReason(t *testing.T) {
	now := time.Now()
	live := map[string]bool{"busy": true}
	for _, tt := range []struct {
		v    backend.VolumeInfo
		want string
	}{
		{backend.VolumeInfo{ExpiresAt: now.Add(-time.Hour), Session: "busy"}, "expired 1h ago"},
		{backend.VolumeInfo{ExpiresAt: now.Add(time.Hour), Session: "gone", CreatedAt: now.Add(-time.Hour)}, "session gone has no sandboxes left"},
		{backend.VolumeInfo{Session: "gone", CreatedAt: now.Add(-time.Minute)}, ""}, // a session being launched
		{backend.VolumeInfo{Session: "busy", CreatedAt: now.Add(-time.Hour)}, ""},
		{backend.VolumeInfo{CreatedAt: now.Add(-time.Hour)}, ""}, // no session, no TTL: kept on purpose
	} {
		if got := volumeReapReason(tt.v, live, now, volumeGrace); got != tt.want {
			t.Errorf("volumeReapReason(%+v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}

// On native, gc also removes expired volumes and keeps the others.
func TestGCVolumes(t *testing.T) {
	_, run := dockerConfig(t, "")
	vm, ok := openBackend(t).(backend.VolumeManager)
	if !ok {
		t.Fatal("the native backend is no VolumeManager")
	}
	ctx := t.Context()
	labels := map[string]string{"sbx-test-run": run}
	expired, err := vm.CreateVolume(ctx, backend.VolumeSpec{Session: "gc-" + run, TTL: time.Millisecond, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := vm.CreateVolume(ctx, backend.VolumeSpec{Session: "gc-new-" + run, TTL: time.Hour, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		vm.RemoveVolume(context.Background(), expired)
		vm.RemoveVolume(context.Background(), kept)
	})
	if out := must(t, "gc", "--dry-run"); !strings.Contains(out, "would remove volume "+expired+": expired") || strings.Contains(out, kept) {
		t.Errorf("gc --dry-run printed:\n%s", out)
	}
	out := must(t, "gc")
	if !strings.Contains(out, "removed volume "+expired+": expired") || strings.Contains(out, kept) {
		t.Errorf("gc printed:\n%s", out)
	}
	vols, err := vm.ListVolumes(ctx, backend.Filter{Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) != 1 || vols[0].Name != kept {
		t.Errorf("volumes left: %+v", vols)
	}
}

// bench scale makes, uses and removes N sandboxes and accounts for them.
func TestBenchScale(t *testing.T) {
	dockerConfig(t, "image = \""+dockertest.BusyboxImage+"\"")
	var rep scaleReport
	out := must(t, "--json", "bench", "scale", "--n", "5", "--parallel", "3")
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Created != 5 || rep.Execed != 5 || rep.Removed != 5 || rep.PeakAlive != 5 || rep.Failures != 0 || rep.Leaked != 0 {
		t.Errorf("report: %+v", rep)
	}
	if rep.SandboxMemMiB.P50 <= 0 || rep.CreateMs.P50 <= 0 || rep.ExecMs.Max < rep.ExecMs.P50 {
		t.Errorf("measurements: %+v", rep)
	}

	// A command that fails in the sandboxes is reported, and sbx exits 1.
	r := sbx(t, "bench", "scale", "--n", "2", "--cmd", "false")
	r.expect(t, 1)
	if !strings.Contains(r.stdout, "failures 2, leaked 0") || !strings.Contains(r.stdout, "error: exec: false exited 1") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
}
