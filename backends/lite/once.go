package lite

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/cgwarm"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/stdinpipe"
)

// CanRunOnce reports whether RunOnce takes spec and req: not a spec with a
// command of its own, an existing sandbox or a relative working directory
// for the command, and not a rootless backend (whose runtime runs behind a
// user-namespace helper).
func (b *Backend) CanRunOnce(spec backend.Spec, req backend.ExecRequest) bool {
	return spec.Command == nil && !spec.ImageCommand && spec.Existing == "" &&
		(req.WorkDir == "" || path.IsAbs(req.WorkDir)) && b.userns == nil
}

// RunOnce runs req's command as the first process of a new sandbox made
// from spec and removes the sandbox when the command ends (see
// backend.OneShotRunner). The runtime runs in the foreground, as a bare
// `runc run` does: the command's streams are the caller's, its exit status
// is the runtime's, and the runtime deletes the container once its first
// process has ended. That process is the command itself, as under a bare
// runc run or docker run without --init: no sbxd, whose start alone (a Go
// program's runtime and package initialisation, ~4 ms on the host) would
// cost more than the rest of what lite adds. What a sandbox made by Create
// adds for later commands (the agent, its hello, the exec round trip, the
// kill at the end) is not done. A command the sandbox does not have, or
// cannot execute, is found from the host before anything runs: exit code
// 127 or 126 with sbxd exec's message on stderr.
//
// A runtime that fails to start the container is an error (runc's log
// says why; runc prints it on stderr too). Where the command's own exec
// fails (a file that is no program), and where gVisor's runsc fails at
// all, the runtime prints why on the command's stderr and exits (runc's
// init 1, runsc 128): RunOnce returns that exit code, as a bare runtime
// run would.
func (b *Backend) RunOnce(ctx context.Context, spec backend.Spec, req backend.ExecRequest) (backend.ExecResult, error) {
	runErr := func(err error) error { return &backend.OpError{Op: "run", Backend: Name, Err: err} }
	if !b.CanRunOnce(spec, req) {
		return backend.ExecResult{}, runErr(fmt.Errorf("%w: this sandbox cannot run its command as its first process (a command of its own, an existing sandbox, a relative working directory or a rootless backend); create it and exec", errors.ErrUnsupported))
	}
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, runErr(err)
	}
	spec.Command = argv
	if len(req.Env) > 0 {
		env := maps.Clone(spec.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, req.Env)
		spec.Env = env
	}
	if req.WorkDir != "" {
		spec.WorkingDir = req.WorkDir
	}
	if req.User != "" {
		spec.User = req.User
	}
	if err := ctx.Err(); err != nil {
		return backend.ExecResult{}, runErr(err)
	}
	sb, m, _, err := b.makeBundle(ctx, spec, true)
	var cs *cannotStart
	if errors.As(err, &cs) {
		// As sbxd says it of a command it cannot start.
		out := backend.NewOutputs(req)
		fmt.Fprintln(out.Stderr, cs.msg)
		res := backend.ExecResult{ExitCode: cs.code}
		out.Finish(&res)
		return res, nil
	}
	if err != nil {
		return backend.ExecResult{}, err
	}
	res, deleted, err := sb.runAttached(ctx, m, req)
	m.runtimeDeleted = deleted
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if terr := sb.teardown(cctx, m); terr != nil {
		return res, runErr(errors.Join(err, fmt.Errorf("removing sandbox %s: %w", sb.id, terr)))
	}
	if err != nil {
		return res, runErr(err)
	}
	b.log.Debug("ran a command in a sandbox of its own", "id", sb.id, "exit", res.ExitCode)
	return res, nil
}

// cleanupTimeout bounds a one-shot sandbox's removal after its command.
const cleanupTimeout = time.Minute

// recordAfter is how long a one-shot sandbox's command runs before the
// sandbox's record gets its first process (and so reads as running, and
// is killed by it when removed by another process): most such commands
// are over sooner, and theirs is a write saved.
const recordAfter = 20 * time.Millisecond

