// Package cgwarm takes the wait for a kernel grace period out of a
// container start's critical path.
//
// Moving a process into a cgroup (a write to cgroup.procs, which runc does
// for a container's first process and for every runc exec, and lite does
// for runsc) takes the kernel's cgroup threadgroup lock for writing. That
// lock is a per-CPU read-write semaphore: while no writer has come for a
// grace period, its readers (every fork and exit on the host) run a fast
// path, and the next writer first waits for an RCU grace period to switch
// them off it. On these 2-core VMs a grace period is 5-16 ms, paid by the
// first move after about 20 ms without one (a move 5 ms after another took
// 0.03-0.07 ms, 20 ms and more after it 6-16 ms: 8 ms at the median). A
// bare `runc run` of busybox takes 25-40 ms, so that wait was a quarter
// of it, and lite's own steps before the runtime runs (its bundle, ~3 ms)
// did nothing to hide it.
//
// Start moves this process into the cgroup it is already in (nothing
// moves) in the background, at once and then every interval, so that the
// grace period runs beside the caller's work and the lock stays in its
// writer mode until the runtime's move has come and gone. The cost is the
// hot path the kernel's favordynmods mount option gives up for good: while
// warm, forks and exits on the host take the lock's slow path, a few
// atomic operations. Where this process cannot write its cgroup.procs (not
// root, a read-only cgroupfs, no cgroupfs), Start does nothing.
package cgwarm

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/mountinfo"
)

// interval is how often a warm lock is taken again: well inside the one
// grace period for which the kernel keeps it in writer mode after a write.
const interval = 2 * time.Millisecond

// maxWarm bounds a warming the caller forgot to stop.
const maxWarm = 5 * time.Second

// procsFile is this process's own cgroup's cgroup.procs file, or "" (see
// ownProcsFile); found once.
var procsFile = sync.OnceValue(func() string {
	mountInfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	cgroups, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	return ownProcsFile(mountInfo, cgroups)
})

// Start warms the lock in the background until until reports true
// (polled every interval; nil: never), stop is called, or maxWarm has
// passed; it returns at once. stop waits for the warming to end; calling
// it more than once is fine.
func Start(until func() bool) (stop func()) {
	return start(procsFile, until)
}

// start is Start, warming with the file path returns (found in the
// background: "" is nothing to warm with).
func start(path func() string, until func() bool) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	started.Add(1)
	running.Add(1)
	wg.Go(func() {
		defer running.Add(-1)
		warm(path(), quit, until)
	})
	var once sync.Once
	return func() {
		once.Do(func() { close(quit) })
		wg.Wait()
	}
}

// Counts of warmings: begun since the process started, and running now
// (for tests of their callers).
var started, running atomic.Int64

// Started returns how many warmings have begun in this process.
func Started() int64 { return started.Load() }

// Running returns how many warmings are running now.
func Running() int64 { return running.Load() }

// For returns an until for Start that is true once d has passed.
func For(d time.Duration) func() bool {
	end := time.Now().Add(d)
	return func() bool { return !time.Now().Before(end) }
}

// warm is Start's background work: writes this process's PID to path.
func warm(path string, quit <-chan struct{}, until func() bool) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer f.Close()
	pid := []byte(strconv.Itoa(os.Getpid()))
	deadline := time.NewTimer(maxWarm)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if _, err := f.Write(pid); err != nil {
			return // refused: nothing to warm with
		}
		if until != nil && until() {
			return
		}
		select {
		case <-quit:
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// ownProcsFile finds, from /proc/self/mountinfo and /proc/self/cgroup, the
// cgroup.procs file of the cgroup this process is in, in a hierarchy
// mounted at its root: preferably one with no controller (systemd's named
// hierarchy on cgroup v1, whose moves call no controller's hooks), else the
// v2 one, else any v1 one. "" when there is none.
func ownProcsFile(mountInfo, cgroups []byte) string {
	type mount struct {
		dir     string
		v2      bool
		options []string // the super block's: controllers, name=
	}
	var mounts []mount
	for line := range strings.Lines(string(mountInfo)) {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 || fields[3] != "/" {
			continue
		}
		dir := mountinfo.Unescape(fields[4])
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			continue // not a mount point the kernel writes
		}
		switch fields[sep+1] {
		case "cgroup2":
			mounts = append(mounts, mount{dir: dir, v2: true})
		case "cgroup":
			mounts = append(mounts, mount{dir: dir, options: strings.Split(fields[sep+3], ",")})
		}
	}
	best, bestRank := "", 0
	for line := range strings.Lines(string(cgroups)) {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") || strings.Contains(parts[2], "..") {
			continue
		}
		var controllers []string
		if parts[1] != "" {
			controllers = strings.Split(parts[1], ",")
		}
		for _, m := range mounts {
			if m.v2 != (parts[0] == "0" && len(controllers) == 0) || !m.v2 && !hasAll(m.options, controllers) {
				continue
			}
			rank := 1 // a v1 hierarchy with controllers
			switch {
			case !m.v2 && len(controllers) == 1 && strings.HasPrefix(controllers[0], "name="):
				rank = 3
			case m.v2:
				rank = 2
			}
			if rank > bestRank {
				best, bestRank = filepath.Join(m.dir, parts[2], "cgroup.procs"), rank
			}
		}
	}
	return best
}

// hasAll reports whether a v1 mount's super options name every one of
// controllers (and there is at least one).
func hasAll(options, controllers []string) bool {
	if len(controllers) == 0 {
		return false
	}
	for _, c := range controllers {
		if !slices.Contains(options, c) {
			return false
		}
	}
	return true
}
