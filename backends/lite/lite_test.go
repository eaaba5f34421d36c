package lite

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/rootfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"golang.org/x/sys/unix"
)

// envRequire makes the tests fail, instead of skipping, when the host
// cannot run lite sandboxes (CI sets it).
const envRequire = "SBX_REQUIRE_LITE"

// requireHost skips (or, with SBX_REQUIRE_LITE=1, fails) t unless the host
// can run lite sandboxes: root, an OCI runtime, and busybox to build the
// test image from.
func requireHost(t testing.TB) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (uid 0)")
	}
	if _, err := lookRuntime(testRuntime(), ""); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := rootfs.BusyboxPath(); err != nil {
		missing = append(missing, "busybox (apt-get install busybox-static)")
	}
	if len(missing) == 0 {
		return
	}
	msg := "lite backend tests need " + strings.Join(missing, ", ")
	if os.Getenv(envRequire) == "1" {
		t.Fatal(msg + " (" + envRequire + "=1)")
	}
	t.Skip(msg + " (set " + envRequire + "=1 to fail instead)")
}

// testRuntime is the runtime the tests use: env SBX_LITE_RUNTIME, else
// runc.
func testRuntime() string {
	if r := os.Getenv("SBX_LITE_RUNTIME"); r != "" {
		return r
	}
	return "runc"
}

// TestMain removes the busybox root file system the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if busyboxDir != "" {
		os.RemoveAll(busyboxDir)
	}
	os.Exit(code)
}

var (
	busyboxOnce sync.Once
	busyboxDir  string
	busyboxErr  error
)

// busyboxRootfs builds, once per test binary, a minimal root file system:
// a static busybox, its applets as absolute symlinks to /bin/busybox,
// /etc/passwd with root and nobody (65534), and a /tmp.
func busyboxRootfs(t testing.TB) string {
	t.Helper()
	busyboxOnce.Do(func() {
		busyboxDir, busyboxErr = rootfs.Busybox()
	})
	if busyboxErr != nil {
		t.Fatalf("building the busybox root file system: %v", busyboxErr)
	}
	return busyboxDir
}

// testEnv is one test's backend with private state, image and runtime
// folders, and what it needs to check that nothing is left behind.
type testEnv struct {
	cfg   Config
	image string
	made  *madeIDs // the sandbox folders made in cfg.StateDir
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	requireHost(t)
	rootfs := busyboxRootfs(t)
	base := t.TempDir()
	e := &testEnv{
		cfg: Config{
			Runtime:     testRuntime(),
			StateDir:    filepath.Join(base, "state"),
			ImageDir:    filepath.Join(base, "images"),
			RuntimeRoot: filepath.Join(base, "runtime"),
		},
		image: "dir:" + rootfs,
		made:  watchMade(t, filepath.Join(base, "state")),
	}
	// Registered before any sandbox's cleanup, so it runs after all of
	// them.
	t.Cleanup(func() { e.checkNothingLeft(t) })
	t.Cleanup(func() { unmountNullNetNS(e.cfg.RuntimeRoot) })
	return e
}

// unmountNullNetNS unmounts what a newer runsc (2023 on) leaves in its
// root: an empty network namespace its gofers share, bind-mounted at
// ROOT/null-netns (stacked when made concurrently), which keeps the
// folder from being removed.
func unmountNullNetNS(root string) {
	for syscall.Unmount(filepath.Join(root, "null-netns"), syscall.MNT_DETACH) == nil {
	}
}

