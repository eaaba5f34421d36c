package lite

import (
	"bytes"
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

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

func mustExec(t *testing.T, sb backend.Sandbox, script string) string {
	t.Helper()
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: script})
	if err != nil {
		t.Fatalf("Exec(%q): %v", script, err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("Exec(%q): exit code %d, stderr %q", script, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout)
}

func readSandboxFile(ctx context.Context, fsys backend.FileSystem, name string) ([]byte, error) {
	rc, err := fsys.ReadFile(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestFilesCannotEscape plants symlinks and ".." paths inside a sandbox
// that point at a host file, and checks that no file operation reaches it:
// each resolves inside the sandbox, as the same path would for a process
// in it.
func TestFilesCannotEscape(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("escape"))
	ctx := t.Context()

	// A host file, and a host path that must never be created.
	hostDir := t.TempDir()
	secret := filepath.Join(hostDir, "secret")
	if err := os.WriteFile(secret, []byte("HOST SECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	forbidden := filepath.Join(hostDir, "written-from-sandbox")
	mustExec(t, sb, `
ln -s / /rootlink
ln -s ../../../../../../../../../../..`+hostDir+` /uplink
ln -s /proc/self/root`+hostDir+` /proclink
ln -s `+forbidden+` /abslink
ln -s /rootlink/../rootlink/`+strings.TrimPrefix(hostDir, "/")+` /chained
ln -s loop1 /loop2; ln -s loop2 /loop1
mkdir -p /inside && echo sandbox-file > /inside/f`)

	for _, name := range []string{
		secret,
		"../../../../../../../.." + secret,
		"/../../../.." + secret,
		"/rootlink" + secret,
		"/rootlink/../../../.." + secret,
		"/uplink/secret",
		"/chained/secret",
		"/inside/../../../../" + secret,
	} {
		data, err := readSandboxFile(ctx, sb, name)
		if bytes.Contains(data, []byte("HOST SECRET")) {
			t.Errorf("ReadFile(%q) read the host file", name)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(%q): error %v, want fs.ErrNotExist (the sandbox has no such file)", name, err)
		}
		if _, err := sb.Stat(ctx, name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(%q): error %v, want fs.ErrNotExist", name, err)
		}
	}

	// /proc is the sandbox's own procfs: the host side refuses it and the
	// generic path reads it inside the sandbox.
	_, err := readSandboxFile(ctx, sb, "/proclink/secret")
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("FileSystem.ReadFile through /proc/self/root: error %v, want errors.ErrUnsupported", err)
	}
	rc, err := sbfiles.ReadFile(ctx, sb, "/proclink/secret")
	if err == nil {
		data, _ := io.ReadAll(rc)
		rc.Close()
		t.Errorf("sbfiles.ReadFile through /proc/self/root read %q, want fs.ErrNotExist", data)
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sbfiles.ReadFile through /proc/self/root: error %v, want fs.ErrNotExist", err)
	}

	// Writes through symlinks land inside the sandbox.
	for _, name := range []string{"/abslink", "/rootlink" + forbidden, "/uplink/written-from-sandbox", "../../../.." + forbidden} {
		if err := sb.WriteFile(ctx, name, strings.NewReader("from the host side"), 0o644); err != nil {
			t.Errorf("WriteFile(%q): %v", name, err)
		}
		if _, err := os.Lstat(forbidden); err == nil {
			t.Fatalf("WriteFile(%q) created the host file %s", name, forbidden)
		}
	}
	if out := mustExec(t, sb, `cat `+forbidden); out != "from the host side" {
		t.Errorf("inside the sandbox, %s holds %q, want the written bytes", forbidden, out)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("the host file is gone: %v", err)
	}

	// ReadDir through the root symlink lists the sandbox's root.
	infos, err := sb.ReadDir(ctx, "/rootlink")
	if err != nil {
		t.Fatalf("ReadDir(/rootlink): %v", err)
	}
	var names []string
	for _, fi := range infos {
		names = append(names, fi.Name())
	}
	if !slices.Contains(names, "inside") || !slices.Contains(names, "rootlink") {
		t.Errorf("ReadDir(/rootlink) = %v, want the sandbox's root (inside, rootlink, ...)", names)
	}

	// Loops fail like the kernel's.
	if _, err := sb.Stat(ctx, "/loop1"); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("Stat of a symlink loop: error %v, want ELOOP", err)
	}
	// Absolute symlinks inside the image resolve in the sandbox: /bin/sh
	// is a link to /bin/busybox.
	fi, err := sb.Stat(ctx, "/bin/sh")
	if err != nil || fi.Size() < 100<<10 {
		t.Errorf("Stat(/bin/sh) = %v, %v; want busybox (an absolute symlink followed inside the sandbox)", fi, err)
	}
	// Kernel file systems are not on the overlay: unsupported there, so
	// callers fall back to Exec.
	if _, err := sb.Stat(ctx, "/proc/self/status"); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Stat(/proc/self/status): %v, want errors.ErrUnsupported", err)
	}
	if data, err := readAllHelper(ctx, sb, "/proc/self/status"); err != nil || !bytes.Contains(data, []byte("Pid:")) {
		t.Errorf("sbfiles.ReadFile(/proc/self/status) = %q, %v; want the sandbox's procfs through Exec", data, err)
	}
}

func readAllHelper(ctx context.Context, sb backend.Sandbox, name string) ([]byte, error) {
	rc, err := sbfiles.ReadFile(ctx, sb, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestFilesOnVolumes checks that file operations under a bind volume's
// target reach the volume's host folder, as commands in the sandbox do,
// and that a read-only volume refuses writes.
func TestFilesOnVolumes(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	rw, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "given"), []byte("read only data"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := e.spec("volumes")
	spec.Volumes = []backend.Volume{
		{Type: backend.VolumeBind, Source: rw, Target: "/data"},
		{Type: backend.VolumeBind, Source: ro, Target: "/data/ro", ReadOnly: true},
	}
	sb := create(t, b, spec)
	ctx := t.Context()
	if err := sb.WriteFile(ctx, "/data/new.txt", strings.NewReader("on the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(rw, "new.txt")); err != nil || string(got) != "on the volume" {
		t.Errorf("host side of the volume: %q, %v", got, err)
	}
	if out := mustExec(t, sb, "cat /data/new.txt /data/ro/given"); out != "on the volumeread only data" {
		t.Errorf("inside: %q", out)
	}
	if data, err := readSandboxFile(ctx, sb, "/data/ro/given"); string(data) != "read only data" || err != nil {
		t.Errorf("ReadFile on the read-only volume = %q, %v", data, err)
	}
	err := sb.WriteFile(ctx, "/data/ro/x", strings.NewReader("no"), 0o644)
	if !errors.Is(err, fs.ErrPermission) {
		t.Errorf("WriteFile on a read-only volume: %v, want fs.ErrPermission", err)
	}
	// A symlink on the volume to "/" leads back to the sandbox's root,
	// not the host's.
	mustExec(t, sb, "ln -s / /data/toroot")
	if _, err := sb.Stat(ctx, "/data/toroot/bin/busybox"); err != nil {
		t.Errorf("Stat through a volume symlink to /: %v", err)
	}
}
