package lite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/agentsock"
	"github.com/sandboxkit/sandboxkit/internal/cgwarm"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
	"github.com/sandboxkit/sandboxkit/internal/stdinpipe"
)

// Sandbox is one lite sandbox. It is safe for concurrent use.
type Sandbox struct {
	// Its own terminals end with their client (see Terminal).
	backend.TerminalsEndWithClient

	b   *Backend
	id  string
	dir string

	tmplOnce sync.Once
	tmpl     *specs.Process
	tmplErr  error
}

var (
	_ backend.Sandbox    = (*Sandbox)(nil)
	_ backend.FileSystem = (*Sandbox)(nil)
	_ backend.Attacher   = (*Sandbox)(nil)
	_ backend.Endpointer = (*Sandbox)(nil)
	_ backend.Pauser     = (*Sandbox)(nil)
	_ backend.Renewer    = (*Sandbox)(nil)
)

func (s *Sandbox) ID() string { return s.id }

// Dir is the sandbox's folder on the host.
func (s *Sandbox) Dir() string { return s.dir }

// RootFS is the host path of the sandbox's merged root file system.
func (s *Sandbox) RootFS() string {
	gen := 0
	if m, err := s.meta(); err == nil {
		gen = m.Gen
	}
	return rootfsDir(s.dir, gen)
}

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

// lock serialises Reset, its background work and Destroy of this sandbox,
// in this process and across processes (an flock on the sandbox's
// lockFile): a Destroy in one process never works from a record that a
// Reset in another is changing the generations of. It is not the record's
// lock (statedir.Update), which the holder still takes for each write, so
// claims and label changes do not wait for a Reset.
func (s *Sandbox) lock() func() {
	// A standby container being made at low CPU weight holds the lock:
	// it is waited for now.
	s.b.hurry(s.id)
	l, _ := s.b.sbxLocks.LoadOrStore(s.id, &sync.Mutex{})
	mu := l.(*sync.Mutex)
	mu.Lock()
	f, err := os.Open(filepath.Join(s.dir, lockFile))
	if err != nil {
		return mu.Unlock // removed, or made before there was a lock file
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		s.b.log.Warn("locking a sandbox", "sandbox", s.id, "err", err)
	}
	return func() { f.Close(); mu.Unlock() }
}

// start runs the container of the prepared bundle of generation m.Gen and
// records its first process.
func (s *Sandbox) start(ctx context.Context, m *meta) error {
	prefix, err := s.b.launchPrefix(m, s.dir, m.Gen)
	if err != nil {
		return err
	}
	pid, err := m.runtime().launch(ctx, prefix, "run", m.ContainerID, bundleDir(s.dir, m.Gen), filepath.Join(s.dir, "main.log"))
	if err != nil {
		return err
	}
	start, _ := procfs.StartTime(pid)
	return s.update(m, func(cur *meta) {
		cur.InitPID, cur.InitStart, cur.Paused = pid, start, false
	})
}

// update applies f to the sandbox's record under its lock (see
// Backend.update) and leaves m as the record now is.
func (s *Sandbox) update(m *meta, f func(*meta)) error { return s.b.update(m, f) }

// stop removes the running container and its cgroup and unmounts its root
// file system.
func (s *Sandbox) stop(ctx context.Context, m *meta) error {
	if m.runtime().gvisor() && !m.Rootless {
		// gVisor's gofer and sentry end together (removeGen would find
		// the gofer only once the sentry has gone).
		for _, d := range cgroupDirs(cgroupName(s.id, m.Gen)) {
			killCgroupProcs(d)
		}
	}
	killInit(m.InitPID, m.InitStart)
	return s.removeGen(ctx, m, m.Gen)
}

