package lite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// rootlessUID is the user the rootless tests run as: nobody, which every
// Debian host has.
const rootlessUID = 65534

// TestRootless runs TestRootlessHelper, a copy of this test binary, as
// the unprivileged user nobody: the lite backend then runs its sandboxes
// in user namespaces (see userNS). The image is a copy of the busybox root
// file system that belongs to nobody, as a rootless user's own images do.
func TestRootless(t *testing.T) {
	requireHost(t)
	if _, err := probeUserNS(); err != nil {
		t.Fatalf("this host cannot run rootless sandboxes: %v", err)
	}
	base, err := os.MkdirTemp("", "sbx-lite-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	defer removeTree(base)
	os.Chmod(base, 0o755)
	home := filepath.Join(base, "home")
	image := filepath.Join(base, "image")
	rootImage := filepath.Join(base, "root-image")
	for _, d := range []string{home, image, rootImage} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("cp", "-a", busyboxRootfs(t)+"/.", image).CombinedOutput(); err != nil {
		t.Fatalf("copying the image: %v %s", err, out)
	}
	for _, d := range []string{home, image} {
		if out, err := exec.Command("chown", "-R", strconv.Itoa(rootlessUID)+":"+strconv.Itoa(rootlessUID), d).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v %s", err, out)
		}
	}
	bin := filepath.Join(base, "lite.test")
	if out, err := exec.Command("cp", os.Args[0], bin).CombinedOutput(); err != nil {
		t.Fatalf("copying the test binary: %v %s", err, out)
	}
	os.Chmod(bin, 0o755)

	cmd := exec.Command(bin, "-test.run=^TestRootlessHelper$", "-test.v", "-test.count=1")
	cmd.Dir = home
	cmd.Env = []string{
		"SBX_LITE_ROOTLESS_HELPER=1", "SBX_LITE_ROOTLESS_BASE=" + base,
		"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: rootlessUID, Gid: rootlessUID}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", rootlessUID, out)
	if err != nil {
		t.Fatalf("the rootless run failed: %v", err)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestRootlessHelper")) {
		t.Fatal("the rootless run did not pass TestRootlessHelper")
	}
	// Nothing of the sandboxes is left: no state, no container.
	entries, _ := os.ReadDir(filepath.Join(home, "state"))
	for _, e := range entries {
		if e.Name() != "bin" {
			t.Errorf("left in the state folder: %s", e.Name())
		}
	}
	if ids, _ := (&ociRuntime{path: mustRuntime(t), name: "runc", root: filepath.Join(home, "runtime")}).list(t.Context()); len(ids) > 0 {
		t.Errorf("containers left: %v", ids)
	}
}

func mustRuntime(t *testing.T) string {
	rt, err := lookRuntime(testRuntime(), "")
	if err != nil {
		t.Fatal(err)
	}
	return rt.path
}

