package lite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
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

// gVisor's runsc spends about 30 ms of each container's start on cgroups
// of its own (Debian's runsc here: a bare runsc run of lite's config,
// 145 -> 112 ms p50 with --ignore-cgroups), more than the whole of what
// lite adds to a run. So where lite can make the container's cgroup
// exactly as runsc would, it does, and runs runsc in it with
// --ignore-cgroups: everything runsc starts (its gofer, its sandbox, the
// sentry's stubs) is in that cgroup from the start, as every process of a
// runc container is in runc's. It can where the host has cgroup v1
// hierarchies (runsc's v1 code makes a folder in each and writes the
// limits; v2-only hosts are left to runsc: untested here) and the config
// asks for nothing but the limits lite writes: a pids limit and a CPU
// weight. A memory limit, a CPU quota or a CPU set stay runsc's to make:
// runsc also tells the sentry of them, which sizes what the sandbox sees
// (its /proc/meminfo total, its CPU count) by them. Device rules are no
// matter: runsc sets none (its sandbox opens no host devices for the
// container).

// ownCgroupHost reports whether the host lets lite make gVisor
// containers' cgroups: cgroup v1 hierarchies with the cpu and pids
// controllers, and /bin/sh to run runsc in the cgroup.
var ownCgroupHost = sync.OnceValue(func() bool {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) != nil || st.Type == unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	for _, c := range []string{"cpu", "pids"} {
		if unix.Statfs(filepath.Join("/sys/fs/cgroup", c), &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			return false
		}
	}
	_, err := os.Stat(shPath)
	return err == nil
})

// shPath runs the runtime in a cgroup lite made (see ownCgroup).
const shPath = "/bin/sh"

// v1CgroupRoots are the cgroup v1 hierarchies' folders among
// cgroupRoots (named ones such as systemd's too, as runsc joins them).
var v1CgroupRoots = sync.OnceValue(func() []string {
	var roots []string
	for _, root := range cgroupRoots() {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
			roots = append(roots, root)
		}
	}
	return roots
})

// ownsCgroup reports whether lite makes the cgroup of a gVisor container
// of config s itself (see above): a rootful config (one with a cgroup
// path) asking for no limit but a pids limit and a CPU weight, on a host
// that allows it. It depends on nothing a container's create and start
// change, so that both give runsc the same options.
func ownsCgroup(s *specs.Spec) bool {
	return s.Linux != nil && s.Linux.CgroupsPath != "" && limitsLiteWrites(s.Linux.Resources) && ownCgroupHost()
}

// limitsLiteWrites reports whether r asks for no cgroup setting but those
// makeCgroup writes (a pids limit, a CPU weight) and device rules, which
// runsc does not set.
func limitsLiteWrites(r *specs.LinuxResources) bool {
	if r == nil {
		return true
	}
	rest := *r
	rest.Devices, rest.Pids = nil, nil
	if rest.CPU != nil {
		cpu := *rest.CPU
		cpu.Shares = nil
		if cpu != (specs.LinuxCPU{}) {
			return false
		}
		rest.CPU = nil
	}
	return reflect.DeepEqual(rest, specs.LinuxResources{})
}

// makeCgroup makes the cgroup of config s (see ownsCgroup) in every v1
// hierarchy, with s's pids limit and CPU weight, and returns the prefix of
// a command line that runs a program (appended to it) in it. A cgroup
// left by an earlier try is used again.
func makeCgroup(s *specs.Spec) ([]string, error) {
	rel := strings.TrimPrefix(filepath.Clean(s.Linux.CgroupsPath), "/")
	if rel == "" || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, fmt.Errorf("cgroup path %q is not one lite makes", s.Linux.CgroupsPath)
	}
	var limits [][2]string // file, value
	if r := s.Linux.Resources; r != nil {
		if r.Pids != nil && r.Pids.Limit != nil && *r.Pids.Limit > 0 {
			limits = append(limits, [2]string{"pids.max", strconv.FormatInt(*r.Pids.Limit, 10)})
		}
		if r.CPU != nil && r.CPU.Shares != nil {
			limits = append(limits, [2]string{"cpu.shares", strconv.FormatUint(*r.CPU.Shares, 10)})
		}
	}
	written := make([]bool, len(limits))
	prefix := []string{shPath, "-c", `while [ "$1" != -- ]; do echo $$ >"$1" || exit 125; shift; done; shift; exec "$@"`, "sh"}
	for _, root := range v1CgroupRoots() {
		dir := filepath.Join(root, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		// A new cpuset cgroup has no CPUs and no memory nodes, and
		// takes no process until it has: its parent's.
		if err := inheritCpuset(root, dir); err != nil {
			return nil, err
		}
		// Each limit goes where its controller is.
		for i, l := range limits {
			ok, err := writeExisting(filepath.Join(dir, l[0]), l[1])
			if err != nil {
				return nil, fmt.Errorf("setting %s of cgroup %s: %w", l[0], dir, err)
			}
			written[i] = written[i] || ok
		}
		prefix = append(prefix, filepath.Join(dir, "cgroup.procs"))
	}
	for i, l := range limits {
		if !written[i] {
			return nil, fmt.Errorf("setting %s of cgroup %s: no hierarchy has it", l[0], rel)
		}
	}
	return append(prefix, "--"), nil
}

// inheritCpuset gives the cpuset cgroup dir, and each of its ancestors
// below root, its parent's CPUs and memory nodes where it has none (a v1
// cpuset hierarchy's new cgroups start empty). Other hierarchies have no
// such files: nothing to do.
func inheritCpuset(root, dir string) error {
	if _, err := os.Stat(filepath.Join(root, "cpuset.cpus")); err != nil {
		return nil
	}
	if dir == root {
		return nil
	}
	if err := inheritCpuset(root, filepath.Dir(dir)); err != nil {
		return err
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		p := filepath.Join(dir, f)
		cur, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(cur)) != "" {
			continue
		}
		parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(p, parent, 0); err != nil {
			return fmt.Errorf("setting %s: %w", p, err)
		}
	}
	return nil
}
