// Package spawn starts a command as os/exec's Cmd.Start does, at fewer
// system calls where it can: for sbxd, whose every system call costs tens
// of microseconds under gVisor's ptrace platform.
//
// Go's own fork path resets, in the child, every signal handler its runtime
// installed (about 56 rt_sigaction calls) before execve, and reports a
// failed execve through a pipe (four more calls). The handlers need not all
// go: execve resets caught signals by itself; the reset only guards the
// moment between fork and execve, when a signal would run the runtime's
// handler in the child. Sharing the parent's memory (vfork), only the
// handlers whose run there could reach the parent matter: those of the
// signals a program may ask to be notified of and those that make the
// runtime crash or exit. Start resets those (resetSignals; a signal this
// process ignores stays ignored, as os/exec leaves it) and learns of a
// failed execve through the memory the child shares, then hands the process
// to os/exec (Cmd.Process), so that Cmd.Wait and everything after it work
// as after Cmd.Start.
//
// The fast path needs linux/amd64 and a plain command (see eligible): files
// for its three streams, no extra files, no context, and at most a process
// group, a session and a user; anything else goes to Cmd.Start unchanged.
package spawn

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
)

// fastStarts counts the commands the fast path started or tried to.
var fastStarts atomic.Int64

// Available reports whether Start has a fast path in this process: on
// linux/amd64, unless the runtime raised the limit of open files at start
// (then a child needs the original back, which only os/exec knows).
func Available() bool { return available() }

// FastStarts is how many commands Start started, or tried to, by the fast
// path so far in this process.
func FastStarts() int64 { return fastStarts.Load() }

// Start starts cmd, by the fast path when it can (see the package doc).
func Start(cmd *exec.Cmd) error {
	if !eligible(cmd) {
		return cmd.Start()
	}
	return start(cmd)
}

// eligible reports whether cmd is plain enough for the fast path on any
// platform that has one: os/exec would do nothing for it beyond starting
// the process.
func eligible(cmd *exec.Cmd) bool {
	if cmd.Process != nil || cmd.Err != nil || cmd.Cancel != nil || cmd.WaitDelay != 0 || len(cmd.ExtraFiles) > 0 {
		return false
	}
	if len(cmd.Args) == 0 || len(cmd.Path) == 0 || cmd.Path[0] != '/' {
		return false
	}
	for _, s := range []any{cmd.Stdin, cmd.Stdout, cmd.Stderr} {
		if !isFile(s) {
			return false
		}
	}
	if a := cmd.SysProcAttr; a != nil {
		rest := *a
		rest.Setpgid, rest.Setsid, rest.Credential = false, false, nil
		if !reflect.ValueOf(rest).IsZero() {
			return false
		}
	}
	return true
}

func isFile(s any) bool {
	f, ok := s.(*os.File)
	return ok && f != nil
}

// environ is the environment os/exec gives cmd's process: cmd.Env, or this
// process's with PWD set to cmd.Dir; of entries with the same name, the
// last. It reports false for what os/exec handles in ways of its own (an
// entry with a NUL, which it refuses; one without a name or without "=").
func environ(cmd *exec.Cmd) ([]string, bool) {
	env := cmd.Env
	if env == nil {
		env = os.Environ()
		if cmd.Dir != "" {
			pwd, err := filepath.Abs(cmd.Dir)
			if err != nil {
				return nil, false
			}
			env = append(env[:len(env):len(env)], "PWD="+pwd)
		}
	}
	last := make(map[string]int, len(env))
	for i, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, false
		}
		last[name] = i
	}
	if len(last) == len(env) {
		return env, true
	}
	out := make([]string, 0, len(last))
	for i, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if last[name] == i {
			out = append(out, kv)
		}
	}
	return out, true
}
