package lite

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

func TestReset(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	spec := e.spec("reset")
	spec.WorkingDir = "/work"
	sb := create(t, b, spec)
	ctx := t.Context()

	// The first Reset runs the container again in place; it leaves a
	// standby, which the later ones start instead.
	for round := range 3 {
		mustExec(t, sb, "echo changed > /work/new; rm /bin/cat; sleep 1000 & echo started")
		before, _ := readMeta(sb.dir)
		start := time.Now()
		if err := sb.Reset(ctx); err != nil {
			t.Fatalf("Reset %d: %v", round, err)
		}
		t.Logf("Reset %d took %v", round, time.Since(start))
		after, _ := readMeta(sb.dir)
		wantGen := max(round, 0)
		if after.Gen != wantGen {
			t.Errorf("Reset %d: generation %d, want %d (in place first, then the standby)", round, after.Gen, wantGen)
		}
		out := mustExec(t, sb, `ls /work; [ -e /bin/cat ] && echo cat-back; cat /proc/[0-9]*/comm | grep -c '^sleep$' || true; pwd`)
		if out != "cat-back\n0\n/work\n" {
			t.Errorf("after Reset %d: %q, want an empty /work, /bin/cat back, no sleep (only grep matches) and the working folder", round, out)
		}
		if after.InitPID == before.InitPID {
			t.Errorf("the container's first process is the same after Reset %d (pid %d)", round, after.InitPID)
		}
		if info, err := sb.Info(ctx); err != nil || info.State != backend.StateRunning || info.Name != "reset" {
			t.Errorf("Info after Reset %d = %+v, %v", round, info, err)
		}
		if st, err := b.runtime.state(ctx, after.ContainerID); st != "running" {
			t.Errorf("after Reset %d the runtime reports the container %q, %v; want running", round, st, err)
		}
		// Files through the host side reach the new generation's layer.
		if err := sb.WriteFile(ctx, "/work/host", strings.NewReader("from the host"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := mustExec(t, sb, "cat /work/host"); out != "from the host" {
			t.Errorf("after Reset %d a host-side write reads back as %q", round, out)
		}

		b.bg.Wait() // the old generation goes and a standby comes
		m, _ := readMeta(sb.dir)
		if !m.Standby.ready() || m.Standby.Gen != m.Gen+1 || len(m.Retired) != 0 {
			t.Fatalf("after Reset %d and its background work: standby %+v, retired %v; want a ready standby of generation %d", round, m.Standby, m.Retired, m.Gen+1)
		}
		if st, err := b.runtime.state(ctx, containerID(sb.id, m.Standby.Gen)); st != "created" {
			t.Errorf("standby container state %q, %v; want created", st, err)
		}
		if round > 0 {
			old := before.Gen
			if st, _ := b.runtime.state(ctx, containerID(sb.id, old)); st != "" {
				t.Errorf("generation %d's container is left (%s)", old, st)
			}
			if dirs := cgroupDirs(cgroupName(sb.id, old)); len(dirs) > 0 {
				t.Errorf("generation %d's cgroups are left: %v", old, dirs)
			}
			if _, err := os.Stat(upperDir(sb.dir, old)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("generation %d's writable layer is left: %v", old, err)
			}
		}
	}
	mounts, _ := mountsUnder(sb.dir)
	if len(mounts) != 2 {
		t.Errorf("mounts under the sandbox = %v; want the running and the standby root", mounts)
	}

	// Destroy removes the standby too: container, cgroup and mount.
	m, _ := readMeta(sb.dir)
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	for _, gen := range []int{m.Gen, m.Standby.Gen} {
		if st, _ := b.runtime.state(ctx, containerID(sb.id, gen)); st != "" {
			t.Errorf("after Destroy generation %d's container is left (%s)", gen, st)
		}
		if dirs := cgroupDirs(cgroupName(sb.id, gen)); len(dirs) > 0 {
			t.Errorf("after Destroy generation %d's cgroups are left: %v", gen, dirs)
		}
	}
	if mounts, _ := mountsUnder(sb.dir); len(mounts) > 0 {
		t.Errorf("after Destroy mounts are left: %v", mounts)
	}
}

// TestResetStandbyGone: a standby killed from outside is not used; Reset
// falls back to resetting in place and makes a new one.
func TestResetStandbyGone(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("standby-gone"))
	ctx := t.Context()
	if err := sb.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	b.bg.Wait()
	m, _ := readMeta(sb.dir)
	if !m.Standby.ready() {
		t.Fatalf("no standby after a Reset: %+v", m.Standby)
	}
	syscall.Kill(m.Standby.InitPID, syscall.SIGKILL)
	killInit(m.Standby.InitPID, m.Standby.InitStart)
	mustExec(t, sb, "echo x > /left")
	if err := sb.Reset(ctx); err != nil {
		t.Fatalf("Reset with a dead standby: %v", err)
	}
	after, _ := readMeta(sb.dir)
	if after.Gen != m.Gen {
		t.Errorf("generation %d after a Reset with a dead standby, want %d (in place)", after.Gen, m.Gen)
	}
	if out := mustExec(t, sb, "ls /left 2>/dev/null; echo ok"); out != "ok\n" {
		t.Errorf("after Reset: %q, want /left gone", out)
	}
	b.bg.Wait()
	if m, _ := readMeta(sb.dir); !m.Standby.ready() {
		t.Errorf("no new standby after the fallback Reset: %+v", m.Standby)
	}
}

// TestDestroyAfterCrash makes a sandbox in a child process that exits
// without destroying it, then destroys it from this one.
func TestDestroyAfterCrash(t *testing.T) {
	if os.Getenv("SBX_LITE_CRASH_HELPER") == "1" {
		return
	}
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("crash"))
	_ = sb

	t.Run("creator exited", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "SBX_LITE_CRASH_HELPER=1",
			"SBX_LITE_STATE="+e.cfg.StateDir, "SBX_LITE_IMAGES="+e.cfg.ImageDir,
			"SBX_LITE_RUNTIME_ROOT="+e.cfg.RuntimeRoot, "SBX_LITE_IMAGE="+e.image)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		var id string
		for line := range strings.Lines(string(out)) {
			if after, ok := strings.CutPrefix(strings.TrimSpace(line), "created "); ok {
				id = after
			}
		}
		if id == "" {
			t.Fatalf("helper printed no ID:\n%s", out)
		}
		got, err := b.Get(t.Context(), id)
		if err != nil {
			t.Fatalf("Get after the creator exited: %v", err)
		}
		res, err := got.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", "alive"}})
		if err != nil || string(res.Stdout) != "alive\n" {
			t.Errorf("Exec after the creator exited = %q, %v", res.Stdout, err)
		}
		if err := got.Destroy(t.Context()); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	})

	t.Run("half-made sandbox", func(t *testing.T) {
		// What a crash between mounting and starting leaves: a meta file
		// and a mounted overlay, no container.
		id, _ := statedir.NewID()
		dir := filepath.Join(b.dir, id)
		m := &meta{ID: id, Name: "half", ContainerID: containerID(id, 0), Runtime: b.runtime.path,
			RuntimeRoot: b.runtime.root, Lower: busyboxRootfs(t), CreatedAt: time.Now()}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeMeta(dir, m); err != nil {
			t.Fatal(err)
		}
		if err := b.makeRootfs(m, dir, 0); err != nil {
			t.Fatal(err)
		}
		infos, err := b.List(t.Context(), backend.Filter{Name: "half"})
		if err != nil || len(infos) != 1 || infos[0].State != backend.StateCreating {
			t.Errorf("List of a half-made sandbox = %+v, %v; want it, creating", infos, err)
		}
		got, err := b.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if err := got.Destroy(t.Context()); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the sandbox folder is left: %v", err)
		}
	})

	t.Run("container killed from outside", func(t *testing.T) {
		sb := create(t, b, e.spec("killed"))
		m, _ := readMeta(sb.dir)
		syscall.Kill(m.InitPID, syscall.SIGKILL)
		deadline := time.Now().Add(5 * time.Second)
		for {
			info, _ := sb.Info(t.Context())
			if info.State == backend.StateExited {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("State = %s after the container's first process was killed, want exited", info.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
		_, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"true"}})
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Errorf("Exec in a stopped sandbox: %v, want ErrUnavailable", err)
		}
	})
}

