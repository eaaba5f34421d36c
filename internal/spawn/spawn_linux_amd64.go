package spawn

import (
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// The runtime's hooks around a fork, as package syscall calls them: before,
// signals are blocked on this thread and its goroutine cannot be preempted
// or grow its stack; after, in the parent, both are undone.
//
//go:linkname runtimeBeforeFork syscall.runtime_BeforeFork
func runtimeBeforeFork()

//go:linkname runtimeAfterFork syscall.runtime_AfterFork
func runtimeAfterFork()

func vfork() (pid, errno uintptr)

// rt_sigprocmask's how.
const (
	sigBlock   = 0
	sigSetmask = 2
)

// resetSignals are the signals whose runtime handler, run in a child that
// shares this process's memory, could reach this process: those a program
// catches through os/signal (sbxd: SIGHUP, SIGINT, SIGQUIT, SIGPIPE,
// SIGTERM, SIGCHLD; and SIGUSR1, SIGUSR2, SIGALRM, SIGWINCH, the usual
// others), and those the runtime turns into a crash or an exit (SIGHUP,
// SIGINT, SIGTERM; SIGQUIT, SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGFPE,
// SIGSEGV, SIGSTKFLT, SIGSYS). For any other signal the runtime's handler
// does nothing unless a program asked to be notified of it; in that moment
// it only loses a signal sent to a process that has not yet run its
// program.
var resetSignals = [...]uintptr{
	uintptr(syscall.SIGHUP), uintptr(syscall.SIGINT), uintptr(syscall.SIGQUIT), uintptr(syscall.SIGILL),
	uintptr(syscall.SIGTRAP), uintptr(syscall.SIGABRT), uintptr(syscall.SIGBUS), uintptr(syscall.SIGFPE),
	uintptr(syscall.SIGUSR1), uintptr(syscall.SIGSEGV), uintptr(syscall.SIGUSR2), uintptr(syscall.SIGPIPE),
	uintptr(syscall.SIGALRM), uintptr(syscall.SIGTERM), uintptr(syscall.SIGSTKFLT), uintptr(syscall.SIGCHLD),
	uintptr(syscall.SIGWINCH), uintptr(syscall.SIGSYS),
}

// sigaction is the kernel's struct sigaction on amd64; the zero value is
// SIG_DFL.
type sigaction struct {
	handler, flags, restorer, mask uintptr
}

// initialMask is the signal mask this process started with, which the
// runtime gives every thread and os/exec's children: read once.
var initialMask = sync.OnceValue(func() uint64 {
	var m uint64
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, sigBlock, 0, uintptr(unsafe.Pointer(&m)), 8, 0, 0)
	return m
})

// fileLimitRaised reports whether the runtime raised this process's soft
// limit of open files at start (package syscall sets it to the hard limit
// minus one), which a child must get back as it was: os/exec knows the
// original value and restores it, this package does not.
var fileLimitRaised = sync.OnceValue(func() bool {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil {
		return true
	}
	return l.Max > 0 && l.Cur == l.Max-1
})

// child is what the child needs, all made before the fork: it may not
// allocate.
type child struct {
	path       *byte
	argv, envv **byte
	dir        *byte
	fds        [3]uintptr
	setsid     bool
	setpgid    bool
	cred       bool
	setGroups  bool
	uid, gid   uintptr
	ngroups    uintptr
	groups     *uint32
	mask       uint64
	reset      [len(resetSignals)]uintptr // the signals to reset
	nreset     int
	errno      syscall.Errno // set by a child that failed
	inChdir    bool          // ... in its chdir
}

func available() bool { return !fileLimitRaised() }

