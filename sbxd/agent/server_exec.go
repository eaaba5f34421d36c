package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/outpipe"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
	"github.com/sandboxkit/sandboxkit/internal/stdinpipe"
)

// waitDelay is how long output of background children that still hold a
// finished command's stdout or stderr is passed on (as sbxd exec --grace).
const waitDelay = 250 * time.Millisecond

// streamWriter is one output stream of a command: it sends up to limit
// bytes (0: all), then counts and drops the rest, so the command is never
// blocked by a cap.
type streamWriter struct {
	sink      *sbxdwire.FrameSink
	stream    byte
	limit     int64
	sent      int64
	truncated bool
}

func (s *streamWriter) Write(p []byte) (int, error) {
	q := p
	if s.limit > 0 {
		room := s.limit - s.sent
		if int64(len(q)) > room {
			s.truncated = true
			q = q[:max(room, 0)]
		}
	}
	if len(q) > 0 {
		if err := s.sink.WriteFrame(s.stream, q); err != nil {
			return 0, err
		}
		s.sent += int64(len(q))
	}
	return len(p), nil
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	req, err := sbxdwire.DecodeExecRequest(r.Header.Get(sbxdwire.HdrExec))
	if err != nil {
		writeError(w, "exec", "", errors.Join(sbxdwire.ErrInvalid, err))
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	s.mu.Lock()
	if _, dup := s.execs[req.ID]; dup {
		s.mu.Unlock()
		writeError(w, "exec", "", fmt.Errorf("%w: exec id %q is in use", sbxdwire.ErrInvalid, req.ID))
		return
	}
	s.execs[req.ID] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.execs, req.ID)
		s.mu.Unlock()
	}()

	rc := http.NewResponseController(w)
	// stdin (the request body) is read while output is written.
	rc.EnableFullDuplex()
	w.Header().Set("Trailer", sbxdwire.HdrResult)
	w.Header().Set("Content-Type", "application/vnd.sbxd.frames")
	sink := sbxdwire.NewFrameSink(w, rc.Flush, func(err error) { cancel(fmt.Errorf("sending output: %w", err)) })
	res := s.runCommand(ctx, req, r.Body, sink)
	b, _ := json.Marshal(res)
	w.Header().Set(sbxdwire.HdrResult, string(b))
}

// runCommand runs req with its output going to sink and returns what it
// left. A cancelled ctx kills the command's tree.
func (s *Server) runCommand(ctx context.Context, req sbxdwire.ExecRequest, stdin io.Reader, sink *sbxdwire.FrameSink) sbxdwire.ExecResult {
	cmd, err := s.command(req.Argv, req.Env, req.Dir, req.User, req.ID)
	if err != nil {
		return sbxdwire.ExecResult{ExitCode: -1, Error: err.Error()}
	}
	stdout := &streamWriter{sink: sink, stream: sbxdwire.FrameStdout, limit: req.StdoutLimit}
	stderr := &streamWriter{sink: sink, stream: sbxdwire.FrameStderr, limit: req.StderrLimit}
	// Pipes of our own rather than os/exec's (see package outpipe).
	outP, err := outpipe.New(stdout)
	if err != nil {
		return sbxdwire.ExecResult{ExitCode: -1, Error: err.Error()}
	}
	errP, err := outpipe.New(stderr)
	if err != nil {
		outP.Close()
		return sbxdwire.ExecResult{ExitCode: -1, Error: err.Error()}
	}
	cmd.Stdout, cmd.Stderr = outP.W(), errP.W()
	// stdin through a pipe fed here (see package stdinpipe): a command may
	// exit without reading it.
	if !req.Stdin {
		stdin = nil
	}
	stdinP, err := stdinpipe.Set(cmd, stdin)
	if err != nil {
		return sbxdwire.ExecResult{ExitCode: -1, Error: err.Error()}
	}
	defer stdinP.Close()
	if err = StartCommand(cmd); err != nil {
		stdinP.Started(err)
		outP.Close()
		errP.Close()
		return startFailure(req.Argv[0], err, stderr)
	}
	outP.Started()
	errP.Started()
	stdinP.Started(nil)
	done := make(chan error, 1)
	go func() { done <- WaitCommand(cmd) }()
	var timer <-chan time.Time
	if req.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timer = t.C
	}
	var res sbxdwire.ExecResult
	select {
	case <-done:
	case <-timer:
		res.TimedOut = true
		killTree(cmd.Process.Pid, req.ID)
		<-done
	case <-ctx.Done():
		killTree(cmd.Process.Pid, req.ID)
		<-done
		res.Error = "cancelled: " + context.Cause(ctx).Error()
	}
	// Background children may hold the pipes: pass their output on for
	// waitDelay, then stop (what is buffered by then is still sent).
	outpipe.Finish(waitDelay, outP, errP)
	res.ExitCode = exitStatus(cmd.ProcessState)
	if res.TimedOut {
		res.ExitCode = 124
	}
	res.Truncated = stdout.truncated || stderr.truncated
	return res
}

