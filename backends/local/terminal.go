package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
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
			return pipeterm.Ended(execID, fmt.Sprintf("%s: command not found\r\n", req.Cmd[0]), 127), nil
		}
		return nil, s.opErr("terminal", err)
	}
	return pipeterm.StartPTY(pipeterm.PTYProgram{
		ID: execID, Master: master, Wait: cmd.Wait,
		Kill: func(context.Context) error {
			backendkit.KillTree(cmd.Process.Pid, backendkit.Marker{Key: EnvExecID, Value: execID})
			return nil
		},
		End: func(io.Writer) int { return backendkit.ExitCode(cmd.ProcessState) },
	}), nil
}

var _ backend.Terminaler = (*Sandbox)(nil)
