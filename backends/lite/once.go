package lite

import (
	"context"
	"encoding/json"
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

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/cgwarm"
	"github.com/sandboxkit/sandboxkit/internal/childpipe"
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
	o := &oneShot{req: req}
	sb, m, _, err := b.makeBundle(ctx, spec, o)
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
	var (
		res     backend.ExecResult
		deleted bool
	)
	a := o.a
	if a == nil {
		a, err = sb.startAttached(m, req, false)
	}
	if err == nil {
		res, deleted, err = a.wait(ctx, req)
	}
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

// oneShot is RunOnce's part in makeBundle. With runc, the runtime starts
// as soon as the sandbox's record exists, and reads its config from a pipe
// that gets it once the bundle is made (see startAttached): runc's own
// start (a Go program's runtime and flags, 4-5 ms here) runs beside the
// bundle's making (its overlay, files and record, 5-6 ms) where it came
// after it. Other runtimes start once the bundle is made: runsc reads its
// bundle before it starts (runscLaunch), and others may read their config
// in ways a pipe does not serve.
type oneShot struct {
	req backend.ExecRequest
	a   *attached // the runtime started early, or nil
}

// start starts the runtime of the one-shot sandbox sb, whose record m
// exists, if it can start before its bundle is made.
func (o *oneShot) start(sb *Sandbox, m *meta) error {
	if o == nil || m.runtime().name != "runc" || m.Rootless {
		return nil
	}
	a, err := sb.startAttached(m, o.req, true)
	if err != nil {
		return err
	}
	o.a = a
	return nil
}

// feed gives the runtime started early its config, once the bundle holds
// everything spec names.
func (o *oneShot) feed(spec *specs.Spec) error {
	if o == nil || o.a == nil {
		return nil
	}
	return o.a.feed(spec)
}

// abort ends the runtime started early, before the bundle is removed.
func (o *oneShot) abort() {
	if o != nil && o.a != nil {
		o.a.abort()
		o.a = nil
	}
}

// attached is a one-shot sandbox's runtime running in the foreground with
// the command's streams, until the container's first process ends.
type attached struct {
	s                *Sandbox
	m                *meta
	cmd              *exec.Cmd
	out              *backend.Outputs
	stdin            *stdinpipe.Pipe
	pidFile, logFile string
	stopWarm         func()
	start            time.Time
	// config is the write end of the pipe the runtime reads its config
	// from, until feed has written it; nil when the runtime reads the
	// bundle's own config.json.
	config *os.File
}

// startAttached starts the one-shot sandbox's runtime (`runc run`, as a
// bare runc run does: the command's streams are the caller's, its exit
// status is the runtime's, and the runtime deletes the container once its
// first process has ended). With early, the bundle is not made yet: the
// runtime is given a bundle folder of its own, start/, whose config.json
// is a link to its file descriptor 3, the read end of a pipe that feed
// writes the config into. Reading an anonymous pipe through /proc never
// waits for a writer, and the runtime holds the read end from its start:
// if this process dies before feeding it, the runtime reads an empty
// config and ends, having made nothing; once fed, it has what it needs.
func (s *Sandbox) startAttached(m *meta, req backend.ExecRequest, early bool) (*attached, error) {
	rt := m.runtime()
	bundle := bundleDir(s.dir, m.Gen)
	a := &attached{s: s, m: m, pidFile: filepath.Join(bundle, "init.pid"), logFile: filepath.Join(s.dir, "main.log")}
	runBundle := bundle
	var configR *os.File
	if early {
		runBundle = filepath.Join(bundle, "start")
		if err := os.MkdirAll(runBundle, 0o700); err != nil {
			return nil, err
		}
		if err := os.Symlink("/proc/self/fd/3", filepath.Join(runBundle, "config.json")); err != nil {
			return nil, err
		}
		var err error
		if a.config, configR, err = childpipe.ForInput(); err != nil {
			return nil, err
		}
		// The runtime has its own copy once started.
		defer configR.Close()
	}
	args := []string{"run", "--bundle", runBundle, "--pid-file", a.pidFile, m.ContainerID}
	var prefix []string
	if rt.gvisor() {
		flags, p, err := runscLaunch(bundle, nil)
		if err != nil {
			return nil, err
		}
		args, prefix = append(flags, args...), p
	} else {
		// The runtime's own errors, apart from the command's stderr.
		args = append([]string{"--log", a.logFile, "--log-format", "json"}, args...)
	}
	// Not the caller's context: a cancel kills the container (wait),
	// never the runtime alone, which would leave the container running.
	cmd := rt.commandIn(context.Background(), prefix, args...)
	if configR != nil {
		cmd.ExtraFiles = []*os.File{configR}
	}
	a.out = backend.NewOutputs(req)
	cmd.Stdout, cmd.Stderr = a.out.Stdout, a.out.Stderr
	stdin, err := stdinpipe.Set(cmd, req.Stdin)
	if err != nil {
		a.closeConfig()
		return nil, err
	}
	a.stdin = stdin
	// The runtime moves the container's first process into its cgroup
	// early in its run (lite does, for runsc): that move's lock is made
	// warm beside it, until the process has started (see package cgwarm).
	a.stopWarm = cgwarm.Start(func() bool { return readPIDFile(a.pidFile) > 0 })
	a.start = time.Now()
	err = cmd.Start()
	stdin.Started(err)
	if err != nil {
		a.stopWarm()
		a.closeConfig()
		return nil, err
	}
	a.cmd = cmd
	return a, nil
}

// closeConfig closes this process's end of the config pipe.
func (a *attached) closeConfig() {
	if a.config != nil {
		a.config.Close()
		a.config = nil
	}
}

// feed writes spec into the config pipe of a runtime started early, with
// the root file system's path made absolute (the runtime's bundle folder
// is start/, not the bundle), and closes it.
func (a *attached) feed(spec *specs.Spec) error {
	if a.config == nil {
		return nil
	}
	sp := *spec
	if sp.Root != nil && !filepath.IsAbs(sp.Root.Path) {
		root := *sp.Root
		root.Path = filepath.Join(bundleDir(a.s.dir, a.m.Gen), root.Path)
		sp.Root = &root
	}
	data, err := json.Marshal(&sp)
	if err != nil {
		return err
	}
	a.start = time.Now()
	_, err = a.config.Write(data)
	a.closeConfig()
	if err != nil {
		return fmt.Errorf("giving %s its config: %w", a.m.runtime().name, err)
	}
	return nil
}

// abort ends a runtime started early that has not been fed its config:
// it has made nothing yet (its config is what tells it what to make), so
// a kill is all it takes.
func (a *attached) abort() {
	a.cmd.Process.Kill()
	a.cmd.Wait()
	a.stopWarm()
	a.stdin.Close()
	a.closeConfig()
}

// wait waits for the one-shot sandbox's first process to end, killing
// everything in it after req.Timeout or when ctx ends (the result's
// ExitCode is then -1, the error ctx's). deleted says the runtime ended
// normally, having deleted the container (not after a failure of its own,
// which may leave some of it).
func (a *attached) wait(ctx context.Context, req backend.ExecRequest) (res backend.ExecResult, deleted bool, err error) {
	defer a.stopWarm()
	s, m, cmd := a.s, a.m, a.cmd
	stopRecord := s.recordInit(m, a.pidFile)
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
	res.Duration = time.Since(a.start)
	a.stdin.Close()
	a.out.Finish(&res)
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
	if res.ExitCode != 0 && readPIDFile(a.pidFile) == 0 {
		// No process was started: the runtime failed (its message).
		msg := "its message went to the command's stderr"
		if rerr := runtimeFailure(a.logFile); rerr != nil {
			msg = rerr.Error()
		}
		res.ExitCode = 0
		return res, false, &runtimeError{runtime: m.runtime().name, args: []string{"run"}, msg: msg}
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