// TestCrashHelper is the child process of TestDestroyAfterCrash: it
// creates a sandbox and exits without destroying it.
func TestCrashHelper(t *testing.T) {
	if os.Getenv("SBX_LITE_CRASH_HELPER") != "1" {
		t.Skip("helper process of TestDestroyAfterCrash")
	}
	b, err := New(Config{Runtime: testRuntime(), StateDir: os.Getenv("SBX_LITE_STATE"),
		ImageDir: os.Getenv("SBX_LITE_IMAGES"), RuntimeRoot: os.Getenv("SBX_LITE_RUNTIME_ROOT")})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Create(context.Background(), backend.Spec{Name: "crash-child", Image: os.Getenv("SBX_LITE_IMAGE")})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("created", sb.ID())
	os.Stdout.WriteString("created " + sb.ID() + "\n")
	os.Exit(0)
}

func TestCreateRefuses(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	for _, c := range []struct {
		name string
		set  func(*backend.Spec)
		want error
	}{
		{"missing image folder", func(s *backend.Spec) { s.Image = "dir:/no/such/rootfs" }, backend.ErrNotFound},
		{"relative working dir", func(s *backend.Spec) { s.WorkingDir = "work" }, backend.ErrInvalidConfig},
		{"unknown user", func(s *backend.Spec) { s.User = "nosuchuser" }, backend.ErrInvalidConfig},
		{"missing volume", func(s *backend.Spec) {
			s.Volumes = []backend.Volume{{Type: backend.VolumeBind, Source: "/no/such/dir", Target: "/x"}}
		}, backend.ErrInvalidConfig},
		{"ports", func(s *backend.Spec) { s.Ports = []backend.Port{{Port: 80}} }, errors.ErrUnsupported},
		{"bridge network", func(s *backend.Spec) { s.Network = "bridge" }, errors.ErrUnsupported},
		{"unknown security opt", func(s *backend.Spec) { s.SecurityOpt = []string{"apparmor=foo"} }, errors.ErrUnsupported},
		{"image command of a folder", func(s *backend.Spec) { s.ImageCommand = true }, backend.ErrInvalidConfig},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := e.spec("refused")
			c.set(&spec)
			sb, err := b.Create(t.Context(), spec)
			if err == nil {
				sb.Destroy(t.Context())
				t.Fatal("Create succeeded")
			}
			if !errors.Is(err, c.want) {
				t.Errorf("Create: %v, want %v", err, c.want)
			}
		})
	}
	if infos, _ := b.List(t.Context(), backend.Filter{Name: "refused"}); len(infos) > 0 {
		t.Errorf("refused creates left %d sandboxes", len(infos))
	}
}