// TestRootlessHelper is TestRootless's part that runs as nobody.
func TestRootlessHelper(t *testing.T) {
	if os.Getenv("SBX_LITE_ROOTLESS_HELPER") != "1" {
		t.Skip("run by TestRootless")
	}
	base := os.Getenv("SBX_LITE_ROOTLESS_BASE")
	home := filepath.Join(base, "home")
	cfg := Config{
		Runtime:     testRuntime(),
		StateDir:    filepath.Join(home, "state"),
		ImageDir:    filepath.Join(home, "images"),
		RuntimeRoot: filepath.Join(home, "runtime"),
	}
	open := func(t *testing.T) *Backend {
		b, err := New(cfg)
		if err != nil {
			t.Fatalf("New as uid %d: %v", os.Geteuid(), err)
		}
		if b.userns == nil {
			t.Fatal("the backend is not rootless")
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	b := open(t)
	ctx := t.Context()
	image := "dir:" + filepath.Join(base, "image")

	t.Run("refused", func(t *testing.T) {
		_, err := b.Create(ctx, backend.Spec{Image: image, Resources: backend.Resources{MemoryBytes: 64 << 20}})
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "mem_limit") {
			t.Errorf("a memory limit: %v; want unsupported, naming mem_limit", err)
		}
		_, err = b.Create(ctx, backend.Spec{Image: "dir:" + filepath.Join(base, "root-image")})
		if !errors.Is(err, backend.ErrInvalidConfig) || !strings.Contains(err.Error(), "belongs to uid 0") {
			t.Errorf("an image of root: %v; want an error saying whose it is", err)
		}
	})

	sbx, err := b.Create(ctx, backend.Spec{Name: "rootless", Image: image, WorkingDir: "/work"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	sb := sbx.(*Sandbox)
	defer func() {
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
		if _, err := os.Stat(sb.dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the sandbox folder is left: %v", err)
		}
	}()
	run := func(t *testing.T, sb backend.Sandbox, shell string) string {
		t.Helper()
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: shell})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: exit %d, %v\n%s%s", shell, res.ExitCode, err, res.Stdout, res.Stderr)
		}
		return string(res.Stdout)
	}
	want := "0\n/work\nhi\n0 " + strconv.Itoa(os.Geteuid()) + " 1\n"
	if out := run(t, sb, "id -u; pwd; echo hi > /root/f && cat /root/f; tr -s ' ' < /proc/self/uid_map | sed 's/^ //'"); out != want {
		t.Errorf("in the sandbox: %q, want %q (root inside, mapped to this user only)", out, want)
	}

	t.Run("host-side files", func(t *testing.T) {
		if err := sb.WriteFile(ctx, "/work/host", strings.NewReader("from the host"), 0o640); err != nil {
			t.Fatal(err)
		}
		if out := run(t, sb, "cat /work/host; echo; stat -c '%u %a' /work/host"); out != "from the host\n0 640\n" {
			t.Errorf("a host-side write seen inside: %q", out)
		}
		rc, err := sb.ReadFile(ctx, "/root/f")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if string(data) != "hi\n" {
			t.Errorf("ReadFile /root/f = %q", data)
		}
		if _, err := sb.ReadFile(ctx, "/../../../../etc/shadow"); err == nil {
			t.Error("reading /../../../../etc/shadow worked")
		}
	})

	t.Run("agent", func(t *testing.T) {
		c, err := sbxd.Wrap(ctx, sb)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		info, err := c.Agent(ctx)
		if err != nil || !info.Dialled {
			t.Fatalf("agent %+v, %v: want the sandbox's own, dialled", info, err)
		}
		if out := run(t, c, "id -u"); out != "0\n" {
			t.Errorf("through the agent: %q", out)
		}
	})

	t.Run("reset", func(t *testing.T) {
		for round := range 2 {
			before, _ := readMeta(sb.dir)
			if err := sb.Reset(ctx); err != nil {
				t.Fatalf("Reset %d: %v", round, err)
			}
			after, _ := readMeta(sb.dir)
			if after.Gen != round {
				t.Errorf("Reset %d: generation %d, want %d", round, after.Gen, round)
			}
			if after.InitPID == before.InitPID {
				t.Errorf("Reset %d: same first process", round)
			}
			if out := run(t, sb, "ls /root /work; echo end"); out != "/root:\n\n/work:\nend\n" {
				t.Errorf("after Reset %d: %q, want empty /root and /work", round, out)
			}
			run(t, sb, "echo again > /root/f")
			b.waitBackground()
			if m, _ := readMeta(sb.dir); !m.Standby.ready() {
				t.Fatalf("no standby after Reset %d: %+v", round, m.Standby)
			}
		}
	})

	t.Run("reset crosses no state", func(t *testing.T) {
		checkResetCrossesNoState(t, b, backend.Spec{Name: "rootless-clean", Image: image, WorkingDir: "/work", CapAdd: []string{"NET_ADMIN"}})
	})

	t.Run("volumes", func(t *testing.T) {
		checkVolumes(t, b, func(name string) backend.Spec { return backend.Spec{Name: name, Image: image} })
	})

	t.Run("conformance", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend { return open(t) },
			backendtest.WithImage(image), backendtest.WithAgentCheck(sbxd.CheckAgent))
	})
	t.Run("fileops", func(t *testing.T) {
		fsb, err := b.Create(ctx, backend.Spec{Name: "rootless-fileops", Image: image, WorkingDir: "/work"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fsb.Destroy(context.Background()) })
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return fsb })
	})
}