func (e *testEnv) open(t *testing.T) *Backend {
	t.Helper()
	// Warnings (background work that failed: a standby, a prune) show
	// with a failure of the test.
	b, err := New(e.cfg, WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func (e *testEnv) spec(name string) backend.Spec {
	return backend.Spec{Name: name, Image: e.image, TTL: 30 * time.Minute}
}

// create makes a sandbox destroyed at the end of t.
func create(t *testing.T, b *Backend, spec backend.Spec) *Sandbox {
	t.Helper()
	sb, err := b.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb.(*Sandbox)
}

// checkNothingLeft asserts that the runtime knows no container, nothing is
// mounted under the state folder, no sandbox folder remains and no cgroup
// was left.
func (e *testEnv) checkNothingLeft(t *testing.T) {
	rt, err := lookRuntime(e.cfg.Runtime, e.cfg.RuntimeRoot)
	if err != nil {
		t.Errorf("leak check: %v", err)
		return
	}
	ids, err := rt.list(context.Background())
	if err != nil && !strings.Contains(err.Error(), "no such file") {
		t.Errorf("leak check: %v", err)
	}
	if len(ids) > 0 {
		t.Errorf("leak check: the runtime still has containers %v", ids)
	}
	if mounts, _ := mountsUnder(e.cfg.StateDir); len(mounts) > 0 {
		t.Errorf("leak check: still mounted: %v", mounts)
		for _, m := range mounts {
			unmount(m)
		}
	}
	entries, _ := os.ReadDir(e.cfg.StateDir)
	for _, en := range entries {
		if statedir.ValidID(en.Name()) {
			t.Errorf("leak check: sandbox folder %s is left", en.Name())
		}
	}
	if claims, err := egressClaims(); err == nil {
		for n, c := range claims {
			if c.StateDir == e.cfg.StateDir {
				t.Errorf("leak check: egress network %s of sandbox %s is left", egressName(n), c.ID)
			}
		}
	}
	// runsc's gofer and sandbox name their bundle, in the state folder:
	// one left runs on after its container is gone.
	if procs := processesNaming(e.cfg.StateDir + "/"); len(procs) > 0 {
		t.Errorf("leak check: processes of the state folder left: %q", procs)
	}
	if vols, err := os.ReadDir(filepath.Join(e.cfg.StateDir, volumesDir)); err == nil {
		t.Errorf("leak check: the volumes folder is left, holding %d entries", len(vols))
	}
	// Cgroups are removed by the runtime; give the kernel a moment. Only
	// this test's sandboxes count: another test binary (the CLI's, the
	// server's) runs lite sandboxes under the same parent at the same time.
	ours := e.made.ids(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		leaked := cgroupsOf(ours)
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("leak check: cgroups left: %v", leaked)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cgroupsOf returns the lite cgroups of the sandboxes ids, in every
// hierarchy (a cgroup is named for its sandbox's ID and generation).
func cgroupsOf(ids map[string]bool) []string {
	var out []string
	for id := range ids {
		for _, root := range cgroupRoots() {
			m, _ := filepath.Glob(filepath.Join(root, cgroupParent, id+"*"))
			out = append(out, m...)
		}
	}
	slices.Sort(out)
	return out
}

// madeIDs records the names of the folders made in a state folder from
// when it is watched (inotify), so that a leak check can tell the test's
// own sandboxes from those other processes make meanwhile.
type madeIDs struct {
	dir  string
	fd   int             // the inotify instance, non-blocking
	seen map[string]bool // the IDs its events named so far
}

// watchMade makes dir (as New would) and watches it until t ends.
func watchMade(t *testing.T, dir string) *madeIDs {
	t.Helper()
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		t.Fatalf("inotify watch of %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &madeIDs{dir: dir, fd: fd, seen: map[string]bool{}}
}

// ids returns the sandbox IDs of the folders made in the watched folder
// so far (it was empty when watched); t fails if the kernel dropped
// events (the IDs would be incomplete).
func (m *madeIDs) ids(t *testing.T) map[string]bool {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(m.fd, buf)
		if n <= 0 || err != nil {
			break
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				t.Errorf("leak check: inotify dropped events of %s", m.dir)
			}
			m.add(strings.TrimRight(string(name), "\x00"))
		}
	}
	return maps.Clone(m.seen)
}

func (m *madeIDs) add(name string) {
	if statedir.ValidID(name) {
		m.seen[name] = true
	}
}

// processesNaming returns the command lines of the host's processes
// that name s (a path) in an argument.
func processesNaming(s string) []string {
	files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && strings.Contains(string(data), s) {
			out = append(out, strings.ReplaceAll(strings.TrimSuffix(string(data), "\x00"), "\x00", " "))
		}
	}
	return out
}

func TestSmoke(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	start := time.Now()
	sb := create(t, b, e.spec("smoke"))
	t.Logf("create: %v", time.Since(start))
	start = time.Now()
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "echo hello; id -u; pwd; hostname"})
	t.Logf("exec: %v", time.Since(start))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello\n0\n/\n" + sb.ID() + "\n"; res.ExitCode != 0 || string(res.Stdout) != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 0, %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
}

// TestLeakCheckOwnCgroups checks that the leak check counts the cgroups of
// the sandboxes its test made, also those whose folder is gone, and not
// those of another process's sandboxes under the same parent.
func TestLeakCheckOwnCgroups(t *testing.T) {
	root := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(root); err != nil {
		root = "/sys/fs/cgroup" // cgroup v2
	}
	var dirs []string
	t.Cleanup(func() { // after the leak check: registered before it
		for _, d := range dirs {
			syscall.Rmdir(d)
		}
	})
	e := newTestEnv(t)
	mkCgroup := func(id string) string {
		d := filepath.Join(root, cgroupParent, id)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
		return d
	}
	foreignID, _ := statedir.NewID()
	ownID, _ := statedir.NewID()
	foreign := mkCgroup(foreignID)
	// A sandbox of this test whose folder came and went.
	if err := os.Mkdir(filepath.Join(e.cfg.StateDir, ownID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.cfg.StateDir, ownID)); err != nil {
		t.Fatal(err)
	}
	own := mkCgroup(ownID + genSuffix(1))
	got := cgroupsOf(e.made.ids(t))
	if !slices.Contains(got, own) || slices.Contains(got, foreign) {
		t.Fatalf("the leak check's cgroups: %v, want %s and not %s", got, own, foreign)
	}
	if err := syscall.Rmdir(own); err != nil {
		t.Fatal(err)
	}
}