// TestLimits checks that the cgroup limits and the default hardening reach
// the sandbox.
func TestLimits(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	spec := e.spec("limits")
	spec.Resources = backend.Resources{CPUs: 0.5, MemoryBytes: 64 << 20, PidsLimit: 50}
	spec.User = "65534"
	sb := create(t, b, spec)
	m, _ := readMeta(sb.dir)
	read := func(p string) string {
		data, err := os.ReadFile(p)
		if err != nil {
			return "error: " + err.Error()
		}
		return strings.TrimSpace(string(data))
	}
	cg := "/sandboxkit-lite/" + m.ID
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		// cgroup v2
		for file, want := range map[string]string{"memory.max": "67108864", "pids.max": "50", "cpu.max": "50000 100000"} {
			if got := read("/sys/fs/cgroup" + cg + "/" + file); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	} else {
		for file, want := range map[string]string{
			"memory/" + cg + "/memory.limit_in_bytes": "67108864",
			"pids/" + cg + "/pids.max":                "50",
			"cpu/" + cg + "/cpu.cfs_quota_us":         "50000",
		} {
			if got := read("/sys/fs/cgroup/" + file); got != want {
				t.Errorf("%s = %q, want %q", file, got, want)
			}
		}
	}
	out := mustExec(t, sb, `id -u; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; hostname; cat /proc/kcore 2>&1 | head -c 0; ls /sys/firmware 2>&1 | wc -l; ip link 2>/dev/null | grep -c '^[0-9]' || cat /proc/net/dev | tail -n +3 | wc -l`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 6 || lines[0] != "65534" ||
		!strings.HasSuffix(lines[1], "0000000000000000") || // a non-root user has no effective capabilities
		!strings.HasSuffix(lines[2], "1") || !strings.HasSuffix(lines[3], "2") ||
		lines[4] != m.ID || lines[5] != "0" {
		t.Errorf("inside the sandbox: %q, want uid 65534, no effective caps, no_new_privs, seccomp filter mode, hostname %s, masked /sys/firmware", out, m.ID)
	}
	if len(lines) > 6 && lines[6] != "1" {
		t.Errorf("network namespace has %s interfaces, want only lo", lines[6])
	}
	// Root in the sandbox has Docker's default capabilities, not more.
	out = mustExec(t, sb, `grep CapEff /proc/self/status`)
	_ = out
	res, err := sb.Exec(t.Context(), backend.ExecRequest{User: "0", Shell: `grep CapEff /proc/self/status; unshare -n true 2>&1 || echo unshare-refused; mount -t tmpfs t /mnt 2>&1 || echo mount-refused`})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); !strings.Contains(got, "CapEff:\t00000000a80425fb") ||
		!strings.Contains(got, "unshare-refused") || !strings.Contains(got, "mount-refused") {
		t.Errorf("root in the sandbox: %q, want Docker's default capabilities (a80425fb) and unshare and mount refused", got)
	}
}
