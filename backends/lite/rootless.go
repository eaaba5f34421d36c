package lite

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Rootless sandboxes.
//
// A process that is not root runs each sandbox in a user namespace of its
// own that maps root inside to the process's user outside, and only that
// ID (no /etc/subuid ranges). util-linux's unshare makes the namespace and
// a mount namespace, mounts the overlay there (Linux mounts overlayfs in a
// user namespace since 5.11) and starts the runtime, which then runs as
// root in that namespace and makes the container in it: the runtime's
// rootless mode, with no cgroups. The namespaces live as long as the
// container's first process; nothing is mounted on the host. Commands run
// through util-linux's nsenter into that user namespace (the runtime's exec
// needs to be root there), or through the sandbox's agent. The host side
// of the root file system is /proc/<first process>/root.
//
// What follows from one mapped ID: every file of the image must belong to
// the user (images unpacked by the backend do; a dir: image must be the
// user's own), the sandbox runs as root inside and per-command users other
// than root are refused, and cgroup limits (cpus, mem_limit, pids_limit)
// and privileged sandboxes are not available. Pause stops every process of
// the sandbox with SIGSTOP (no freezer without a cgroup).
type userNS struct {
	unshare string
	nsenter string
	uid     int
	gid     int
}

// findTool looks a util-linux program up in PATH and the usual folders.
func findTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found (it is part of util-linux)", name)
}

// probeUserNS checks that this host lets this user run rootless sandboxes:
// util-linux's unshare and nsenter, and a user namespace with a mount
// namespace in it. The error names what is missing.
func probeUserNS() (*userNS, error) {
	u := &userNS{uid: os.Geteuid(), gid: os.Getegid()}
	var err error
	if u.unshare, err = findTool("unshare"); err != nil {
		return nil, err
	}
	if u.nsenter, err = findTool("nsenter"); err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(u.unshare, "--user", "--map-root-user", "--mount", "true")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("this user may not make a user namespace (%s): check sysctl user.max_user_namespaces (> 0), kernel.unprivileged_userns_clone (1, where it exists) and kernel.apparmor_restrict_unprivileged_userns (0, on Ubuntu)", msg)
	}
	return u, nil
}

// launchPrefix is the command line that runs the runtime (appended to it)
// in a new user and mount namespace after mounting generation gen's
// overlay there.
func (u *userNS) launchPrefix(lower, dir string, gen int) []string {
	// userxattr: overlayfs keeps its marks (opaque folders) in user.overlay.*
	// xattrs, which a user namespace may set (trusted.* it may not: removing
	// a folder of the image then fails with EIO).
	opts := fmt.Sprintf("userxattr,lowerdir=%s,upperdir=%s,workdir=%s", lower, upperDir(dir, gen), workDir(dir, gen))
	const script = `mount -t overlay overlay -o "$1" "$2" || exit 125; shift 2; exec "$@"`
	return []string{u.unshare, "--user", "--map-root-user", "--mount", "--", "/bin/sh", "-c", script, "sh", opts, rootfsDir(dir, gen)}
}

// execPrefix is the command line that runs the runtime (appended to it)
// in the user namespace of the process pid.
func (u *userNS) execPrefix(pid int) []string {
	return []string{u.nsenter, "--user", "--preserve-credentials", "-t", strconv.Itoa(pid), "--"}
}

// rootlessSpec changes a rootful OCI config into what a single-ID user
// namespace can run: no cgroup (limits and device rules need one), no
// cgroup file system mount, no devpts gid (group 5 is not mapped).
func rootlessSpec(s *specs.Spec) {
	s.Linux.Resources = nil
	s.Linux.CgroupsPath = ""
	s.Mounts = slices.DeleteFunc(s.Mounts, func(m specs.Mount) bool { return m.Type == "cgroup" })
	for i, m := range s.Mounts {
		if m.Type == "devpts" {
			s.Mounts[i].Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return strings.HasPrefix(o, "gid=") })
		}
	}
}

// checkRootlessImage refuses an image whose root folder does not belong to
// this user: in a single-ID user namespace its files would belong to
// nobody, and the sandbox could not change them.
func (u *userNS) checkImage(ref, rootfs string) error {
	fi, err := os.Stat(rootfs)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != u.uid {
		return fmt.Errorf("image %q (%s) belongs to uid %d, and a rootless sandbox maps only this user (uid %d) to root inside, so its files must belong to this user: use an image tarball or registry image (the backend unpacks those as this user) or a copy of the folder made as this user",
			ref, rootfs, st.Uid, u.uid)
	}
	return nil
}

// removeTree removes p and everything under it, making folders writable
// first where it must: a rootless sandbox (and overlayfs's work folder)
// leaves folders this user owns but may not write.
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	// WalkDir calls the function on a folder before it reads it.
	filepath.WalkDir(p, func(path string, d fs.DirEntry, _ error) error {
		if d != nil && d.IsDir() {
			os.Chmod(path, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// procRoot is the host path of the root file system a process sees.
func procRoot(pid int) string { return "/proc/" + strconv.Itoa(pid) + "/root" }

// signalPIDNamespace sends sig to every process in the PID namespace of
// the process pid (twice over, for processes forked meanwhile).
func signalPIDNamespace(pid int, sig syscall.Signal) error {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/pid")
	if err != nil {
		return fmt.Errorf("%w: the sandbox is not running (%v)", backend.ErrUnavailable, err)
	}
	for range 2 {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return err
		}
		for _, e := range entries {
			p, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
				syscall.Kill(p, sig)
			}
		}
	}
	return nil
}
