// Package owner names the process that owns a sandbox, so a reaper (sbx gc)
// can tell whether that process is still running.
//
// An owner string is "host:pid:start": the host name, the process ID and the
// process's start time in clock ticks since boot (field 22 of
// /proc/PID/stat). The start time keeps a reused PID from being mistaken for
// the owner. Only processes on this host can be checked; owners from other
// hosts are reported as unknown, and the reaper leaves their sandboxes to
// their TTL.
package owner

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// Self returns the owner string of the running process.
func Self() string {
	s, err := Of(os.Getpid())
	if err != nil {
		// No /proc (not Linux): a start time of 0 means "any process with
		// this PID", which is still better than no owner at all.
		return format(hostname(), os.Getpid(), 0)
	}
	return s
}

// Of returns the owner string of process pid on this host.
func Of(pid int) (string, error) {
	start, err := procfs.StartTime(pid)
	if err != nil {
		return "", fmt.Errorf("owner of process %d: %w", pid, err)
	}
	return format(hostname(), pid, start), nil
}

// Alive reports whether the process named by owner is still running. known
// is false when owner names a process on another host or is malformed: then
// nothing can be said and alive is false.
func Alive(owner string) (alive, known bool) {
	host, pid, start, err := Parse(owner)
	if err != nil || host != hostname() {
		return false, false
	}
	return procfs.Alive(pid, start), true
}

// Parse splits an owner string into its parts.
func Parse(owner string) (host string, pid int, start uint64, err error) {
	// Split from the right: the host name is the only part that could,
	// however unlikely, hold a colon.
	i := strings.LastIndexByte(owner, ':')
	if i <= 0 {
		return "", 0, 0, fmt.Errorf("malformed owner %q (want host:pid:start)", owner)
	}
	j := strings.LastIndexByte(owner[:i], ':')
	if j <= 0 {
		return "", 0, 0, fmt.Errorf("malformed owner %q (want host:pid:start)", owner)
	}
	host = owner[:j]
	pid, err1 := strconv.Atoi(owner[j+1 : i])
	start, err2 := strconv.ParseUint(owner[i+1:], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return "", 0, 0, fmt.Errorf("malformed owner %q (want host:pid:start)", owner)
	}
	return host, pid, start, nil
}

func format(host string, pid int, start uint64) string {
	return host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatUint(start, 10)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}
