package lite

import (
	"context"
	"fmt"
	"io"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/pipeterm"
	"github.com/sandboxkit/sandboxkit/internal/pty"
)

// Terminal runs req on a pseudo-terminal the runtime opens in the sandbox
// (runc exec with a terminal). The agent the sandbox's init serves has detachable terminals
// (sbxd.Client) and comes first; this is the fallback, and its terminals
// end with their client.
func (s *Sandbox) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	if err := req.Check(); err != nil {
		return nil, s.opErr("terminal", err)
	}
	m, err := s.meta()
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	execID, err := newExecID(s.id)
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	p, err := s.execProcess(m, req.Cmd, req.EnvWithTerm(), req.WorkDir, req.User, execID, 0)
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	// The program itself, not under sbxd exec: a wrapper would put it in a
	// process group of its own, outside the terminal's foreground group.
	// The marker in its environment still finds it for a kill.
	p.Args = req.Cmd
	p.Terminal = true
	size := req.SizeOrDefault()
	p.ConsoleSize = &specs.Box{Height: uint(size.Rows), Width: uint(size.Cols)}
	// runc in the foreground with a terminal copies between its own stdio
	// and the terminal it opens (a console socket is only for --detach):
	// its stdio is a terminal of ours, so that resizing ours sends runc
	// the SIGWINCH it passes on, and runc puts ours in raw mode.
	master, tty, err := pty.Open()
	if err != nil {
		return nil, s.opErr("terminal", err)
	}
	pty.SetSize(master, size.Rows, size.Cols)
	cmd, logFile, cleanup, err := s.runtimeExec(m, p, execID)
	if err != nil {
		master.Close()
		tty.Close()
		return nil, s.opErr("terminal", err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	warmExec(m) // ends by itself: the command outlives this call
	err = cmd.Start()
	tty.Close()
	if err != nil {
		master.Close()
		cleanup()
		return nil, s.opErr("terminal", err)
	}
	return pipeterm.StartPTY(pipeterm.PTYProgram{
		ID: execID, Master: master, Wait: cmd.Wait,
		Kill: func(context.Context) error {
			s.killMarked(m, execID)
			return nil
		},
		End: func(out io.Writer) int {
			defer cleanup()
			if rerr := runtimeFailure(logFile); rerr != nil {
				msg, code := startFailure(req.Cmd[0], rerr)
				io.WriteString(out, msg)
				return code
			}
			return backendkit.ExitCode(cmd.ProcessState)
		},
	}), nil
}

// startFailure says why the program did not start, with a shell's status:
// 127 for a missing program, else 126.
func startFailure(name string, err error) (string, int) {
	code := 126
	if msg := err.Error(); strings.Contains(msg, "no such file") || strings.Contains(msg, "not found") {
		code = 127
	}
	return fmt.Sprintf("%s: %v\r\n", name, err), code
}

var _ backend.Terminaler = (*Sandbox)(nil)
