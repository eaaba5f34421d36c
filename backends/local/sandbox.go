package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Sandbox is one local sandbox. It is safe for concurrent use.
type Sandbox struct {
	// Its own terminals end with their client (see Terminal).
	backend.TerminalsEndWithClient

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

func (s *Sandbox) meta() (*meta, error) { return readMeta(s.dir) }

func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	m, err := s.meta()
	if errors.Is(err, backend.ErrNotFound) {
		if i, half := statedir.HalfInfo(s.dir, Name); half {
			return i, nil
		}
	}
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
	// stop waiting for it shortly after the command itself is done.
	cmd.WaitDelay = backendkit.OutputGrace
	return cmd, nil
}

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
	res, err := backendkit.Exec(ctx, cmd, req, backendkit.Marker{Key: EnvExecID, Value: execID})
	if err != nil {
		return res, s.opErr("exec", err)
	}
	return res, nil
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
	// The record says removing first and goes last (statedir.Lifecycle):
	// a Destroy killed half-way leaves a sandbox List shows and Destroy
	// finishes.
	if err := statedir.MarkRemoving(s.dir); err != nil {
		return s.opErr("destroy", err)
	}
	if left := s.kill(); left > 0 {
		s.b.log.Warn("processes survived SIGKILL", "sandbox", s.id, "count", left)
	}
	if err := statedir.RemoveDir(s.dir, nil); err != nil {
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
	var exp time.Time
	err := statedir.Update(s.b.dir, s.id, func(m *meta) error {
		m.ExpiresAt = time.Now().UTC().Add(ttl).Truncate(time.Millisecond)
		exp = m.ExpiresAt
		return nil
	})
	if err != nil {
		return time.Time{}, s.opErr("renew", err)
	}
	return exp, nil
}
