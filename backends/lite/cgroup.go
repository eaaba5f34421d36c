package lite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupParent is the cgroup (in every hierarchy) holding the sandboxes'
// cgroups; the OCI config's cgroupsPath is cgroupParent/<id>.
const cgroupParent = "sandboxkit-lite"

// cgroupDirs returns the folders of sandbox id's cgroup that exist, in
// every v1 hierarchy and in the v2 one.
func cgroupDirs(id string) []string {
	var dirs []string
	for _, pattern := range []string{
		filepath.Join("/sys/fs/cgroup", "*", cgroupParent, id),
		filepath.Join("/sys/fs/cgroup", cgroupParent, id),
	} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	return dirs
}

// removeCgroups removes what is left of sandbox id's cgroup after the
// runtime deleted the container: the runtime gives up on a cgroup whose
// processes are still exiting, and an exec that raced with the delete can
// make it again. Processes still in it are killed.
func removeCgroups(id string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		dirs := cgroupDirs(id)
		if len(dirs) == 0 {
			return nil
		}
		var lastErr error
		for _, d := range dirs {
			killCgroupProcs(d)
			// Children first (a runtime may make sub-cgroups).
			subs, _ := filepath.Glob(filepath.Join(d, "*", "cgroup.procs"))
			for _, sub := range subs {
				syscall.Rmdir(filepath.Dir(sub))
			}
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				lastErr = err
			}
		}
		if lastErr == nil && len(cgroupDirs(id)) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s/%s: %v (still there: %v)", cgroupParent, id, lastErr, cgroupDirs(id))
		}
		time.Sleep(5 * time.Millisecond)
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
