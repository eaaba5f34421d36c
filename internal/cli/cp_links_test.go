package cli

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// TestCopyLinksNativeAndLite: sbx cp keeps symlinks when copying out of a
// sandbox (to a folder, dangling) and writes through a dangling symlink at
// the destination, on native (the archive path) and lite (file by file)
// alike; local is covered by TestCopyPaths.
func TestCopyLinksNativeAndLite(t *testing.T) {
	t.Run("native", func(t *testing.T) {
		t.Parallel()
		cli := dockertest.Client(t)
		dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
		b, err := native.New(native.Config{PullPolicy: native.PullNever})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		checkCopyLinks(t, b, backend.Spec{Name: "cp-links", Image: dockertest.BusyboxImage, WorkingDir: "/root", TTL: 30 * time.Minute})
	})
	t.Run("lite", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("lite needs root here")
		}
		if _, err := exec.LookPath("runc"); err != nil {
			t.Skip("no runc")
		}
		cli := dockertest.Client(t) // the root file system comes from the test image
		dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
		rootfs := t.TempDir()
		os.Chmod(rootfs, 0o755)
		export := exec.Command("sh", "-c", `id=$(docker create "$1" true) && docker export "$id" | tar -x -C "$2"; s=$?; docker rm "$id" >/dev/null; exit $s`, "sh", dockertest.BusyboxImage, rootfs)
		if out, err := export.CombinedOutput(); err != nil {
			t.Fatalf("exporting %s: %v\n%s", dockertest.BusyboxImage, err, out)
		}
		base := t.TempDir()
		b, err := lite.New(lite.Config{
			StateDir: filepath.Join(base, "state"), ImageDir: filepath.Join(base, "images"), RuntimeRoot: filepath.Join(base, "runtime"),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		checkCopyLinks(t, b, backend.Spec{Name: "cp-links", Image: "dir:" + rootfs, WorkingDir: "/root", TTL: 30 * time.Minute})
	})
}

func checkCopyLinks(t *testing.T, b backend.Backend, spec backend.Spec) {
	ctx := context.Background()
	sb, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	inSandbox := func(script string) {
		t.Helper()
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", script}, WorkDir: "/root"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %v, %d %s", script, err, res.ExitCode, res.Stderr)
		}
	}
	inSandbox(`mkdir -p t/d && echo x > t/d/f && ln -s d t/linkdir && ln -s nowhere t/dangling && ln -s d/f t/linkfile`)
	a := &app{logger: slog.New(slog.DiscardHandler)}
	tree, err := newSandboxTree(ctx, sb, a)
	if err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(t.TempDir(), "back")
	if err := copyTree(ctx, tree, "t", hostTree{}, back); err != nil {
		t.Fatalf("copy out: %v", err)
	}
	for name, want := range map[string]string{"linkdir": "d", "dangling": "nowhere", "linkfile": "d/f"} {
		if got, err := os.Readlink(filepath.Join(back, name)); err != nil || got != want {
			t.Errorf("%s copied out: link to %q, %v; want a link to %q", name, got, err, want)
		}
	}
	if data, err := os.ReadFile(filepath.Join(back, "d", "f")); err != nil || string(data) != "x\n" {
		t.Errorf("d/f copied out: %q, %v", data, err)
	}

	// Onto a dangling link (relative, and absolute): written through it.
	inSandbox(`ln -s made.txt onto && ln -s /root/made-abs.txt onto-abs`)
	src := filepath.Join(t.TempDir(), "src.txt")
	os.WriteFile(src, []byte("through\n"), 0o644)
	for _, dst := range []string{"onto", "/root/onto-abs"} {
		if err := copyTree(ctx, hostTree{}, src, tree, dst); err != nil {
			t.Fatalf("copy onto %s: %v", dst, err)
		}
	}
	inSandbox(`[ -L onto ] && [ -L onto-abs ] && [ "$(cat made.txt)" = through ] && [ "$(cat made-abs.txt)" = through ]`)
}
