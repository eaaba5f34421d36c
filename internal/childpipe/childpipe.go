//go:build linux

// Package childpipe makes the pipes and the /dev/null a child process is
// given, at the fewest system calls: under gVisor's ptrace platform every
// call of sbxd is trapped (tens of microseconds each), and os.Pipe costs
// about a dozen per pipe for a command that runs only `true`.
//
// os.Pipe registers both ends with the runtime's poller (F_GETFL, F_SETFL
// and epoll_ctl each), and os/exec then puts the child's end back into
// blocking mode (F_GETFL, F_SETFL) and removes it from the poller on close.
// Here only the parent's end is made non-blocking and polled; the child's
// end stays a plain blocking descriptor, as a child expects its standard
// streams to be. A command without stdin gets one /dev/null opened once
// per process, where os/exec opens and closes it for each command.
package childpipe

import (
	"os"
	"sync"
	"syscall"
)

// ForOutput returns a pipe whose write end is for a child (blocking) and
// whose read end is the parent's (non-blocking, with deadlines).
func ForOutput() (parent, child *os.File, err error) {
	r, w, err := pipe(0)
	if err != nil {
		return nil, nil, err
	}
	return r, w, nil
}

// ForInput returns a pipe whose read end is for a child (blocking) and
// whose write end is the parent's (non-blocking, with deadlines).
func ForInput() (parent, child *os.File, err error) {
	r, w, err := pipe(1)
	if err != nil {
		return nil, nil, err
	}
	return w, r, nil
}

// pipe makes a close-on-exec pipe with end parentEnd (0: read, 1: write)
// non-blocking.
func pipe(parentEnd int) (r, w *os.File, err error) {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	// A new pipe's status flags are its access mode alone, which F_SETFL
	// ignores: one call, where syscall.SetNonblock reads them first.
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fds[parentEnd]), syscall.F_SETFL, syscall.O_NONBLOCK); e != 0 {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", e)
	}
	// NewFile polls a descriptor that is non-blocking already, and only
	// that one.
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

var devNull = sync.OnceValues(func() (*os.File, error) {
	return os.Open(os.DevNull)
})

// DevNull is /dev/null opened for reading, shared by every caller and never
// closed: give it as a child's stdin (os/exec hands an *os.File over as
// is). Do not close it.
func DevNull() (*os.File, error) { return devNull() }