// startFailure reports a command that could not start as a shell would: 127
// for a missing program, 126 for one that cannot run.
func startFailure(name string, err error, stderr io.Writer) sbxdwire.ExecResult {
	code := 126
	msg := "permission denied"
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist):
		code, msg = 127, "command not found"
	case errors.Is(err, os.ErrPermission):
	default:
		var ee *exec.Error
		if errors.As(err, &ee) {
			msg = ee.Err.Error()
		} else {
			msg = err.Error()
		}
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, msg)
	return sbxdwire.ExecResult{ExitCode: code}
}

// command prepares argv with the agent's environment plus env (and the
// marker), in dir, as user, in a process group of its own.
func (s *Server) command(argv []string, env map[string]string, dir, userName, id string) (*exec.Cmd, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	if dir != "" {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("working directory %s: %w", dir, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s: not a directory", dir)
		}
		cmd.Dir = dir
	}
	cmd.Env = append([]string(nil), s.baseEnv...)
	attr := &syscall.SysProcAttr{Setpgid: true}
	if userName != "" {
		cred, home, err := lookupUser(userName)
		if err != nil {
			return nil, err
		}
		if home != "" {
			cmd.Env = append(cmd.Env, "HOME="+home)
		}
		attr.Credential = cred
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, sbxdwire.EnvExecID+"="+id)
	cmd.SysProcAttr = attr
	return cmd, nil
}

// LookupUser resolves a user for a command as docker exec --user does
// ("name", "uid", "name:group" or "uid:gid", names from the sandbox's
// /etc/passwd and /etc/group), returning its credential and home
// directory; `sbxd exec --user` uses it. It fails, wrapping
// errors.ErrUnsupported, when the caller is not root and the user is
// another one.
func LookupUser(spec string) (*syscall.Credential, string, error) { return lookupUser(spec) }

// lookupUser resolves "name", "uid", "name:group" or "uid:gid" as docker
// exec --user does.
func lookupUser(spec string) (*syscall.Credential, string, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	var uid, gid uint64
	var home string
	var groups []uint32
	u, err := user.Lookup(name)
	if err != nil {
		u, err = user.LookupId(name)
	}
	switch {
	case err == nil:
		uid, _ = strconv.ParseUint(u.Uid, 10, 32)
		gid, _ = strconv.ParseUint(u.Gid, 10, 32)
		home = u.HomeDir
		if ids, err := u.GroupIds(); err == nil {
			for _, g := range ids {
				if n, err := strconv.ParseUint(g, 10, 32); err == nil {
					groups = append(groups, uint32(n))
				}
			}
		}
	default:
		n, perr := strconv.ParseUint(name, 10, 32)
		if perr != nil {
			return nil, "", fmt.Errorf("user %q: no such user in the sandbox", name)
		}
		uid = n
	}
	if hasGroup {
		g, err := user.LookupGroup(group)
		if err == nil {
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		} else if n, perr := strconv.ParseUint(group, 10, 32); perr == nil {
			gid = n
		} else {
			return nil, "", fmt.Errorf("group %q: no such group in the sandbox", group)
		}
	}
	if uint64(os.Getuid()) != uid && os.Getuid() != 0 {
		return nil, "", fmt.Errorf("user %q: %w: the agent does not run as root", spec, errors.ErrUnsupported)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, home, nil
}

// killTree kills a command's process group, then every process that still
// carries its marker (children that started a session of their own).
func killTree(pgid int, id string) {
	// The tree first: once its root is dead, an unmarked child that left
	// the process group could no longer be found through its parent.
	procfs.KillTree(pgid, sbxdwire.EnvExecID, id)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