func start(cmd *exec.Cmd) error {
	if fileLimitRaised() {
		return cmd.Start()
	}
	var c child
	var err error
	if c.path, err = syscall.BytePtrFromString(cmd.Path); err != nil {
		return cmd.Start()
	}
	argv, err := syscall.SlicePtrFromStrings(cmd.Args)
	if err != nil {
		return cmd.Start()
	}
	env, ok := environ(cmd)
	if !ok {
		return cmd.Start()
	}
	envv, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return cmd.Start()
	}
	c.argv, c.envv = &argv[0], &envv[0]
	if cmd.Dir != "" {
		if c.dir, err = syscall.BytePtrFromString(cmd.Dir); err != nil {
			return cmd.Start()
		}
	}
	files := [3]*os.File{cmd.Stdin.(*os.File), cmd.Stdout.(*os.File), cmd.Stderr.(*os.File)}
	for i, f := range files {
		c.fds[i] = f.Fd()
		// Below 3, putting one stream in place could close another's
		// descriptor first.
		if c.fds[i] < 3 {
			return cmd.Start()
		}
	}
	var groups []uint32
	if a := cmd.SysProcAttr; a != nil {
		c.setsid, c.setpgid = a.Setsid, a.Setpgid
		if cr := a.Credential; cr != nil {
			c.cred, c.uid, c.gid = true, uintptr(cr.Uid), uintptr(cr.Gid)
			if !cr.NoSetGroups {
				c.setGroups = true
				groups = append(groups, cr.Groups...)
				c.ngroups = uintptr(len(groups))
				if len(groups) > 0 {
					c.groups = &groups[0]
				}
			}
		}
	}
	c.mask = initialMask()
	// An ignored signal stays ignored in the child, as os/exec leaves it
	// (the runtime installs no handler for a signal ignored when the
	// program started, SIGHUP under nohup, or ignored through os/signal).
	for _, sig := range resetSignals {
		if !signal.Ignored(syscall.Signal(sig)) {
			c.reset[c.nreset] = sig
			c.nreset++
		}
	}

	fastStarts.Add(1)
	// As package syscall does: no descriptor made without close-on-exec
	// set at once can leak into the child.
	syscall.ForkLock.Lock()
	pid, errno := forkExec(&c)
	syscall.ForkLock.Unlock()
	// Nothing the child used may be collected before it is done.
	runtime.KeepAlive(files)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envv)
	runtime.KeepAlive(groups)
	if errno != 0 {
		return &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: syscall.Errno(errno)}
	}
	if c.errno != 0 {
		// The child could not run the program: it has exited; reap it.
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(int(pid), &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		if c.inChdir {
			return &os.PathError{Op: "chdir", Path: cmd.Dir, Err: c.errno}
		}
		return &os.PathError{Op: "fork/exec", Path: cmd.Path, Err: c.errno}
	}
	p, err := os.FindProcess(int(pid))
	if err != nil {
		return err
	}
	cmd.Process = p
	return nil
}

// forkExec forks a child sharing this process's memory that sets itself up
// from c and runs the program; it returns once the child has run it or
// failed (c.errno), with the child's pid or why there is no child.
//
// From the fork on, the child runs on this goroutine's stack in the
// runtime's fork state (signals blocked, no preemption, no stack growth):
// it only makes system calls, through functions that do not check the
// stack, and never returns.
//
//go:norace
//go:nocheckptr
//go:nosplit
func forkExec(c *child) (pid, errno uintptr) {
	var (
		e   syscall.Errno
		i   int
		act sigaction
	)
	runtimeBeforeFork()
	pid, errno = vfork()
	if errno != 0 || pid != 0 {
		runtimeAfterFork()
		return pid, errno
	}
	// The child.
	if c.setsid {
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETSID, 0, 0, 0); e != 0 {
			goto fail
		}
	}
	if c.setpgid {
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETPGID, 0, 0, 0); e != 0 {
			goto fail
		}
	}
	if c.cred {
		if c.setGroups {
			if _, _, e = syscall.RawSyscall(syscall.SYS_SETGROUPS, c.ngroups, uintptr(unsafe.Pointer(c.groups)), 0); e != 0 {
				goto fail
			}
		}
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETGID, c.gid, 0, 0); e != 0 {
			goto fail
		}
		if _, _, e = syscall.RawSyscall(syscall.SYS_SETUID, c.uid, 0, 0); e != 0 {
			goto fail
		}
	}
	if c.dir != nil {
		if _, _, e = syscall.RawSyscall(syscall.SYS_CHDIR, uintptr(unsafe.Pointer(c.dir)), 0, 0); e != 0 {
			c.inChdir = true
			goto fail
		}
	}
	for i = 0; i < 3; i++ {
		// dup3 to a new number clears close-on-exec there.
		if _, _, e = syscall.RawSyscall(syscall.SYS_DUP3, c.fds[i], uintptr(i), 0); e != 0 {
			goto fail
		}
	}
	for i = 0; i < c.nreset; i++ {
		syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, c.reset[i], uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGPROCMASK, sigSetmask, uintptr(unsafe.Pointer(&c.mask)), 0, 8, 0, 0)
	_, _, e = syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(c.path)), uintptr(unsafe.Pointer(c.argv)), uintptr(unsafe.Pointer(c.envv)))
fail:
	c.errno = e
	for {
		syscall.RawSyscall(syscall.SYS_EXIT, 253, 0, 0)
	}
}
