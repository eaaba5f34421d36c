package agent

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"unsafe"

	"github.com/sandboxkit/sandboxkit/internal/childpipe"
	"github.com/sandboxkit/sandboxkit/internal/spawn"
)

// waitExited blocks until pid has exited, leaving it waitable.
func waitExited(t *testing.T, pid int) {
	t.Helper()
	var info [128]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOWAIT, 0, 0)
	if errno != 0 {
		t.Fatalf("waitid %d: %v", pid, errno)
	}
}

// reaped says whether pid is no longer a child of this process (asking
// without reaping it).
func reaped(pid int) bool {
	var info [128]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, 1 /* P_PID */, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
		syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT, 0, 0)
	return errors.Is(errno, syscall.ECHILD)
}

// TestReapOrphans: an exited child no command registered is reaped; a
// registered command's is left for WaitCommand, which gets its status,
// and an orphan that exited behind it (the kernel names the oldest
// first) is reaped once WaitCommand has reaped the command.
func TestReapOrphans(t *testing.T) {
	t.Run("os/exec", func(t *testing.T) { testReapOrphans(t, false) })
	// Commands with files for their streams start by sbxd's own fork
	// (package spawn), whose child must be reaped the same way.
	t.Run("spawn", func(t *testing.T) { testReapOrphans(t, true) })
}

func testReapOrphans(t *testing.T, files bool) {
	EnableReaping()

	orphan := exec.Command("true")
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	waitExited(t, orphan.Process.Pid)
	ReapOrphans()
	if !reaped(orphan.Process.Pid) {
		t.Fatal("an exited child no command registered was not reaped")
	}

	own := exec.Command("sh", "-c", "exit 3")
	if files {
		null, err := childpipe.DevNull()
		if err != nil {
			t.Fatal(err)
		}
		own.Stdin, own.Stdout, own.Stderr = null, null, null
	}
	before := spawn.FastStarts()
	if err := StartCommand(own); err != nil {
		t.Fatal(err)
	}
	if fast := spawn.FastStarts() > before; fast != (files && spawn.Available()) {
		t.Errorf("started by spawn's fork: %v", fast)
	}
	waitExited(t, own.Process.Pid)
	behind := exec.Command("true")
	if err := behind.Start(); err != nil {
		t.Fatal(err)
	}
	waitExited(t, behind.Process.Pid)
	ReapOrphans()
	if err := WaitCommand(own); own.ProcessState == nil || own.ProcessState.ExitCode() != 3 {
		t.Fatalf("the registered command's status was taken: %v, %v", err, own.ProcessState)
	}
	if !reaped(behind.Process.Pid) {
		t.Fatal("the orphan behind a registered command was not reaped by WaitCommand")
	}
}
