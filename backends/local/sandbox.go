package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/outpipe"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Sandbox is one local sandbox. It is safe for concurrent use.
type Sandbox struct {
	b   *Backend
	id  string
	dir string
}

var (
	_ backend.Sandbox    = (*Sandbox)(nil)
	_ backend.FileSystem = (*Sandbox)(nil)
	_ backend.Attacher   = (*Sandbox)(nil)
	_ backend.Endpointer = (*Sandbox)(nil)
	_ backend.Renewer    = (*Sandbox)(nil)
)

func (s *Sandbox) ID() string { return s.id }

// Dir is the sandbox's directory on the host.
func (s *Sandbox) Dir() string { return s.dir }

func (s *Sandbox) opErr(op string, err error) error {
	return backend.WrapOp(op, Name, s.id, err)
}

func (s *Sandbox) meta() (*meta, error) {
	m, err := readMeta(s.dir)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	m, err := s.meta()
	if err != nil {
		return backend.Info{}, s.opErr("info", err)
	}
	return m.info(), nil
}

// command prepares argv to run in the sandbox with the sandbox's
// environment, working directory and user, in a process group of its own.
func (s *Sandbox) command(m *meta, argv []string, env map[string]string, workdir, user, execID string) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	switch {
	case workdir == "":
		cmd.Dir = m.WorkDir
	case filepath.IsAbs(workdir):
		cmd.Dir = workdir
	default:
		cmd.Dir = filepath.Join(m.WorkDir, workdir)
	}
	cmd.Env = os.Environ()
	for k, v := range m.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, EnvSandboxID+"="+s.id, EnvExecID+"="+execID)
	attr := &syscall.SysProcAttr{Setpgid: true}
	if user == "" {
		user = m.User
	}
	if user != "" {
		if !s.b.Capabilities().User {
			return nil, fmt.Errorf("%w: user %q: the local backend can run as another user only when the host program runs as root", errors.ErrUnsupported, user)
		}
		cred, err := lookupCredential(user)
		if err != nil {
			return nil, err
		}
		attr.Credential = &syscall.Credential{Uid: cred[0], Gid: cred[1]}
	}
	cmd.SysProcAttr = attr
	// A background child may keep stdout open after the command exits;
	// stop waiting for it shortly after the command itself is done (for
	// writers that are not files; Exec uses its own pipes, see outpipe).
	cmd.WaitDelay = outputGrace
	return cmd, nil
}

// outputGrace is how long output of background children that keep a
// command's stdout or stderr open is passed on after the command exits.
const outputGrace = 250 * time.Millisecond

