package lite

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

func TestVolumes(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	checkVolumes(t, b, e.spec)
}

// checkVolumes runs the named-volume cases on b (rootful, or rootless from
// TestRootlessHelper); spec makes a Spec of the test image.
func checkVolumes(t *testing.T, b *Backend, spec func(name string) backend.Spec) {
	ctx := t.Context()
	rootless := b.userns != nil
	run, err := statedir.NewID()
	if err != nil {
		t.Fatal(err)
	}
	session := "voltest-" + run
	folder, archive := volumeSources(t)

	shared, err := b.CreateVolume(ctx, backend.VolumeSpec{Session: session, Labels: map[string]string{"lite.test": run},
		FromPath: folder, TTL: time.Hour})
	if err != nil {
		t.Fatalf("CreateVolume from a folder: %v", err)
	}
	if want := "sbx-" + session + "-vol-"; !strings.HasPrefix(shared, want) {
		t.Errorf("picked name %q, want %s<random>", shared, want)
	}
	tarred := "tarred-" + run
	if got, err := b.CreateVolume(ctx, backend.VolumeSpec{Name: tarred, Session: session, FromPath: archive}); err != nil || got != tarred {
		t.Fatalf("CreateVolume from a .tar.gz: %q, %v; want %q", got, err, tarred)
	}
	t.Cleanup(func() {
		for _, n := range []string{shared, tarred} {
			if err := b.RemoveVolume(context.Background(), n); err != nil {
				t.Errorf("cleanup: RemoveVolume(%s): %v", n, err)
			}
		}
	})
	if _, err := b.CreateVolume(ctx, backend.VolumeSpec{Name: tarred}); !errors.Is(err, backend.ErrAlreadyExists) {
		t.Errorf("CreateVolume of an existing name: %v, want ErrAlreadyExists", err)
	}
	for _, bad := range []string{"../x", ".hidden", "a/b", "-a", strings.Repeat("a", 200)} {
		if _, err := b.CreateVolume(ctx, backend.VolumeSpec{Name: bad, FromPath: folder}); !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), "volume name") {
			t.Errorf("CreateVolume(%q): %v, want ErrInvalidConfig naming the volume name", bad, err)
		}
		if err := b.RemoveVolume(ctx, bad); !errors.Is(err, backend.ErrInvalidConfig) {
			t.Errorf("RemoveVolume(%q): %v, want ErrInvalidConfig", bad, err)
		}
	}
	if _, err := b.CreateVolume(ctx, backend.VolumeSpec{Name: "missing-" + run, FromPath: filepath.Join(folder, "no-such")}); !errors.Is(err, backend.ErrInvalidConfig) {
		t.Errorf("CreateVolume from a missing path: %v, want ErrInvalidConfig", err)
	}
	entries, _ := os.ReadDir(b.volumesDir())
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	if want := slices.Sorted(slices.Values([]string{shared, tarred})); !slices.Equal(names, want) {
		t.Errorf("volumes folder holds %v, want %v: failed creates leave nothing", names, want)
	}

	mount := func(name string, vols ...backend.Volume) *Sandbox {
		s := spec(name)
		s.Session = session
		s.Volumes = vols
		return create(t, b, s)
	}
	a := mount("vol-a",
		backend.Volume{Type: backend.VolumeNamed, Source: shared, Target: "/shared"},
		backend.Volume{Type: backend.VolumeNamed, Source: tarred, Target: "/tar", ReadOnly: true})
	want := "0 755\n0 750\n0 640\n0 555\n0 444\nsub/f\nfolder\nlink\nro\nsub\n"
	if out := mustExec(t, a, "cd /shared && stat -c '%u %a' . sub sub/f ro ro/g && readlink link && cat link && ls -A"); out != want {
		t.Errorf("filled from a folder: %q, want %q (modes kept, root's, no FIFO)", out, want)
	}
	want = "0:0 755\n1234:1235 700\n1234:1235 600\ntar\na\nescape\n"
	if rootless {
		want = "0:0 755\n0:0 700\n0:0 600\ntar\na\nescape\n" // the user's: root inside
	}
	if out := mustExec(t, a, "stat -c '%u:%g %a' /tar /tar/a /tar/a/x && cat /tar/a/x && ls -A /tar"); out != want {
		t.Errorf("filled from a .tar.gz: %q, want %q", out, want)
	}
	if res, err := a.Exec(ctx, backend.ExecRequest{Shell: "echo x > /tar/new"}); err != nil || res.ExitCode == 0 {
		t.Errorf("writing a read-only volume: exit %d, %v; want a failure", res.ExitCode, err)
	}
	if err := a.WriteFile(ctx, "/tar/new", strings.NewReader("x"), 0o644); err == nil {
		t.Error("WriteFile into a read-only volume worked")
	}

	// Two sandboxes (here at two targets) see each other's writes at once,
	// in the sandbox and through the host-side file access.
	c := mount("vol-c", backend.Volume{Type: backend.VolumeNamed, Source: shared, Target: "/data"})
	mustExec(t, a, "echo from-a > /shared/from-a")
	if out := mustExec(t, c, "cat /data/from-a && echo from-c > /data/from-c"); out != "from-a\n" {
		t.Errorf("c reads a's file: %q", out)
	}
	if out := mustExec(t, a, "cat /shared/from-c"); out != "from-c\n" {
		t.Errorf("a reads c's file: %q", out)
	}
	if err := c.WriteFile(ctx, "/data/host", strings.NewReader("host side"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readSandboxFile(ctx, a, "/shared/host"); err != nil || string(got) != "host side" {
		t.Errorf("a host-side write through c, read through a: %q, %v", got, err)
	}
	if out := mustExec(t, a, "cat /shared/host"); out != "host side" {
		t.Errorf("a host-side write seen inside: %q", out)
	}

	list := func(f backend.Filter) []backend.VolumeInfo {
		t.Helper()
		vols, err := b.ListVolumes(ctx, f)
		if err != nil {
			t.Fatalf("ListVolumes(%+v): %v", f, err)
		}
		return vols
	}
	volNames := func(vols []backend.VolumeInfo) []string {
		var out []string
		for _, v := range vols {
			out = append(out, v.Name)
		}
		return out
	}
	if got := volNames(list(backend.Filter{Session: session})); !slices.Equal(got, slices.Sorted(slices.Values([]string{shared, tarred}))) {
		t.Errorf("ListVolumes(session) = %v", got)
	}
	byLabel := list(backend.Filter{Labels: map[string]string{"lite.test": run}, Name: "ignored"})
	if len(byLabel) != 1 || byLabel[0].Name != shared {
		t.Fatalf("ListVolumes(label) = %v, want [%s]", volNames(byLabel), shared)
	}
	v := byLabel[0]
	if v.Session != session || v.Labels[backend.LabelBackend] != Name || v.Labels[backend.LabelSession] != session ||
		v.Labels[backend.LabelExpiresAt] == "" || v.ExpiresAt.Sub(v.CreatedAt) != time.Hour || time.Since(v.CreatedAt) > time.Minute {
		t.Errorf("volume info %+v", v)
	}
	if got := list(backend.Filter{Session: session + "-other"}); len(got) != 0 {
		t.Errorf("ListVolumes(another session) = %v", volNames(got))
	}

	if err := b.RemoveVolume(ctx, shared); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("RemoveVolume of a mounted volume: %v, want in use", err)
	}

	t.Run("fork", func(t *testing.T) {
		forks, err := a.Fork(ctx, backend.ForkRequest{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		f := forks[0]
		defer f.Destroy(ctx)
		if out := mustExec(t, f, "cat /shared/from-c && echo from-fork > /shared/from-fork"); out != "from-c\n" {
			t.Errorf("the fork reads the volume: %q", out)
		}
		if out := mustExec(t, a, "cat /shared/from-fork"); out != "from-fork\n" {
			t.Errorf("the parent reads the fork's write: %q", out)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		mustExec(t, a, "echo layer > /root/layer-file && echo vol > /shared/in-volume")
		snap, err := a.Snapshot(ctx, backend.SnapshotRequest{Ref: "voltest-" + run})
		if err != nil {
			t.Fatal(err)
		}
		defer b.RemoveSnapshot(ctx, snap.Ref)
		s := spec("from-snapshot")
		s.Image = snap.Ref
		sb := create(t, b, s)
		if out := mustExec(t, sb, "cat /root/layer-file; ls -A /shared /tar; echo end"); out != "layer\n/shared:\n\n/tar:\nend\n" {
			t.Errorf("a sandbox from the snapshot: %q, want the layer's file and empty mount points", out)
		}
	})

	t.Run("reset", func(t *testing.T) {
		if err := c.Reset(ctx); err != nil {
			t.Fatal(err)
		}
		if out := mustExec(t, c, "cat /data/from-a"); out != "from-a\n" {
			t.Errorf("after Reset: %q, want the volume as it was", out)
		}
	})

	t.Run("a volume not made yet is made", func(t *testing.T) {
		name := "cache-" + run
		s := spec("cache")
		s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: name, Target: "/cache"}}
		sb, err := b.Create(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, sb, "echo kept > /cache/f")
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		vols, err := b.ListVolumes(ctx, backend.Filter{})
		if err != nil || !slices.ContainsFunc(vols, func(v backend.VolumeInfo) bool { return v.Name == name }) {
			t.Fatalf("ListVolumes after a Create that named %s: %v, %v", name, vols, err)
		}
		sb, err = b.Create(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if out := mustExec(t, sb, "cat /cache/f"); out != "kept\n" {
			t.Errorf("the volume in a second sandbox: %q", out)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.RemoveVolume(ctx, name); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("bad specs create nothing", func(t *testing.T) {
		before, _ := b.List(ctx, backend.Filter{})
		for _, tc := range []struct {
			vol  backend.Volume
			want string
		}{
			{backend.Volume{Type: backend.VolumeNamed, Source: "../" + shared, Target: "/x"}, "volume name"},
			{backend.Volume{Type: backend.VolumeNamed, Source: shared, Target: "x"}, "must be absolute"},
		} {
			s := spec("bad")
			s.Volumes = []backend.Volume{tc.vol}
			sb, err := b.Create(ctx, s)
			if err == nil {
				sb.Destroy(ctx)
				t.Errorf("Create with volume %+v worked", tc.vol)
				continue
			}
			if !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create with volume %+v: %v, want ErrInvalidConfig saying %q", tc.vol, err, tc.want)
			}
		}
		if after, _ := b.List(ctx, backend.Filter{}); len(after) != len(before) {
			t.Errorf("sandboxes before %d, after %d", len(before), len(after))
		}
	})

	for _, sb := range []*Sandbox{a, c} {
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.RemoveVolume(ctx, shared); err != nil {
		t.Fatalf("RemoveVolume: %v", err)
	}
	if _, err := os.Stat(b.volumeDir(shared)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the volume's folder is left: %v", err)
	}
	if err := b.RemoveVolume(ctx, shared); err != nil {
		t.Errorf("RemoveVolume of a removed volume: %v, want nil", err)
	}
	if got := volNames(list(backend.Filter{Session: session})); !slices.Equal(got, []string{tarred}) {
		t.Errorf("ListVolumes after RemoveVolume = %v", got)
	}
}

// volumeSources writes a folder and a .tar.gz to fill volumes from.
func volumeSources(t *testing.T) (folder, archive string) {
	dir := t.TempDir()
	folder = filepath.Join(dir, "folder")
	for _, d := range []struct {
		name string
		mode fs.FileMode
	}{{"", 0o700}, {"sub", 0o750}, {"ro", 0o755}} {
		if err := os.Mkdir(filepath.Join(folder, d.name), d.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []struct {
		name, data string
		mode       fs.FileMode
	}{{"sub/f", "folder\n", 0o640}, {"ro/g", "g\n", 0o444}} {
		p := filepath.Join(folder, f.name)
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode) // umask
	}
	os.Chmod(filepath.Join(folder, "sub"), 0o750)
	if err := os.Chmod(filepath.Join(folder, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	// Before TempDir's cleanup, which a user other than root could not do.
	t.Cleanup(func() { os.Chmod(filepath.Join(folder, "ro"), 0o755) })
	if err := os.Symlink("sub/f", filepath.Join(folder, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(folder, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}

	archive = filepath.Join(dir, "contents.tar.gz")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "./a/", Typeflag: tar.TypeDir, Mode: 0o700, Uid: 1234, Gid: 1235},
		{Name: "./a/x", Typeflag: tar.TypeReg, Mode: 0o600, Uid: 1234, Gid: 1235, Size: 4},
		{Name: "../../escape", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			io.WriteString(tw, "tar\n")
		}
	}
	for _, c := range []io.Closer{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return folder, archive
}

// TestVolumeLeftovers: what a killed CreateVolume or RemoveVolume leaves
// is not listed, and PruneCaches removes it unless a live process holds
// it.
func TestVolumeLeftovers(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	ctx := t.Context()
	old := time.Now().Add(-2 * newVolumeGrace)
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(b.volumesDir(), name)
		if err := os.MkdirAll(filepath.Join(p, volumeDataDir, "ro"), 0o755); err != nil {
			t.Fatal(err)
		}
		rec := `{"name":"` + strings.TrimPrefix(strings.TrimPrefix(name, newVolumePrefix), oldVolumePrefix) + `"}`
		if err := os.WriteFile(filepath.Join(p, volumeRecFile), []byte(rec), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(p, volumeDataDir, "ro"), 0o555)
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	killedNew := mk(newVolumePrefix+"killed", old)
	killedOld := mk(oldVolumePrefix+"gone-123", old)
	young := mk(newVolumePrefix+"young", time.Now())
	held := mk(newVolumePrefix+"held", old)
	lock, err := lockDir(held, syscall.LOCK_EX)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if vols, err := b.ListVolumes(ctx, backend.Filter{}); err != nil || len(vols) != 0 {
		t.Errorf("ListVolumes = %v, %v; want none of the leftovers", vols, err)
	}
	names, err := b.PruneCaches(ctx, true)
	if names = withoutEgressNets(names); err != nil || !slices.Equal(names, []string{killedNew, killedOld}) {
		t.Errorf("PruneCaches(dry run) = %v, %v; want %v", names, err, []string{killedNew, killedOld})
	}
	if _, err := os.Stat(killedNew); err != nil {
		t.Errorf("a dry run removed %s: %v", killedNew, err)
	}
	names, err = b.PruneCaches(ctx, false)
	if err != nil || !slices.Equal(names, []string{killedNew, killedOld}) {
		t.Errorf("PruneCaches = %v, %v; want %v", names, err, []string{killedNew, killedOld})
	}
	for p, kept := range map[string]bool{killedNew: false, killedOld: false, young: true, held: true} {
		if _, err := os.Stat(p); (err == nil) != kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(p), err == nil, kept)
		}
	}
	lock.Close()
	removeTree(young)
	removeTree(held)
	if names, err := b.PruneCaches(ctx, false); err != nil || len(names) != 0 {
		t.Errorf("PruneCaches with nothing left to prune = %v, %v", names, err)
	}
	if _, err := os.Stat(b.volumesDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("PruneCaches left the empty volumes folder: %v", err)
	}
}