// removeGen removes the container of generation gen, its cgroup and its
// root file system's mount. Its folders are left.
func (s *Sandbox) removeGen(ctx context.Context, m *meta, gen int) error {
	rt := m.runtime()
	if m.runtimeDeleted && gen == m.Gen {
		// Only what is lite's own is left, and what a runtime may leave
		// on its way out: a cgroup, runsc's state files.
		if err := removeCgroups(cgroupName(s.id, gen)); err != nil {
			return err
		}
		if rt.gvisor() && rt.root != "" {
			if _, err := rt.forgetFiles(containerID(rt, s.id, gen)); err != nil {
				return err
			}
		}
		return unmount(rootfsDir(s.dir, gen))
	}
	if m.Rootless { // no cgroup; mounted only in the sandbox's namespaces
		return rt.remove(ctx, containerID(rt, s.id, gen))
	}
	if rt.gvisor() && rt.root != "" {
		// runsc delete --force takes over a second here even when every
		// process of the container is gone. The cgroup holds them all
		// (gVisor's sandbox and gofer): once it is emptied and removed,
		// the state files are all runsc has left of the container.
		if err := removeCgroups(cgroupName(s.id, gen)); err != nil {
			return err
		}
		if err := rt.forget(ctx, containerID(rt, s.id, gen)); err != nil {
			return err
		}
		return unmount(rootfsDir(s.dir, gen))
	}
	if err := rt.removeEnded(ctx, containerID(rt, s.id, gen)); err != nil {
		return err
	}
	if err := removeCgroups(cgroupName(s.id, gen)); err != nil {
		return err
	}
	return unmount(rootfsDir(s.dir, gen))
}

// dropGen removes generation gen (a standby's first process too) and its
// bundle, writable layer and work folders.
func (s *Sandbox) dropGen(ctx context.Context, m *meta, gen int) error {
	if sb := m.Standby; sb != nil && sb.Gen == gen {
		killInit(sb.InitPID, sb.InitStart)
	}
	if err := s.removeGen(ctx, m, gen); err != nil {
		return err
	}
	for _, d := range []string{bundleDir(s.dir, gen), upperDir(s.dir, gen), workDir(s.dir, gen)} {
		if err := removeTree(d); err != nil {
			return err
		}
	}
	return nil
}

