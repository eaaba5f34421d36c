package agent

import (
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"github.com/sandboxkit/sandboxkit/internal/spawn"
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
	if err := spawn.Start(cmd); err != nil {
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
	reaping := children.owned != nil
	delete(children.owned, cmd.Process.Pid)
	children.Unlock()
	if reaping {
		// Orphans that exited while this command's zombie was the
		// first the kernel named (see ReapOrphans).
		ReapOrphans()
	}
	return err
}

// ReapOrphans reaps every exited child of this process that no command
// registered: the orphans the kernel handed to it. Call it on SIGCHLD.
//
// It asks the kernel for an exited child without reaping it (waitid with
// WNOWAIT) rather than scanning /proc, which costs a read per process of
// the sandbox on every SIGCHLD (under gVisor's ptrace platform each of
// those reads is a trapped system call). The kernel names the oldest
// exited child first: when that is a registered command, the orphans
// behind it wait until WaitCommand has reaped it and calls this again.
func ReapOrphans() {
	children.Lock()
	defer children.Unlock()
	if children.owned == nil {
		return
	}
	for {
		pid := exitedChild()
		if pid <= 0 || children.owned[pid] {
			return
		}
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); err != nil {
			return
		}
	}
}

// exitedChild is the pid of an exited child waiting to be reaped, left
// waitable, or 0 when there is none.
func exitedChild() int {
	// siginfo_t: si_signo, si_errno, si_code (and padding on 64-bit
	// architectures: the union is 8-aligned), then si_pid first in the
	// union for SIGCHLD.
	var info [128]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pAll, 0, uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(*(*int32)(unsafe.Pointer(&info[siPidOffset])))
}

const (
	pAll        = 0  // P_ALL
	siPidOffset = 16 // offsetof(siginfo_t, si_pid) on 64-bit Linux
)