// runAttached runs the one-shot sandbox's container in the foreground with
// req's streams until its first process ends, killing everything in it
// after req.Timeout or when ctx ends (the result's ExitCode is then -1,
// the error ctx's). deleted says the runtime ended normally, having
// deleted the container (not after a failure of its own, which may leave
// some of it).
func (s *Sandbox) runAttached(ctx context.Context, m *meta, req backend.ExecRequest) (res backend.ExecResult, deleted bool, err error) {
	rt := m.runtime()
	bundle := bundleDir(s.dir, m.Gen)
	pidFile := filepath.Join(bundle, "init.pid")
	logFile := filepath.Join(s.dir, "main.log")
	args := []string{"run", "--bundle", bundle, "--pid-file", pidFile, m.ContainerID}
	var prefix []string
	if rt.gvisor() {
		flags, p, err := runscLaunch(bundle, nil)
		if err != nil {
			return res, false, err
		}
		args, prefix = append(flags, args...), p
	} else {
		// The runtime's own errors, apart from the command's stderr.
		args = append([]string{"--log", logFile, "--log-format", "json"}, args...)
	}
	// Not the caller's context: a cancel kills the container (below),
	// never the runtime alone, which would leave the container running.
	cmd := rt.commandIn(context.Background(), prefix, args...)
	out := backend.NewOutputs(req)
	cmd.Stdout, cmd.Stderr = out.Stdout, out.Stderr
	stdin, err := stdinpipe.Set(cmd, req.Stdin)
	if err != nil {
		return res, false, err
	}
	// The runtime moves the container's first process into its cgroup
	// early in its run (lite does, for runsc): that move's lock is made
	// warm beside it, until the process has started (see package cgwarm).
	stopWarm := cgwarm.Start(func() bool { return readPIDFile(pidFile) > 0 })
	defer stopWarm()
	start := time.Now()
	err = cmd.Start()
	stdin.Started(err)
	if err != nil {
		return res, false, err
	}
	stopRecord := s.recordInit(m, pidFile)
	// The cgroup holds every process of the container (gVisor's sentry
	// and gofer too) from before its first process runs.
	kill := func() {
		for _, d := range cgroupDirs(cgroupName(s.id, m.Gen)) {
			killCgroupProcs(d)
		}
	}
	var waitErr, ctxErr error
	res.TimedOut, waitErr, ctxErr = waitExec(ctx, cmd, kill, req.Timeout)
	stopRecord()
	res.Duration = time.Since(start)
	stdin.Close()
	out.Finish(&res)
	var exitErr *exec.ExitError
	ended := waitErr == nil || errors.As(waitErr, &exitErr) || errors.Is(waitErr, exec.ErrWaitDelay)
	// The runtime deleted the container unless it was killed itself.
	deleted = ended && cmd.ProcessState != nil && cmd.ProcessState.Exited()
	switch {
	case ctxErr != nil:
		res.ExitCode = -1
		return res, deleted, ctxErr
	case res.TimedOut:
		res.ExitCode = backend.TimeoutExitCode
		return res, deleted, nil
	case !ended:
		return res, false, waitErr
	}
	res.ExitCode = backendkit.ExitCode(cmd.ProcessState)
	if res.ExitCode != 0 && readPIDFile(pidFile) == 0 {
		// No process was started: the runtime failed (its message).
		msg := "its message went to the command's stderr"
		if rerr := runtimeFailure(logFile); rerr != nil {
			msg = rerr.Error()
		}
		res.ExitCode = 0
		return res, false, &runtimeError{runtime: rt.name, args: []string{"run"}, msg: msg}
	}
	return res, deleted, nil
}

// recordInit records the one-shot sandbox's first process in its record
// once the command has run for recordAfter (and its start is over), until
// the returned stop is called, which waits for it.
func (s *Sandbox) recordInit(m *meta, pidFile string) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTimer(recordAfter)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if pid := readPIDFile(pidFile); pid > 0 {
				start, _ := procfs.StartTime(pid)
				cur := *m
				if err := s.update(&cur, func(c *meta) { c.InitPID, c.InitStart, c.Creator = pid, start, "" }); err != nil {
					s.b.log.Debug("recording a one-shot sandbox's first process", "sandbox", s.id, "err", err)
				}
				return
			}
			t.Reset(recordAfter)
		}
	})
	return func() { close(quit); wg.Wait() }
}

// readPIDFile returns the PID the runtime wrote to p, or 0.
func readPIDFile(p string) int {
	data, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return pid
}

// cannotStart is a one-shot sandbox's command that cannot start: code is
// the exit code sbxd gives such a command (127 not found, 126 not
// executable), msg what it says.
type cannotStart struct {
	code int
	msg  string
}

func (e *cannotStart) Error() string { return e.msg }

// lookCommand finds the one-shot sandbox's command name in its file system
// (v, which it closes) as the runtime's exec will: a name with a slash
// against workDir, any other in env's PATH. It returns a *cannotStart when
// no executable file is there. What only the exec itself can tell (the
// user's permission, the binary's format) is left to the runtime.
func lookCommand(v *view, name, workDir string, env []string) error {
	defer v.close()
	abs := func(p string) string {
		if path.IsAbs(p) {
			return path.Clean(p)
		}
		return path.Join(workDir, p)
	}
	var candidates []string
	if strings.Contains(name, "/") {
		candidates = []string{abs(name)}
	} else {
		var dirs string
		for _, kv := range env {
			if p, ok := strings.CutPrefix(kv, "PATH="); ok {
				dirs = p
			}
		}
		for _, d := range filepath.SplitList(dirs) {
			candidates = append(candidates, abs(path.Join(d, name)))
		}
	}
	denied := false
	for _, c := range candidates {
		real, err := v.resolve(c, true)
		if err != nil {
			continue
		}
		if isHostOnly(real) {
			return nil // the runtime's mounts, not in the view
		}
		_, r, rel, err := v.route(real)
		if err != nil {
			continue
		}
		fi, err := r.Stat(rel)
		switch {
		case err != nil:
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			denied = true
		default:
			return nil
		}
	}
	switch {
	case denied:
		return &cannotStart{126, fmt.Sprintf("exec: %q: permission denied", name)}
	case strings.Contains(name, "/"):
		return &cannotStart{127, fmt.Sprintf("exec: %q: no such file or directory", name)}
	}
	return &cannotStart{127, fmt.Sprintf("exec: %q: executable file not found in $PATH", name)}
}
