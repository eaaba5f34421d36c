package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/pipeterm"
	"github.com/sandboxkit/sandboxkit/internal/pty"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Terminal runs req on a pseudo-terminal of the host, in the sandbox's
// folder with its environment (sbxd's terminals come first where the
// caller wraps the sandbox with sbxd; these end with their client).
func (s *Sandbox) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	if err := req.Check(); err != nil {
		return nil, s.opErr("terminal", err)
	}
	m, err := s.meta()
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	execID, err := statedir.NewID()
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	cmd, err := s.command(m, req.Cmd, req.EnvWithTerm(), req.WorkDir, req.User, execID)
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	master, tty, err := pty.Open()
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	size := req.SizeOrDefault()
	pty.SetSize(master, size.Rows, size.Cols)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own with the terminal as its controlling terminal.
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid = true
	cmd.SysProcAttr.Setctty = true
	cmd.SysProcAttr.Ctty = 0
	cmd.WaitDelay = 0
	err = cmd.Start()
	tty.Close()
	if err != nil {
		master.Close()
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return s.failedTerminal(execID, fmt.Sprintf("%s: command not found\r\n", req.Cmd[0]), 127), nil
		}
		return nil, s.opErr("terminal", err)
	}
	var closeOnce sync.Once
	closeMaster := func() { closeOnce.Do(func() { master.Close() }) }
	kill := func(context.Context) error {
		killTree(cmd.Process.Pid, execID)
		return nil
	}
	run := func(ctx context.Context, stdin io.Reader, stdout io.Writer) (int, error) {
		go io.Copy(master, stdin)
		copied := make(chan struct{})
		go func() {
			io.Copy(stdout, master) // ends with EIO once nothing holds the terminal
			close(copied)
		}()
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		select {
		case <-waited:
		case <-ctx.Done():
			kill(ctx)
			<-waited
		}
		select {
		case <-copied:
		case <-ctx.Done():
		}
		closeMaster()
		return exitCode(cmd.ProcessState), nil
	}
	return pipeterm.Start(execID, run, pipeterm.Ops{
		Resize: func(_ context.Context, size backend.TermSize) error {
			if err := pty.SetSize(master, size.Rows, size.Cols); err != nil {
				return s.opErr("terminal", err)
			}
			return nil
		},
		Kill: kill,
	}), nil
}

// failedTerminal reports a program that could not start as a terminal
// would show it: the complaint, then its exit status.
func (s *Sandbox) failedTerminal(id, msg string, code int) backend.Terminal {
	return pipeterm.Start(id, func(_ context.Context, _ io.Reader, stdout io.Writer) (int, error) {
		io.WriteString(stdout, msg)
		return code, nil
	}, pipeterm.Ops{
		Resize: func(context.Context, backend.TermSize) error { return nil },
		Kill:   func(context.Context) error { return nil },
	})
}

var _ backend.Terminaler = (*Sandbox)(nil)
