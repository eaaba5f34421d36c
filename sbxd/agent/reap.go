package agent

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
)

// Orphan reaping for an agent that is its sandbox's first process (sbxd
// init --agent runs the agent in that process, so that the agent listens
// one process start sooner). Processes whose parent dies are handed to the
// first process, which must reap them, and a plain wait for any child would
// also reap the commands the agent started and waits for through os/exec.
// So the commands are registered while they are started (StartCommand),
// and ReapOrphans reaps only the exited children that are not registered.
var children struct {
	sync.Mutex
	owned map[int]bool // nil: reaping is off (the agent is not pid 1)
}

// EnableReaping makes this process the reaper of orphans: from now on
// StartCommand registers commands, and ReapOrphans may be called.
func EnableReaping() {
	children.Lock()
	defer children.Unlock()
	if children.owned == nil {
		children.owned = map[int]bool{}
	}
}

// StartCommand starts cmd. While reaping is on, cmd's process is reaped by
// WaitCommand, never by ReapOrphans.
func StartCommand(cmd *exec.Cmd) error {
	children.Lock()
	defer children.Unlock()
	if err := cmd.Start(); err != nil {
		return err
	}
	if children.owned != nil {
		children.owned[cmd.Process.Pid] = true
	}
	return nil
}

// WaitCommand waits for a command StartCommand started.
func WaitCommand(cmd *exec.Cmd) error {
	err := cmd.Wait()
	children.Lock()
	delete(children.owned, cmd.Process.Pid)
	children.Unlock()
	return err
}

// ReapOrphans reaps every exited child of this process that no command
// registered: the orphans the kernel handed to it. Call it on SIGCHLD.
func ReapOrphans() {
	children.Lock()
	defer children.Unlock()
	self := os.Getpid()
	for _, pid := range zombieChildren(self) {
		if children.owned[pid] {
			continue
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	}
}

// zombieChildren lists the children of parent that have exited and wait to
// be reaped, from /proc.
func zombieChildren(parent int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and
		// parentheses, so parse after its last ')'.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(data[i+1:])
		if len(f) < 2 || string(f[0]) != "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(string(f[1])); err == nil && ppid == parent {
			out = append(out, pid)
		}
	}
	return out
}
