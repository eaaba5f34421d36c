package backendkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/attach"
	"github.com/sandboxkit/sandboxkit/internal/outpipe"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/stdinpipe"
)

// OutputGrace is how long output of background children that keep a
// command's stdout or stderr open is passed on after the command exits.
const OutputGrace = 250 * time.Millisecond

// Marker is an environment variable a command and every process it starts
// carry (KEY=VALUE in its cmd.Env), by which KillTree finds the ones that
// left its process group. Use a key of your backend's and a fresh value
// (NewID) per command.
type Marker struct{ Key, Value string }

// Env is the marker as a cmd.Env entry.
func (m Marker) Env() string { return m.Key + "=" + m.Value }

// Exec runs cmd, which the caller prepared (program, arguments, directory,
// environment with m, credentials), as backend.Sandbox.Exec must: output
// to req's writers or kept up to req's limit, stdin from req.Stdin, a
// timeout that kills the whole tree and reports exit code 124 with
// TimedOut, cancellation of ctx that kills it too (and returns ctx's
// error), a missing program as exit code 127 and one that may not run as
// 126 (data, as a shell reports them), and a signal as 128+N. cmd gets a
// process group of its own. The caller wraps the error in its OpError.
func Exec(ctx context.Context, cmd *exec.Cmd, req backend.ExecRequest, m Marker) (backend.ExecResult, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	// A background child may keep stdout open after the command exits.
	cmd.WaitDelay = OutputGrace
	out := backend.NewOutputs(req)
	// Pipes of our own (outpipe): no output is lost when the copy falls
	// behind on a loaded machine.
	outP, err := outpipe.New(out.Stdout)
	if err != nil {
		return backend.ExecResult{}, err
	}
	errP, err := outpipe.New(out.Stderr)
	if err != nil {
		outP.Close()
		return backend.ExecResult{}, err
	}
	cmd.Stdout, cmd.Stderr = outP.W(), errP.W()
	stdin, err := stdinpipe.Set(cmd, req.Stdin)
	if err != nil {
		outP.Close()
		errP.Close()
		return backend.ExecResult{}, err
	}
	start := time.Now()
	err = cmd.Start()
	if err != nil {
		outP.Close()
		errP.Close()
	} else {
		outP.Started()
		errP.Started()
	}
	stdin.Started(err)
	if err != nil {
		return startFailed(err, cmd, start, out)
	}
	var res backend.ExecResult
	var waitErr, ctxErr error
	res.TimedOut, waitErr, ctxErr = waitOrKill(ctx, cmd, req.Timeout, m)
	stdin.Close()
	outpipe.Finish(OutputGrace, outP, errP)
	res.Duration = time.Since(start)
	out.Finish(&res)
	if res.TimedOut {
		res.ExitCode = backend.TimeoutExitCode
	} else {
		res.ExitCode = ExitCode(cmd.ProcessState)
	}
	if ctxErr != nil {
		return res, ctxErr
	}
	if _, exited := errors.AsType[*exec.ExitError](waitErr); waitErr != nil && !exited && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, waitErr
	}
	return res, nil
}

// startFailed is Exec's answer when cmd did not start: a missing program
// (127) or one that may not be run (126) is data; as another user, a
// refusal is an error naming both what it may be.
func startFailed(err error, cmd *exec.Cmd, start time.Time, out *backend.Outputs) (backend.ExecResult, error) {
	argv0 := cmd.Args[0]
	if cred := cmd.SysProcAttr.Credential; cred != nil && errors.Is(err, os.ErrPermission) {
		// The kernel does not say whether entering the working
		// directory or executing the program was refused.
		return backend.ExecResult{}, fmt.Errorf("uid %d cannot enter working directory %s or execute %s: %w", cred.Uid, cmd.Dir, argv0, err)
	}
	code := 0
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(out.Stderr, "%s: command not found\n", argv0)
		code = 127
	case errors.Is(err, os.ErrPermission):
		fmt.Fprintf(out.Stderr, "%s: permission denied\n", argv0)
		code = 126
	default:
		return backend.ExecResult{}, err
	}
	res := backend.ExecResult{ExitCode: code, Duration: time.Since(start)}
	out.Finish(&res)
	return res, nil
}

// waitOrKill waits for the started cmd to end, killing its tree when
// timeout (if > 0) passes or ctx ends.
func waitOrKill(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, m Marker) (timedOut bool, waitErr, ctxErr error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	select {
	case waitErr = <-done:
	case <-timer:
		timedOut = true
		KillTree(cmd.Process.Pid, m)
		waitErr = <-done
	case <-ctx.Done():
		ctxErr = ctx.Err()
		KillTree(cmd.Process.Pid, m)
		waitErr = <-done
	}
	return timedOut, waitErr, ctxErr
}

// ExitCode is a finished process's exit code, 128+N for a signal.
func ExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// KillTree kills a command's process tree and group, then every process
// that still carries its marker (children that started a session of their
// own).
func KillTree(pid int, m Marker) {
	// The tree first: once its root is dead, an unmarked child that left
	// the process group could no longer be found through its parent.
	procfs.KillTree(pid, m.Key, m.Value)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// KillMarked kills every process that carries KEY=VALUE in its
// environment (a whole sandbox's, with a marker every command of it
// carries) and returns how many survived.
func KillMarked(key, value string) int { return procfs.KillByEnv(key, value) }

// Attach starts cmd (prepared as for Exec) with its stdin and stdout
// connected to the returned process, its stderr to stderr: what
// backend.Attacher gives, and how the sbxd agent is started. Killing the
// process kills its tree.
func Attach(ctx context.Context, cmd *exec.Cmd, stderr io.Writer, m Marker) (backend.Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Stderr = stderr
	stdin, stdout, err := attach.Start(cmd)
	if err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	p := attach.New(ctx, stdin, stdout, func(<-chan struct{}) { KillTree(pid, m) })
	go func() {
		err := cmd.Wait()
		stdin.Close()
		p.Exit(ExitCode(cmd.ProcessState), attach.Failed(err))
	}()
	return p, nil
}
