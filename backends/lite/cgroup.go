package lite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cgroupParent is the cgroup (in every hierarchy) holding the sandboxes'
// cgroups; the OCI config's cgroupsPath is cgroupParent/<id>.
const cgroupParent = "sandboxkit-lite"

// cgroupRoots are the folders sandboxes' cgroups are made under: each v1
// hierarchy's and the v2 one (read once: hierarchies are mounted at boot).
var cgroupRoots = sync.OnceValue(func() []string {
	roots := []string{"/sys/fs/cgroup"}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	for _, e := range entries {
		if e.IsDir() {
			roots = append(roots, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return roots
})

// cgroupDirs returns the folders of sandbox id's cgroup that exist, in
// every v1 hierarchy and in the v2 one.
func cgroupDirs(id string) []string {
	var dirs []string
	for _, root := range cgroupRoots() {
		d := filepath.Join(root, cgroupParent, id)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// removeCgroups removes what is left of sandbox id's cgroup after the
// runtime deleted the container: the runtime gives up on a cgroup whose
// processes are still exiting, and an exec that raced with the delete can
// make it again. An empty cgroup goes at its first rmdir (the usual case:
// its processes ended with the container's first process); one that is
// busy has its processes killed and its sub-cgroups removed, until it goes
// or 5 s have passed. Under gVisor the cgroup holds runsc's gofer, its
// sandbox (the sentry) and the sentry's stubs: they go with it too, also
// when runsc no longer knows the container (killed while making it).
func removeCgroups(id string) error {
	deadline := time.Now().Add(5 * time.Second)
	// Killed processes are gone within a millisecond or a few (gVisor's
	// gofer after its sentry): look again soon, then less often.
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		var busy []string
		var lastErr error
		for _, root := range cgroupRoots() {
			d := filepath.Join(root, cgroupParent, id)
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
				continue
			}
			lastErr = err
			busy = append(busy, d)
			killCgroupProcs(d)
			// Children first (a runtime may make sub-cgroups).
			subs, _ := filepath.Glob(filepath.Join(d, "*", "cgroup.procs"))
			for _, sub := range subs {
				syscall.Rmdir(filepath.Dir(sub))
			}
		}
		if len(busy) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s/%s: %v (still there: %v)", cgroupParent, id, lastErr, cgroupDirs(id))
		}
		time.Sleep(delay)
	}
}

func killCgroupProcs(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
