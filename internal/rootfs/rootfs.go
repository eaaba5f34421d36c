// Package rootfs builds minimal root file systems for tests that run
// sandboxes without an image store (the lite backend's "dir:" images).
package rootfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BusyboxPath finds a static busybox on this host (Debian's
// busybox-static).
func BusyboxPath() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("busybox")
}

// Busybox builds a root file system in a new temporary folder and returns
// it: a static busybox, its applets as absolute symlinks to /bin/busybox,
// /etc/passwd and /etc/group with root and nobody (65534), and a /tmp. The
// caller removes the folder.
func Busybox() (string, error) {
	bb, err := BusyboxPath()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "sbx-busybox-rootfs-")
	if err != nil {
		return "", err
	}
	os.Chmod(dir, 0o755)
	data, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return "", err
		}
	}
	os.Chmod(filepath.Join(dir, "tmp"), 0o1777|os.ModeSticky)
	if err := os.WriteFile(filepath.Join(dir, "bin/busybox"), data, 0o755); err != nil {
		return "", err
	}
	out, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		return "", err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" {
			continue
		}
		if err := os.Symlink("/bin/busybox", filepath.Join(dir, applet)); err != nil && !os.IsExist(err) {
			return "", err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	return dir, nil
}
