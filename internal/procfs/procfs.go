// Package procfs reads the few facts sandboxkit needs from Linux's /proc:
// a process's start time (so a reused PID is not mistaken for the process
// that was recorded) and which processes carry a marker in their
// environment (so every process a sandbox started can be found and killed,
// including ones that left their process group).
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// statFields returns the fields of /proc/PID/stat from field 3 (state) on:
// the command name (field 2) is in parentheses and may hold spaces, so
// fields are counted from the last ')'. want is how many it needs.
func statFields(pid, want int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < want {
		return nil, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return fields, nil
}

// StartTime returns the start time of process pid in clock ticks since
// boot (field 22 of /proc/PID/stat).
func StartTime(pid int) (uint64, error) {
	fields, err := statFields(pid, 20)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22
}

// Alive reports whether process pid exists and, when start is non-zero,
// started at that time (and so is the same process). Zombies count as dead.
func Alive(pid int, start uint64) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return false
	}
	if data[i+2] == 'Z' || data[i+2] == 'X' {
		return false
	}
	if start == 0 {
		return true
	}
	got, err := StartTime(pid)
	return err == nil && got == start
}

// FindByEnv returns the PIDs of live processes whose environment contains
// the exact entry key=value. Processes it cannot read are skipped.
func FindByEnv(key, value string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(key + "=" + value)
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for entry := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(entry, want) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// KillByEnv kills every process FindByEnv finds and all their descendants
// (by parent), and waits, up to a couple of seconds, until none is left.
// Descendants count whatever their environment and session, so a child
// that dropped the marker (env -i) or its process group (setsid) goes too,
// as long as its parent chain still reaches a marked process when the kill
// runs. Each round stops the whole set (SIGSTOP) before killing it, so no
// member can fork a new one in between. It returns how many processes
// remain. (A process that both dropped the marker and left the tree, a
// double fork whose middle process exited, is not found: see
// docs/nothing-leaks.md on how each backend bounds a command.)
func KillByEnv(key, value string) int { return KillTree(0, key, value) }

// KillTree is KillByEnv with one more root: process pid (when > 0) and all
// its descendants go too, marked or not. Call it before killing pid's
// process group: a child whose parent died first would leave the tree.
// key "" finds no marked processes.
func KillTree(pid int, key, value string) int {
	roots := func() []int {
		var r []int
		if pid > 0 && Alive(pid, 0) {
			r = append(r, pid)
		}
		if key != "" {
			r = append(r, FindByEnv(key, value)...)
		}
		return r
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		set := treeOf(roots())
		for _, pid := range set {
			_ = syscall.Kill(pid, syscall.SIGSTOP)
		}
		for _, pid := range set {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		live := 0
		for _, pid := range set {
			if Alive(pid, 0) {
				live++
			}
		}
		if len(set) == 0 || (live == 0 && len(treeOf(roots())) == 0) || time.Now().After(deadline) {
			return live
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// treeOf returns roots and all their live descendants, found through each
// process's parent in /proc/PID/stat.
func treeOf(roots []int) []int {
	if len(roots) == 0 {
		return nil
	}
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, err := parentOf(pid); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	self := os.Getpid()
	seen := map[int]bool{}
	var out []int
	var visit func(int)
	visit = func(pid int) {
		if seen[pid] || pid == self || pid <= 1 {
			return
		}
		seen[pid] = true
		out = append(out, pid)
		for _, c := range children[pid] {
			visit(c)
		}
	}
	for _, r := range roots {
		visit(r)
	}
	return out
}

// parentOf returns process pid's parent (field 4 of /proc/PID/stat).
func parentOf(pid int) (int, error) {
	fields, err := statFields(pid, 2)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(fields[1])
}