func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	m, err := s.meta()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	execID, err := statedir.NewID()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	cmd, err := s.command(m, argv, req.Env, req.WorkDir, req.User, execID)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	out := backend.NewOutputs(req)
	// Pipes of our own (see package outpipe): no output is lost when the
	// copy falls behind on a loaded machine.
	outP, err := outpipe.New(out.Stdout)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	errP, err := outpipe.New(out.Stderr)
	if err != nil {
		outP.Close()
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	cmd.Stdout, cmd.Stderr = outP.W(), errP.W()
	// Stdin goes through a pipe we feed ourselves: os/exec would make Wait
	// wait for the copy from a non-file reader, so a command that exits
	// without reading its stdin would hang until the caller closed it.
	var stdinW *os.File
	if req.Stdin != nil {
		if f, ok := req.Stdin.(*os.File); ok {
			cmd.Stdin = f
		} else {
			pr, pw, err := os.Pipe()
			if err != nil {
				return backend.ExecResult{}, s.opErr("exec", err)
			}
			defer pr.Close()
			cmd.Stdin, stdinW = pr, pw
		}
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
	if stdinW != nil {
		cmd.Stdin.(*os.File).Close()
		if err != nil {
			stdinW.Close()
		} else {
			go func() {
				io.Copy(stdinW, req.Stdin)
				stdinW.Close()
			}()
		}
	}
	if err != nil {
		if cred := cmd.SysProcAttr.Credential; cred != nil && errors.Is(err, os.ErrPermission) {
			// The kernel does not say whether entering the working
			// directory or executing the program was refused.
			return backend.ExecResult{}, s.opErr("exec", fmt.Errorf("uid %d cannot enter working directory %s or execute %s: %w",
				cred.Uid, cmd.Dir, argv[0], err))
		}
		// A missing program is data, as a shell would report it.
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			// Into the stderr writer when there is one (sbx run streams).
			fmt.Fprintf(out.Stderr, "%s: command not found\n", argv[0])
			res := backend.ExecResult{ExitCode: 127, Duration: time.Since(start)}
			out.Finish(&res)
			return res, nil
		}
		if errors.Is(err, os.ErrPermission) {
			fmt.Fprintf(out.Stderr, "%s: permission denied\n", argv[0])
			res := backend.ExecResult{ExitCode: 126, Duration: time.Since(start)}
			out.Finish(&res)
			return res, nil
		}
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var timer <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout)
		defer t.Stop()
		timer = t.C
	}
	var res backend.ExecResult
	var waitErr, ctxErr error
	select {
	case waitErr = <-done:
	case <-timer:
		res.TimedOut = true
		killTree(cmd.Process.Pid, execID)
		waitErr = <-done
	case <-ctx.Done():
		ctxErr = ctx.Err()
		killTree(cmd.Process.Pid, execID)
		waitErr = <-done
	}
	if stdinW != nil {
		// Unblocks the copy if the command exited without reading it all.
		stdinW.Close()
	}
	outpipe.Finish(outputGrace, outP, errP)
	res.Duration = time.Since(start)
	out.Finish(&res)
	switch {
	case res.TimedOut:
		res.ExitCode = backend.TimeoutExitCode
	default:
		res.ExitCode = exitCode(cmd.ProcessState)
	}
	if ctxErr != nil {
		return res, s.opErr("exec", ctxErr)
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, s.opErr("exec", waitErr)
	}
	return res, nil
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// killTree kills a command's process group, then every process that still
// carries its marker (children that started a session of their own).
func killTree(pid int, execID string) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	procfs.KillByEnv(EnvExecID, execID)
}

// startMain starts the entry's command detached from the host program, so it
// keeps running after the program exits, with its output in main.log.
func (s *Sandbox) startMain(m *meta, argv []string) (int, uint64, error) {
	if len(argv) == 0 {
		return 0, 0, fmt.Errorf("%w: empty command", backend.ErrInvalidConfig)
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "main.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, 0, err
	}
	defer logf.Close()
	cmd, err := s.command(m, argv, nil, "", "", "main-"+s.id)
	if err != nil {
		return 0, 0, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	pid := cmd.Process.Pid
	start, _ := procfs.StartTime(pid)
	// Reap it if it exits while we are still running; afterwards init does.
	go cmd.Wait()
	return pid, start, nil
}

// kill ends every process the sandbox started.
func (s *Sandbox) kill() int {
	return procfs.KillByEnv(EnvSandboxID, s.id)
}

func (s *Sandbox) Destroy(ctx context.Context) error {
	if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if left := s.kill(); left > 0 {
		s.b.log.Warn("processes survived SIGKILL", "sandbox", s.id, "count", left)
	}
	// Remove meta.json first so List and Get stop seeing the sandbox even if
	// removing a large tree takes a while or partly fails.
	if err := os.Remove(filepath.Join(s.dir, "meta.json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return s.opErr("destroy", err)
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return s.opErr("destroy", err)
	}
	s.b.log.Debug("destroyed sandbox", "id", s.id)
	return nil
}

// Endpoint returns 127.0.0.1:port: local sandboxes share the host's network.
func (s *Sandbox) Endpoint(ctx context.Context, port int) (string, error) {
	if port <= 0 || port > 65535 {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	if _, err := s.meta(); err != nil {
		return "", s.opErr("endpoint", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// Renew sets the sandbox to expire ttl from now.
func (s *Sandbox) Renew(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if ttl <= 0 {
		return time.Time{}, s.opErr("renew", fmt.Errorf("%w: ttl must be positive, got %s", backend.ErrInvalidConfig, ttl))
	}
	s.b.metaMu.Lock()
	defer s.b.metaMu.Unlock()
	m, err := s.meta()
	if err != nil {
		return time.Time{}, s.opErr("renew", err)
	}
	m.ExpiresAt = time.Now().UTC().Add(ttl).Truncate(time.Millisecond)
	if err := writeMeta(s.dir, m); err != nil {
		return time.Time{}, s.opErr("renew", err)
	}
	return m.ExpiresAt, nil
}