// killInit kills a container's first process from the host, which ends
// every process in its PID namespace, and waits until they are all gone.
// runc's own delete --force waits 100 ms before it first looks; this takes
// about a millisecond.
func killInit(pid int, start uint64) {
	if pid == 0 || nsEnded(pid, start) {
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		if nsEnded(pid, start) {
			return
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// nsEnded reports whether the first process pid (started at start) of a
// PID namespace has ended, and with it every other process there. The
// kernel ends those when the first process's last thread exits, and waits
// until they are gone. A multi-threaded first process (sbxd init is a Go
// program) shows as a zombie as soon as its main thread has exited, while
// its other threads, and so the namespace's end, may take milliseconds
// more: meanwhile the namespace's processes still run, and one could
// write to a folder the next generation shares. So a zombie counts once
// its threads are gone.
func nsEnded(pid int, start uint64) bool {
	if procfs.Alive(pid, start) {
		return false
	}
	if got, err := procfs.StartTime(pid); err != nil || (start != 0 && got != start) {
		return true // reaped (or the PID is another process's now)
	}
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	return err != nil || len(tasks) <= 1
}

// teardown removes everything the sandbox made. The meta file goes last
// but one, so a failure leaves a sandbox Destroy can be retried on.
func (s *Sandbox) teardown(ctx context.Context, m *meta) error {
	// The record says removing first and goes last (statedir.Lifecycle).
	if err := statedir.MarkRemoving(s.dir); err != nil {
		return err
	}
	if err := s.stop(ctx, m); err != nil {
		return err
	}
	others := slices.Clone(m.Retired)
	if m.Standby != nil {
		others = append(others, m.Standby.Gen)
	}
	for _, gen := range others {
		if err := s.dropGen(ctx, m, gen); err != nil {
			return err
		}
	}
	// A container made ahead for a fork goes with its parent.
	if m.ForkStandby != "" {
		sb := &Sandbox{b: s.b, id: m.ForkStandby, dir: filepath.Join(s.b.dir, m.ForkStandby)}
		if err := sb.Destroy(ctx); err != nil {
			return fmt.Errorf("removing the container made for the next fork: %w", err)
		}
	}
	// The enforcer and its network go once no process of the sandbox
	// is left to use them.
	if m.Egress != nil {
		if err := s.b.teardownEgress(s.id, m.EgressNet); err != nil {
			return err
		}
	}
	// Only once nothing is mounted: removing through a mounted overlay
	// would be slow, and through a bind mount would reach the host.
	if left, err := mountsUnder(s.dir); err != nil || len(left) > 0 {
		return fmt.Errorf("mounts remain under %s: %v %v", s.dir, left, err)
	}
	return statedir.RemoveDir(s.dir, removeTree)
}

// Destroy removes the container, unmounts and deletes the sandbox's folder.
// It works from the meta file alone, so it also cleans up after a creator
// that crashed half-way.
func (s *Sandbox) Destroy(ctx context.Context) error {
	defer s.lock()()
	m, err := s.meta()
	switch {
	case errors.Is(err, backend.ErrNotFound):
		if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		// The folder without its meta file: an earlier Destroy stopped
		// half-way. Finish it with the default runtime.
		m = &meta{ContainerID: containerID(s.b.runtime, s.id, 0), Runtime: s.b.runtime.path, RuntimeRoot: s.b.runtime.root}
	case err != nil:
		return s.opErr("destroy", err)
	}
	if err := s.teardown(ctx, m); err != nil {
		return s.opErr("destroy", err)
	}
	s.b.log.Debug("destroyed sandbox", "id", s.id)
	return nil
}

// Reset brings the sandbox back to its image: every process in it ends
// (all are gone when Reset returns), the overlay's upper layer and what
// the agent's folder holds are thrown away, and the container starts
// again from the same config, in new namespaces and a new cgroup, with
// the same ID and labels. Files written since Create (or the last Reset)
// are gone; bind volumes are untouched. Commands running during a Reset
// fail; the agent listens again on its socket (DialAgent waits for it).
// Backend.CleanReset says for which Specs nothing of what ran before is
// left.
//
// The first Reset stops the container, mounts a fresh layer and runs the
// container again (as long as a Create). It then leaves a standby: a
// container of the next generation on a fresh layer, made with the
// runtime's create but not started, prepared in the background at the
// lowest CPU weight (see lowShares). Later
// Resets kill the running container and start the standby, which takes a
// runtime start instead of a whole run, and the old generation is removed
// and a new standby made in the background. A sandbox that has been reset
// thus holds a second overlay mount and a waiting runtime process;
// Destroy removes them too, also after a crash. Backend.Close waits for
// background work.
func (s *Sandbox) Reset(ctx context.Context) error {
	defer s.lock()()
	m, err := s.meta()
	if err != nil {
		return s.opErr("reset", err)
	}
	if !m.Paused && m.Standby.ready() {
		err := s.switchToStandby(ctx, m)
		if err == nil {
			s.afterReset()
			return nil
		}
		s.b.log.Debug("starting the standby container failed; resetting in place", "sandbox", s.id, "err", err)
	}
	if err := s.resetInPlace(ctx, m); err != nil {
		return s.opErr("reset", err)
	}
	s.afterReset()
	return nil
}

// afterReset prepares the next standby in the background; Settle waits
// for it.
func (s *Sandbox) afterReset() {
	done := make(chan struct{})
	s.b.settling.Store(s.id, done)
	s.b.background(func() {
		defer func() {
			s.b.settling.CompareAndDelete(s.id, done)
			close(done)
		}()
		s.prepareStandby()
	})
}

var _ backend.Settler = (*Sandbox)(nil)

// Settle waits until the background work of the sandbox's last Reset in
// this process is done: the old generation removed and the standby for
// the next Reset made (backend.Settler). A warm pool settles a used
// sandbox before it is ready again, so that this work, a runtime's create
// and a mount, does not run beside the next task's first command (on 2
// cores it made that command's p50 2-3x and its p90 6x).
func (s *Sandbox) Settle(ctx context.Context) error {
	v, ok := s.b.settling.Load(s.id)
	if !ok {
		return nil
	}
	select {
	case <-v.(chan struct{}):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// switchToStandby ends the running container and starts the standby in
// its place; the old generation is retired.
func (s *Sandbox) switchToStandby(ctx context.Context, m *meta) error {
	sb := m.Standby
	killInit(m.InitPID, m.InitStart)
	if err := s.emptyAgentDir(m); err != nil {
		return err
	}
	id := containerID(m.runtime(), s.id, sb.Gen)
	if err := normalPriority(bundleDir(s.dir, sb.Gen), cgroupName(s.id, sb.Gen)); err != nil {
		return err
	}
	if err := m.runtime().startCreated(ctx, id, bundleDir(s.dir, sb.Gen)); err != nil {
		return err
	}
	old := m.Gen
	return s.update(m, func(cur *meta) {
		cur.Gen, cur.ContainerID, cur.InitPID, cur.InitStart, cur.Paused = sb.Gen, id, sb.InitPID, sb.InitStart, false
		cur.Standby = nil
		cur.Retired = append(cur.Retired, old)
	})
}

// resetInPlace stops the container, swaps its writable layer for an empty
// one and runs it again. A standby is dropped first.
func (s *Sandbox) resetInPlace(ctx context.Context, m *meta) error {
	if sb := m.Standby; sb != nil {
		if err := s.dropGen(ctx, m, sb.Gen); err != nil {
			return err
		}
		if err := s.update(m, func(cur *meta) { cur.Standby = nil }); err != nil {
			return err
		}
	}
	if err := s.stop(ctx, m); err != nil {
		return err
	}
	if err := s.emptyAgentDir(m); err != nil {
		return err
	}
	// Rename, then delete: the sandbox is usable again before a large
	// upper layer is gone.
	trash := filepath.Join(s.dir, fmt.Sprintf("trash-%d", time.Now().UnixNano()))
	if err := os.Mkdir(trash, 0o700); err != nil {
		return err
	}
	for _, d := range []string{upperDir(s.dir, m.Gen), workDir(s.dir, m.Gen)} {
		if err := os.Rename(d, filepath.Join(trash, filepath.Base(d))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	s.b.background(func() { removeTree(trash) })
	if err := s.b.makeRootfs(m, s.dir, m.Gen); err != nil {
		return err
	}
	if !m.Rootless {
		v := newView(m, s.dir)
		err := v.mkdirAll(m.WorkDir)
		v.close()
		if err != nil {
			return err
		}
	}
	return s.start(ctx, m)
}

// emptyAgentDir removes what the sandbox's processes left in the agent's
// folder (agentDir inside): it is a bind mount of a host folder that every
// generation shares, writable from inside, so the one part of the sandbox
// that a Reset would otherwise hand on. The folder itself stays, as the
// standby's bind mount holds it. Every process of the old generation has
// ended (killInit), so nothing writes there meanwhile.
func (s *Sandbox) emptyAgentDir(m *meta) error {
	if !m.Agent {
		return nil
	}
	dir := agentHostDir(s.dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("emptying the agent's folder: %w", err)
	}
	for _, e := range entries {
		if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("emptying the agent's folder: %w", err)
		}
	}
	return nil
}

// prepareStandby removes retired generations and makes a standby
// container of the next generation, unless the sandbox is gone, stopped or
// has one. It runs in the background after a Reset.
func (s *Sandbox) prepareStandby() {
	defer s.lock()()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := s.meta()
	if err != nil {
		return // destroyed meanwhile
	}
	for _, gen := range m.Retired {
		if err := s.dropGen(ctx, m, gen); err != nil {
			s.b.log.Warn("removing an old generation of a reset sandbox", "sandbox", s.id, "generation", gen, "err", err)
			return
		}
	}
	if err := s.update(m, func(cur *meta) { cur.Retired = nil }); err != nil {
		return
	}
	if m.Standby != nil || m.InitPID == 0 || !procfs.Alive(m.InitPID, m.InitStart) {
		return
	}
	if err := s.makeStandby(ctx, m); err != nil {
		s.b.log.Warn("preparing a standby container for the next reset", "sandbox", s.id, "err", err)
	}
}

// makeStandby makes generation m.Gen+1's container with the runtime's
// create: the running generation's config with its own root file system
// and cgroup. The meta file names it before anything exists, so that
// Destroy finds whatever a crash leaves.
func (s *Sandbox) makeStandby(ctx context.Context, m *meta) error {
	gen := m.Gen + 1
	if err := s.update(m, func(cur *meta) { cur.Standby = &standby{Gen: gen} }); err != nil {
		return err
	}
	cfg, err := readConfig(bundleDir(s.dir, m.Gen))
	if err != nil {
		return err
	}
	if err := s.b.makeRootfs(m, s.dir, gen); err != nil {
		return err
	}
	if !m.Rootless { // rootless: the runtime makes it (see makeWorkDir)
		v := newViewGen(m, s.dir, gen)
		err = v.mkdirAll(m.WorkDir)
		v.close()
		if err != nil {
			return err
		}
		cfg.Linux.CgroupsPath = "/" + cgroupParent + "/" + cgroupName(s.id, gen)
	}
	lowPriority(cfg, m.runtime()) // made ahead
	if err := writeConfig(bundleDir(s.dir, gen), cfg); err != nil {
		return err
	}
	prefix, err := s.b.launchPrefix(m, s.dir, gen)
	if err != nil {
		return err
	}
	done := s.b.startLow(m, cgroupName(s.id, gen))
	pid, err := m.runtime().launch(ctx, prefix, "create", containerID(m.runtime(), s.id, gen), bundleDir(s.dir, gen), filepath.Join(s.dir, "main.log"))
	done()
	if err != nil {
		return err
	}
	start, _ := procfs.StartTime(pid)
	return s.update(m, func(cur *meta) { cur.Standby = &standby{Gen: gen, InitPID: pid, InitStart: start} })
}

// template returns the process of the sandbox's OCI config (the same in
// every generation).
func (s *Sandbox) template(m *meta) (*specs.Process, error) {
	s.tmplOnce.Do(func() { s.tmpl, s.tmplErr = processTemplate(bundleDir(s.dir, m.Gen)) })
	return s.tmpl, s.tmplErr
}

// execProcess is the OCI process of one command: argv under sbxd exec with
// the marker execID, in the sandbox's environment plus env, as the
// sandbox's user or user.
func (s *Sandbox) execProcess(m *meta, argv []string, env map[string]string, workdir, user, execID string, timeout time.Duration) (*specs.Process, error) {
	tmpl, err := s.template(m)
	if err != nil {
		return nil, err
	}
	p := *tmpl
	p.Terminal = false
	p.Args = []string{sbxdPath, "exec", "--id", execID}
	if timeout > 0 {
		p.Args = append(p.Args, "--timeout", timeout.String())
	}
	p.Args = append(append(p.Args, "--"), argv...)
	envs := envMap(tmpl.Env)
	maps.Copy(envs, env)
	envs[envExecID] = execID
	p.Env = make([]string, 0, len(envs))
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		p.Env = append(p.Env, k+"="+envs[k])
	}
	switch {
	case workdir == "":
		p.Cwd = m.WorkDir
	case path.IsAbs(workdir):
		p.Cwd = path.Clean(workdir)
	default:
		p.Cwd = path.Join(m.WorkDir, workdir)
	}
	if user != "" {
		v := newView(m, s.dir)
		u, _, err := lookupUser(v, user)
		v.close()
		if err != nil {
			return nil, err
		}
		if m.Rootless && (u.UID != 0 || u.GID != 0) {
			return nil, fmt.Errorf("%w: a rootless sandbox runs commands as root only (user %q is uid %d)", errUnsupported, user, u.UID)
		}
		p.User = u
	}
	return &p, nil
}

// runtimeExec prepares `runtime exec [extra...]` of process p: the process
// file and a log file for the runtime's own errors, removed by cleanup.
func (s *Sandbox) runtimeExec(m *meta, p *specs.Process, execID string, extra ...string) (*exec.Cmd, string, func(), error) {
	dir := filepath.Join(s.dir, "exec")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", nil, err
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, "", nil, err
	}
	pfile := filepath.Join(dir, execID+".json")
	logFile := filepath.Join(dir, execID+".log")
	cleanup := func() { os.Remove(pfile); os.Remove(logFile) }
	if err := os.WriteFile(pfile, data, 0o600); err != nil {
		cleanup()
		return nil, "", nil, err
	}
	var prefix []string
	if m.Rootless {
		if s.b.userns == nil {
			cleanup()
			return nil, "", nil, fmt.Errorf("%w: the sandbox is rootless and this process is root", backend.ErrUnavailable)
		}
		prefix = s.b.userns.execPrefix(m.InitPID)
	}
	args := append([]string{"--log", logFile, "--log-format", "json", "exec"}, extra...)
	cmd := m.runtime().commandIn(context.Background(), prefix, append(args, "--process", pfile, m.ContainerID)...)
	// Output of background children that outlive the command is passed on
	// by sbxd for its grace period; then stop waiting for the pipes.
	cmd.WaitDelay = 2 * time.Second
	return cmd, logFile, cleanup, nil
}

// runtimeFailure returns the runtime's own error from its JSON log, or nil
// when it logged none (the exit status is then the command's).
func runtimeFailure(logFile string) error {
	f, err := os.Open(logFile)
	if err != nil {
		return nil
	}
	defer f.Close()
	var msgs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") {
			msgs = append(msgs, entry.Msg)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// warmExec makes the cgroup lock warm (see package cgwarm) for a runtime
// exec into m's container that is about to start: runc moves the command
// into the container's cgroup as it starts it. runsc starts it in its
// sentry and moves nothing. The warming ends by itself after execWarm, or
// at stop.
func warmExec(m *meta) (stop func()) {
	if m.runtime().gvisor() {
		return func() {}
	}
	return cgwarm.Start(cgwarm.For(execWarm))
}

// execWarm is how long a runtime exec keeps the cgroup lock warm: runc
// has moved the command by then, unless the host is far busier than a
// start's tens of milliseconds.
const execWarm = 500 * time.Millisecond

func newExecID(sandboxID string) (string, error) {
	id, err := statedir.NewID()
	if err != nil {
		return "", err
	}
	return "lite-" + sandboxID + "-" + id, nil
}

// Exec runs req through `runtime exec` and sbxd exec, which owns the
// timeout and kills the command's process tree inside the sandbox.
// Cancelling ctx kills every process carrying the command's marker (see
// killMarked).
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	m, err := s.meta()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	if err := ctx.Err(); err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	execID, err := newExecID(s.id)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	p, err := s.execProcess(m, argv, req.Env, req.WorkDir, req.User, execID, req.Timeout)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	cmd, logFile, cleanup, err := s.runtimeExec(m, p, execID)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	defer cleanup()
	out := backend.NewOutputs(req)
	cmd.Stdout, cmd.Stderr = out.Stdout, out.Stderr
	// Stdin goes through a pipe we feed ourselves, so Exec returns when
	// the command exits even if it never read its stdin (see package
	// stdinpipe).
	stdin, err := stdinpipe.Set(cmd, req.Stdin)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	defer warmExec(m)()
	start := time.Now()
	err = cmd.Start()
	stdin.Started(err)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	var res backend.ExecResult
	var waitErr, ctxErr error
	// sbxd ends the command at its timeout; this later deadline only
	// guards against a wrapper that cannot (a frozen sandbox).
	var backstop time.Duration
	if req.Timeout > 0 {
		backstop = req.Timeout + 30*time.Second
	}
	res.TimedOut, waitErr, ctxErr = waitExec(ctx, cmd, func() { s.killMarked(m, execID) }, backstop)
	res.Duration = time.Since(start)
	stdin.Close()
	out.Finish(&res)
	if ctxErr != nil {
		res.ExitCode = -1
		return res, s.opErr("exec", ctxErr)
	}
	if res.TimedOut {
		res.ExitCode = backend.TimeoutExitCode
		return res, nil
	}
	if rerr := runtimeFailure(logFile); rerr != nil {
		return res, s.opErr("exec", s.execFailure(rerr))
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, s.opErr("exec", waitErr)
	}
	res.ExitCode = backendkit.ExitCode(cmd.ProcessState)
	// sbxd exits 124 only when its timer fired (or the command itself
	// exits 124 at or after the deadline, which is indistinguishable).
	res.TimedOut = req.Timeout > 0 && res.ExitCode == backend.TimeoutExitCode && res.Duration >= req.Timeout
	return res, nil
}

// waitExec waits for the started runtime command cmd to end, killing what
// it runs (see killExec) when ctx ends or after deadline (0: none). It
// returns whether the deadline passed, Wait's error and ctx's.
func waitExec(ctx context.Context, cmd *exec.Cmd, kill func(), deadline time.Duration) (timedOut bool, waitErr, ctxErr error) {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timer <-chan time.Time
	if deadline > 0 {
		t := time.NewTimer(deadline)
		defer t.Stop()
		timer = t.C
	}
	select {
	case waitErr = <-done:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		waitErr = killExec(cmd, kill, done)
	case <-timer:
		timedOut = true
		waitErr = killExec(cmd, kill, done)
	}
	return timedOut, waitErr, ctxErr
}

// killMarked kills every process of the sandbox that carries the marker
// execID, with their descendants. runc's containers are processes of the
// host, so its /proc finds them. gVisor's live in its sentry, which the
// host's /proc does not show: there sbxd kill does the same inside,
// started through the runtime's exec as root (the marked processes may
// be any user's). It is that exec's own work, detached from the caller's
// context, which is usually what was cancelled.
func (s *Sandbox) killMarked(m *meta, execID string) {
	rt := m.runtime()
	if !rt.gvisor() {
		procfs.KillByEnv(envExecID, execID)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rt.run(ctx, "exec", "--user", "0:0", m.ContainerID, sbxdPath, "kill", execID); err != nil {
		s.b.log.Debug("killing a command through the runtime", "sandbox", s.id, "exec", execID, "err", err)
	}
}

// execFailure explains a runtime's refusal to exec: the sandbox is gone or
// stopped, or the request was wrong (a working directory that does not
// exist, say).
func (s *Sandbox) execFailure(err error) error {
	m, merr := s.meta()
	if merr != nil {
		return fmt.Errorf("%w: %v", merr, err)
	}
	if m.InitPID == 0 || !procfs.Alive(m.InitPID, m.InitStart) {
		return fmt.Errorf("%w: the sandbox is not running (%v)", backend.ErrUnavailable, err)
	}
	return err
}

// killExec kills a command's processes by their marker (kill) until the
// runtime's exec returns (a process that was still being started when the
// kill came gets the next one), then the runtime itself if it lingers.
func killExec(cmd *exec.Cmd, kill func(), done <-chan error) error {
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		kill()
		select {
		case err := <-done:
			return err
		case <-deadline:
			cmd.Process.Kill()
			return <-done
		case <-tick.C:
		}
	}
}

// Endpoint returns 127.0.0.1:port for a sandbox on the host's network; a
// sandbox with its own network namespace publishes no ports.
func (s *Sandbox) Endpoint(ctx context.Context, port int) (string, error) {
	if port <= 0 || port > 65535 {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	m, err := s.meta()
	if err != nil {
		return "", s.opErr("endpoint", err)
	}
	if m.Network != NetworkHost {
		return "", s.opErr("endpoint", fmt.Errorf("%w: sandbox network %q publishes no ports (use network = \"host\")", errUnsupported, m.Network))
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

// Pause freezes the sandbox's processes with their memory (cgroup
// freezer).
func (s *Sandbox) Pause(ctx context.Context) error { return s.setPaused(ctx, true) }

func (s *Sandbox) Resume(ctx context.Context) error { return s.setPaused(ctx, false) }

func (s *Sandbox) setPaused(ctx context.Context, paused bool) error {
	op, verb := "resume", "resume"
	if paused {
		op, verb = "pause", "pause"
	}
	// Under the record's lock, so that the record says what the runtime
	// did even when another process pauses or resumes at the same time.
	err := statedir.Update(s.b.dir, s.id, func(m *meta) error {
		if m.Rootless {
			// No cgroup to freeze: stop (or continue) every process of
			// the sandbox's PID namespace instead.
			sig := syscall.SIGCONT
			if paused {
				sig = syscall.SIGSTOP
			}
			if err := signalPIDNamespace(m.InitPID, sig); err != nil {
				return err
			}
		} else if _, err := m.runtime().run(ctx, verb, m.ContainerID); err != nil {
			return err
		}
		m.Paused = paused
		return nil
	})
	return s.opErr(op, err)
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

var _ backend.AgentDialer = (*Sandbox)(nil)

// DialAgent connects to the sbxd agent that the sandbox's init started, on
// a Unix socket in the sandbox's state directory: no runtime exec is
// needed, so the first command after Create costs a connection, not a
// process start. It waits within ctx (at most 5 s) for an agent that is
// still starting. Sandboxes whose user is not root have no such agent
// (errors.ErrUnsupported); sbxd then starts one through Attach. A link
// put where the socket belongs is refused (agentsock.DialNoFollow).
func (s *Sandbox) DialAgent(ctx context.Context) (net.Conn, error) {
	m, err := s.meta()
	if err != nil {
		return nil, s.opErr("dial agent", err)
	}
	if !m.Agent {
		return nil, s.opErr("dial agent", fmt.Errorf("%w: this sandbox has no agent of its own", errors.ErrUnsupported))
	}
	p := filepath.Join(agentHostDir(s.dir), agentSocket)
	conn, err := agentsock.Wait(ctx, 5*time.Second, func(ctx context.Context) (net.Conn, error) { return agentsock.DialNoFollow(ctx, p) }, nil)
	if err != nil {
		return nil, s.opErr("dial agent", fmt.Errorf("%s: %w", p, err))
	}
	return conn, nil
}
