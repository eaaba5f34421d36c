package lite

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/mountinfo"
)

// mountOverlay mounts the sandbox's root file system: lower (the unpacked
// image, never written) under the sandbox's own upper layer, at
// bundle/rootfs.
//
// The overlay is volatile (Linux 5.10 and later; Podman mounts a --rm
// container's so too): it passes no sync on to the file system holding
// the upper layer. An upper layer lives as long as its sandbox, which a
// host crash ends (every generation and fork mounts an upper and work
// folder of its own, and nothing mounts one again), so a sync buys it
// nothing; and overlayfs syncs the whole upper file system when it is
// unmounted: up to 33 ms of a sandbox's removal on this ext4 host, one
// time in about twenty, more while other work writes to the disk (p50 of
// the unmount 0.7 ms, 0.2 ms volatile). A command's fsync in the sandbox
// returns without waiting for the disk, as its files do not outlive the
// host anyway. Kernels without the option get the plain overlay.
func mountOverlay(lower, dir string, gen int) error {
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upperDir(dir, gen), workDir(dir, gen))
	if strings.ContainsAny(lower+upperDir(dir, gen), ",:") {
		return fmt.Errorf("overlay: paths may not contain ',' or ':' (%s)", opts)
	}
	target := rootfsDir(dir, gen)
	tried := !noVolatile.Load()
	if tried {
		err := syscall.Mount("overlay", target, "overlay", 0, opts+",volatile")
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("mounting the overlay root file system (%s,volatile): %w", opts, err)
		}
		// Unknown to this kernel, or opts are wrong: the plain mount
		// tells which.
	}
	if err := syscall.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the overlay root file system (%s): %w", opts, err)
	}
	if tried {
		noVolatile.Store(true)
	}
	return nil
}

// noVolatile is set once this kernel refused a volatile overlay.
var noVolatile atomic.Bool

// makeRootfs makes generation gen's empty writable layer, its overlay's
// work folder and mount point, and mounts the overlay there (rootless: the
// runtime's launch mounts it, in the sandbox's namespaces).
func (b *Backend) makeRootfs(m *meta, dir string, gen int) error {
	for _, d := range []string{rootfsDir(dir, gen), workDir(dir, gen)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := makeUpper(m.Lower, dir, gen); err != nil {
		return err
	}
	if m.Rootless {
		return nil
	}
	if err := mountOverlay(m.Lower, dir, gen); err != nil {
		return err
	}
	if m.CredentialCA != "" {
		// Each generation's layer starts afresh: the CA goes in again.
		if err := backendkit.InstallCA(rootfsDir(dir, gen), m.CredentialCA); err != nil {
			return fmt.Errorf("installing the credential broker's CA: %w", err)
		}
	}
	return nil
}

// launchPrefix is the command line prefix of the runtime's run or create
// of generation gen (see ociRuntime.commandIn): none for a rootful
// sandbox, the user namespace's for a rootless one.
func (b *Backend) launchPrefix(m *meta, dir string, gen int) ([]string, error) {
	if !m.Rootless {
		return nil, nil
	}
	if b.userns == nil {
		return nil, fmt.Errorf("%w: the sandbox is rootless and this process is root", backend.ErrUnavailable)
	}
	return b.userns.launchPrefix(m.Lower, dir, gen), nil
}

// makeUpper makes the sandbox's upper layer with the mode and owner of the
// image's root folder: the overlay's root takes them from the upper layer,
// and a 0700 root would lock every user but root out of the sandbox.
func makeUpper(lower, dir string, gen int) error {
	fi, err := os.Stat(lower)
	if err != nil {
		return err
	}
	up := upperDir(dir, gen)
	if err := os.Mkdir(up, fi.Mode().Perm()); err != nil {
		return err
	}
	if err := os.Chmod(up, fi.Mode().Perm()); err != nil { // umask
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return os.Chown(up, int(st.Uid), int(st.Gid))
	}
	return nil
}

// unmount unmounts target; a target that is not mounted (or is gone) is
// not an error. The unmount is lazy (MNT_DETACH): the mount leaves the
// mount table at once, and the kernel's flush of the overlay, which can
// take tens of milliseconds, does not hold up Destroy or Reset.
func unmount(target string) error {
	for range 100 {
		err := syscall.Unmount(target, syscall.MNT_DETACH)
		switch {
		case err == nil:
			// Mounted more than once (a crash between two mounts of
			// Reset): go on until none is left.
			continue
		case errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOENT):
			return nil
		default:
			return fmt.Errorf("unmounting %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmounting %s: still mounted after 100 unmounts", target)
}

// mountsUnder returns the mount points at or under dir, from
// /proc/self/mountinfo (for tests and leak checks).
func mountsUnder(dir string) ([]string, error) {
	all, err := mountPoints("/proc/self/mountinfo")
	var out []string
	for _, mp := range all {
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, err
}

// mountPoints returns the mount points a mountinfo file (of /proc/PID)
// lists, as that process sees them (from its root).
func mountPoints(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out = append(out, mountinfo.Unescape(fields[4]))
	}
	return out, sc.Err()
}
