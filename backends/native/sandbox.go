package native

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Sandbox is one container. It is safe for concurrent use.
type Sandbox struct {
	// Its own terminals end with their client (see Terminal).
	backend.TerminalsEndWithClient

	b       *Backend
	id      string
	cid     string // the engine's container ID
	workDir string

	// adopted: a container sandboxkit did not make (Spec.Existing);
	// Destroy leaves it running. name is its Spec.Name.
	adopted bool
	name    string
	// plain: the container has no working sbxd, so commands run as
	// plain execs (see existing.go).
	plain bool
	// pool: a pool member, which may have a claim record (claim.go).
	pool bool
	// autoRemove: the engine removes the container once it stops
	// (Spec.AutoRemove; see Discard). bareInit: its first process is sbxd
	// init keeping it alive, with no command of the entry's.
	autoRemove, bareInit bool
	// runtime is the engine runtime it runs with ("" for the default).
	runtime string
	// agentUp: its agent answered a dial, so its init runs and ends on
	// SIGTERM (see Discard).
	agentUp atomic.Bool
	// egress: the container name of its egress enforcer, which owns its
	// network ("": none; egress.go).
	egress string

	// The host path of the sandbox's agent socket (agent.go), once
	// known; "" when it has none.
	agentMu    sync.Mutex
	agentKnown bool
	agentHost  string

	// destroyed is closed once Destroy removed the container: a command
	// whose stream the engine has not ended yet ends then (a gVisor
	// sandbox's teardown can outlast the removal by seconds under load).
	destroyedOnce, destroyedClose sync.Once
	destroyed                     chan struct{}
}

func (s *Sandbox) destroyedCh() chan struct{} {
	s.destroyedOnce.Do(func() { s.destroyed = make(chan struct{}) })
	return s.destroyed
}

// markDestroyed ends the streams of this Sandbox's running commands.
func (s *Sandbox) markDestroyed() {
	ch := s.destroyedCh()
	s.destroyedClose.Do(func() { close(ch) })
}

var (
	_ backend.Sandbox      = (*Sandbox)(nil)
	_ backend.Archiver     = (*Sandbox)(nil)
	_ backend.FileSystem   = (*Sandbox)(nil)
	_ backend.Attacher     = (*Sandbox)(nil)
	_ backend.Endpointer   = (*Sandbox)(nil)
	_ backend.Pauser       = (*Sandbox)(nil)
	_ backend.Checkpointer = (*Sandbox)(nil)
	_ backend.Stopper      = (*Sandbox)(nil)
)

func (s *Sandbox) ID() string { return s.id }

// ContainerID is the engine's ID of the sandbox's container.
func (s *Sandbox) ContainerID() string { return s.cid }

func (s *Sandbox) opErr(op string, err error) error { return s.b.opErr(op, s.id, err) }

// inspect returns the container, translating "no such container" into
// ErrNotFound.
func (s *Sandbox) inspect(ctx context.Context) (container.InspectResponse, error) {
	c, err := s.b.cli.ContainerInspect(ctx, s.cid)
	return c, s.b.translate(err)
}

func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	c, err := s.inspect(ctx)
	if err != nil {
		return backend.Info{}, s.opErr("info", err)
	}
	var labels map[string]string
	var img string
	if c.Config != nil {
		labels, img = c.Config.Labels, c.Config.Image
	}
	if labels[backend.LabelPool] != "" && !s.adopted {
		rec, err := s.b.claimRecord(ctx, s.id)
		if err != nil {
			return backend.Info{}, s.opErr("info", err)
		}
		labels = withClaim(labels, strings.TrimPrefix(c.Name, "/"), rec)
	}
	state := ""
	if c.State != nil {
		state = c.State.Status
	}
	created, _ := time.Parse(time.RFC3339Nano, c.Created)
	info := infoFrom(labels, img, state, created, workDirOf(c))
	markMaking(&info, strings.TrimPrefix(c.Name, "/"))
	if s.adopted {
		// Its labels, if any, are someone else's.
		info.ID, info.Name, info.Session, info.Owner = s.id, s.name, "", ""
		info.ExpiresAt = time.Time{}
	}
	return info, nil
}

// resolve makes a sandbox path absolute against the working directory, as
// Exec resolves it.
func (s *Sandbox) resolve(name string) string {
	if path.IsAbs(name) {
		return path.Clean(name)
	}
	return path.Join(s.workDir, name)
}

// wrapped is argv run through sbxd exec with the marker execID.
func wrapped(argv []string, execID string, timeout time.Duration) []string {
	cmd := []string{sbxdPath, "exec", "--id", execID}
	if timeout > 0 {
		cmd = append(cmd, "--timeout", timeout.String())
	}
	return append(append(cmd, "--"), argv...)
}

// startExec creates and attaches to an exec of argv under sbxd.
func (s *Sandbox) startExec(ctx context.Context, req backend.ExecRequest, argv []string, execID string, stdin bool) (types.HijackedResponse, string, error) {
	env := []string{envExecID + "=" + execID}
	for _, k := range slices.Sorted(maps.Keys(req.Env)) {
		env = append(env, k+"="+req.Env[k])
	}
	cmd := argv
	if !s.plain {
		cmd = wrapped(argv, execID, req.Timeout)
	}
	opts := container.ExecOptions{
		Cmd:          cmd,
		Env:          env,
		User:         req.User,
		AttachStdin:  stdin,
		AttachStdout: true,
		AttachStderr: true,
	}
	if req.WorkDir != "" {
		opts.WorkingDir = s.resolve(req.WorkDir)
	}
	created, err := s.b.cli.ContainerExecCreate(ctx, s.cid, opts)
	if err != nil {
		return types.HijackedResponse{}, "", s.b.translate(err)
	}
	hr, err := s.b.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
	if err != nil {
		return types.HijackedResponse{}, "", s.b.translate(err)
	}
	return hr, created.ID, nil
}

// Exec runs req through sbxd exec, which owns the timeout and kills the
// command's process tree inside the container; cancelling ctx runs sbxd
// kill in a second exec. Neither needs host PIDs, so both work with a
// remote engine.
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	execID := newID()
	start := time.Now()
	hr, engineID, err := s.startExec(ctx, req, argv, execID, req.Stdin != nil)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	defer hr.Close()
	out := backend.NewOutputs(req)
	if req.Stdin != nil {
		go func() {
			io.Copy(hr.Conn, req.Stdin)
			hr.CloseWrite()
		}()
	}
	copied := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out.Stdout, out.Stderr, hr.Reader)
		copied <- err
	}()

	// sbxd ends the command at req.Timeout; this later deadline only
	// guards against a wrapper that cannot (a frozen container). Without
	// sbxd it is the timeout itself.
	var backstop <-chan time.Time
	if req.Timeout > 0 {
		d := req.Timeout + 30*time.Second
		if s.plain {
			d = req.Timeout
		}
		t := time.NewTimer(d)
		defer t.Stop()
		backstop = t.C
	}
	var res backend.ExecResult
	var ctxErr, copyErr error
	select {
	case copyErr = <-copied:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		// The stream first: a caller that stopped reading leaves the
		// engine blocked writing the command's output to it, and the kill
		// exec's stream then never ends.
		hr.Close()
		s.kill(execID)
		<-copied
	case <-backstop:
		res.TimedOut = true
		s.kill(execID)
		hr.Close()
		<-copied
	case <-s.destroyedCh():
		hr.Close()
		<-copied
		res.Duration = time.Since(start)
		out.Finish(&res)
		res.ExitCode = -1
		return res, s.opErr("exec", fmt.Errorf("%w: the sandbox was destroyed while the command ran", backend.ErrNotFound))
	}
	res.Duration = time.Since(start)
	out.Finish(&res)
	if ctxErr != nil {
		res.ExitCode = -1
		return res, s.opErr("exec", ctxErr)
	}
	if res.TimedOut {
		res.ExitCode = backend.TimeoutExitCode
		return res, nil
	}
	if copyErr != nil {
		return res, s.opErr("exec", fmt.Errorf("reading output: %w", s.b.translate(copyErr)))
	}
	code, err := s.b.exitCode(ctx, engineID)
	if err != nil {
		return res, s.opErr("exec", err)
	}
	res.ExitCode = code
	// sbxd exits 124 only when its timer fired (or the command itself
	// exits 124 at or after the deadline, which is indistinguishable).
	res.TimedOut = req.Timeout > 0 && code == backend.TimeoutExitCode && res.Duration >= req.Timeout
	return res, nil
}

// exitCode reads an exec's exit code. The engine closes the output stream
// when the process's pipes close and records the exit a moment later, so a
// first inspect may still say running: ask again with a short, bounded
// backoff.
func (b *Backend) exitCode(ctx context.Context, engineID string) (int, error) {
	delay := time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		ins, err := b.cli.ContainerExecInspect(ctx, engineID)
		if err != nil {
			return -1, b.translate(err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("exec %s: the engine still reports it running after its output ended", engineID)
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 100*time.Millisecond)
	}
}

// kill runs sbxd kill for a command's marker in a second exec, detached
// from the caller's context (which is usually what was cancelled).
func (s *Sandbox) kill(execID string) {
	if s.plain {
		s.b.log.Warn("no sbxd in the container: the command cannot be killed and keeps running in it",
			"sandbox", s.id, "exec", execID)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// execCapture attaches to its output: Podman refuses to start an exec
	// with no stream attached, and sbxd kill says why it failed on stderr.
	stdout, stderr, code, err := s.b.execCapture(ctx, s.cid, []string{sbxdPath, "kill", execID}, nil)
	if err == nil && code != 0 {
		err = fmt.Errorf("sbxd kill exited %d: %s", code, bytes.TrimSpace(append(stdout, stderr...)))
	}
	if err != nil {
		s.b.log.Warn("killing a command in a sandbox failed", "sandbox", s.id, "exec", execID, "err", err)
	}
}

// Destroy force-removes the container with its anonymous volumes, and a
// pool member's claim record after it; a container that is gone already
// is not an error. An adopted container (Spec.Existing) is left running:
// Destroy only detaches from it.
func (s *Sandbox) Destroy(ctx context.Context) error {
	if s.adopted {
		return nil
	}
	// The enforcer goes first: an enforcer whose sandbox is gone is a
	// leftover for PruneCaches, and a sandbox without its enforcer
	// reaches nothing.
	if s.egress != "" {
		if err := s.b.removeEnforcer(ctx, s.egress); err != nil {
			return s.opErr("destroy", err)
		}
	}
	err := s.b.cli.ContainerRemove(ctx, s.cid, container.RemoveOptions{Force: true, RemoveVolumes: true})
	err = s.b.translate(err)
	if err == nil || errors.Is(err, backend.ErrNotFound) {
		s.markDestroyed()
	}
	switch {
	case err != nil && strings.Contains(err.Error(), "already in progress"):
		return nil // a concurrent Destroy is removing it, and its record after it
	case err != nil && !errors.Is(err, backend.ErrNotFound):
		return s.opErr("destroy", err)
	case !s.pool:
		return nil
	}
	// The record goes second: removed first, it would let the member
	// read as ready (and be claimed) while its container is being removed.
	for _, name := range []string{claimVolume(s.id), readyVolume(s.id)} {
		err = s.b.translate(s.b.cli.VolumeRemove(ctx, name, false))
		if err != nil && !errors.Is(err, backend.ErrNotFound) {
			return s.opErr("destroy", fmt.Errorf("removing record %s: %w", name, err))
		}
	}
	return nil
}

var _ backend.Discarder = (*Sandbox)(nil)

// Discard kills a container made with Spec.AutoRemove and returns: the
// engine removes it and its anonymous volumes once it has stopped, which
// the caller does not wait for. A bare sbxd init ends on SIGTERM, at once
// and always (the kernel ends the rest of the sandbox with it), and the
// engine returns from sending that without waiting for the container to
// stop (~100 ms here for SIGKILL); a command of the entry's might ignore
// SIGTERM, so it gets SIGKILL. Any other sandbox is destroyed.
func (s *Sandbox) Discard(ctx context.Context) error {
	if !s.autoRemove || s.adopted || s.pool || s.egress != "" {
		return s.Destroy(ctx)
	}
	// A bare sbxd init ends on SIGTERM, which the engine sends without
	// waiting; but only once it has set its handlers, and a PID 1 without
	// one ignores SIGTERM (a Discard right after Create left the
	// container running). Its agent having answered says it has.
	sig := "KILL"
	if s.bareInit && s.agentUp.Load() {
		sig = "TERM"
	}
	err := s.b.translate(s.b.cli.ContainerKill(ctx, s.cid, sig))
	switch {
	case err == nil, errors.Is(err, backend.ErrNotFound):
		return nil
	case strings.Contains(err.Error(), "is not running"):
		// Stopped already, perhaps still being removed: make sure.
		return s.Destroy(ctx)
	}
	return s.opErr("discard", err)
}

// Endpoint returns the host address of a published TCP port.
func (s *Sandbox) Endpoint(ctx context.Context, port int) (string, error) {
	if port <= 0 || port > 65535 {
		return "", s.opErr("endpoint", fmt.Errorf("%w: port %d out of range", backend.ErrInvalidConfig, port))
	}
	c, err := s.inspect(ctx)
	if err == nil && s.egress != "" {
		// Its enforcer owns the network and publishes the ports.
		c, err = s.b.cli.ContainerInspect(ctx, s.egress)
		err = s.b.translate(err)
	}
	if err != nil {
		return "", s.opErr("endpoint", err)
	}
	if c.HostConfig != nil && c.HostConfig.NetworkMode.IsHost() {
		return fmt.Sprintf("127.0.0.1:%d", port), nil
	}
	if c.NetworkSettings != nil {
		for p, binds := range c.NetworkSettings.Ports {
			if p.Proto() != "tcp" || p.Int() != port {
				continue
			}
			for _, bnd := range binds {
				if bnd.HostPort != "" {
					return s.b.hostOf(bnd.HostIP) + ":" + bnd.HostPort, nil
				}
			}
		}
	}
	return "", s.opErr("endpoint", fmt.Errorf("%w: port %d/tcp is not published (add it to the sandbox entry's ports)", backend.ErrNotFound, port))
}

// Pause freezes the container's processes with their memory (cgroup
// freezer).
func (s *Sandbox) Pause(ctx context.Context) error {
	if err := s.b.cli.ContainerPause(ctx, s.cid); err != nil {
		return s.opErr("pause", err)
	}
	return s.opErr("pause", s.settlePaused(ctx, true))
}

func (s *Sandbox) Resume(ctx context.Context) error {
	if err := s.b.cli.ContainerUnpause(ctx, s.cid); err != nil {
		return s.opErr("resume", err)
	}
	return s.opErr("resume", s.settlePaused(ctx, false))
}

// settlePaused waits (at most 5 s) until the engine has reported the
// container paused, or not, as the call that just returned made it, for
// settleFor in a row. Docker's handler of the runtime's pause event sets
// the paused flag again when that event arrives after the unpause call
// returned (about one pause and resume in 300 back to back here), until
// the resume event clears it (and a late resume event after a pause
// clears it until the pause event sets it): a caller that asks for the
// state right after Resume would see "paused". The engine reports nothing
// when an event changes nothing, so no event of its says that none is
// still to come: the flag is watched for settleFor instead, a flip
// within it restarting the wait.
func (s *Sandbox) settlePaused(ctx context.Context, paused bool) error {
	deadline := time.Now().Add(5 * time.Second)
	var since time.Time // since when the engine has reported the state; zero while it does not
	for {
		c, err := s.b.cli.ContainerInspect(ctx, s.cid)
		if err != nil {
			return s.b.translate(err)
		}
		now := time.Now()
		if c.State == nil || now.After(deadline) {
			return nil
		}
		switch {
		case c.State.Paused != paused:
			since = time.Time{}
		case since.IsZero():
			since = now
		case now.Sub(since) >= settleFor:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond): // polls a condition
		}
	}
}

// settleFor is how long Pause and Resume watch the engine report the
// state they made before they return (settlePaused). Waiting only for the
// engine's first report of it left the late flip after it once in a CI run
// (TestPauseResumeStateSettles, cycle 108 of 200, a loaded machine); 600
// cycles by hand (300 beside two busy loops) flipped none, so the flip's
// delay is not known: 20 ms is several times the engine's own handling of
// a pause or unpause call here (0.5-1 ms to the first report).
const settleFor = 20 * time.Millisecond

// Stop kills the container and returns once it has stopped; its file
// system stays, for Start or Destroy. A container the engine removes
// once it stops (Spec.AutoRemove), and one sandboxkit did not make
// (Spec.Existing), cannot be stopped.
func (s *Sandbox) Stop(ctx context.Context) error {
	switch {
	case s.autoRemove:
		return s.opErr("stop", fmt.Errorf("%w: the engine removes this sandbox's container once it stops (it was made to be removed so)", errors.ErrUnsupported))
	case s.adopted:
		return s.opErr("stop", fmt.Errorf("%w: the container is not sandboxkit's (existing)", errors.ErrUnsupported))
	}
	// The wait first: a container that stops before it is asked for is
	// waited for all the same.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped, werr := s.b.cli.ContainerWait(wctx, s.cid, container.WaitConditionNotRunning)
	if err := s.b.translate(s.b.cli.ContainerKill(ctx, s.cid, "KILL")); err != nil && !strings.Contains(err.Error(), "is not running") {
		return s.opErr("stop", err)
	}
	select {
	case <-stopped:
		return nil
	case err := <-werr:
		return s.opErr("stop", s.b.translate(err))
	}
}

// Start starts a stopped container again: sbxd init runs its command
// afresh.
func (s *Sandbox) Start(ctx context.Context) error {
	return s.opErr("start", s.b.translate(s.b.cli.ContainerStart(ctx, s.cid, container.StartOptions{})))
}

// Checkpoint commits the container's file system to an image (memory is
// not saved). ref "" names it sandboxkit-checkpoint/<id>:<unix-time>.
func (s *Sandbox) Checkpoint(ctx context.Context, ref string) (string, error) {
	if ref == "" {
		ref = "sandboxkit-checkpoint/" + s.id + ":" + strconv.FormatInt(time.Now().Unix(), 10)
	}
	if _, err := s.commit(ctx, ref, "sandboxkit checkpoint of sandbox "+s.id, nil); err != nil {
		return "", s.opErr("checkpoint", err)
	}
	return ref, nil
}

// commit commits the container's file system (paused meanwhile) to an
// image named ref, with labels added to the container's, and returns the
// image's ID. Checkpoint, Snapshot and Fork share it.
func (s *Sandbox) commit(ctx context.Context, ref, comment string, labels map[string]string) (string, error) {
	// The labels both ways: Docker merges Config with the container's;
	// Podman's compat API ignores Config's labels and applies LABEL
	// changes.
	var changes []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		changes = append(changes, "LABEL "+strconv.Quote(k)+"="+strconv.Quote(labels[k]))
	}
	res, err := s.b.cli.ContainerCommit(ctx, s.cid, container.CommitOptions{
		Reference: ref,
		Comment:   comment,
		Pause:     true,
		Changes:   changes,
		// Never nil: Podman's compat API fails to decode a commit without
		// a body; Docker merges it with the container's config.
		Config: &container.Config{Labels: labels},
	})
	if err != nil {
		return "", s.b.translate(err)
	}
	return res.ID, nil
}

// Attach starts a long-lived command (how sbxd's stream mode will be
// started) with its stdin and stdout connected to the caller.
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest) (backend.Process, error) {
	argv, err := req.Argv()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	req.Timeout = 0
	execID := newID()
	hr, engineID, err := s.startExec(ctx, req, argv, execID, true)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	pr, pw := io.Pipe()
	stderr := req.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	p := &process{s: s, hr: hr, execID: execID, stdout: pr, done: make(chan struct{}), closeStdin: sync.OnceValue(hr.CloseWrite)}
	go func() {
		_, err := stdcopy.StdCopy(pw, stderr, hr.Reader)
		pw.CloseWithError(err)
		code, ierr := s.b.exitCode(context.WithoutCancel(ctx), engineID)
		if ierr != nil && err == nil {
			err = ierr
		}
		p.code, p.err = code, s.b.translate(err)
		hr.Close()
		close(p.done)
	}()
	stop := context.AfterFunc(ctx, func() { p.Kill() })
	go func() { <-p.done; stop() }()
	return p, nil
}

type process struct {
	s      *Sandbox
	hr     types.HijackedResponse
	execID string
	stdout io.Reader

	done     chan struct{}
	code     int
	err      error
	killOnce sync.Once
	// closeStdin sends EOF once: callers may close stdin more than once,
	// even at once, and an SSH channel's CloseWrite (remotedocker) must
	// not run twice concurrently.
	closeStdin func() error
}

func (p *process) Stdin() io.WriteCloser { return stdinWriter{p} }
func (p *process) Stdout() io.Reader     { return p.stdout }

func (p *process) Wait() (int, error) {
	<-p.done
	return p.code, p.err
}

func (p *process) Kill() error {
	p.killOnce.Do(func() { p.s.kill(p.execID) })
	return nil
}

// stdinWriter writes to the exec's stdin; Close sends EOF.
type stdinWriter struct{ p *process }

func (w stdinWriter) Write(b []byte) (int, error) { return w.p.hr.Conn.Write(b) }
func (w stdinWriter) Close() error                { return w.p.closeStdin() }

// MemoryUsage reports the memory the sandbox's processes use now, as docker
// stats counts it: the container cgroup's usage less its inactive page
// cache. (The engine's own per-container cost, the runtime shim, is not in
// it.)
func (s *Sandbox) MemoryUsage(ctx context.Context) (int64, error) {
	rc, err := s.b.cli.ContainerStatsOneShot(ctx, s.cid)
	if err != nil {
		return 0, s.opErr("stats", err)
	}
	defer rc.Body.Close()
	var st container.StatsResponse
	if err := json.NewDecoder(rc.Body).Decode(&st); err != nil {
		return 0, s.opErr("stats", err)
	}
	used := st.MemoryStats.Usage
	for _, k := range []string{"total_inactive_file", "inactive_file"} { // cgroup v1, v2
		if v, ok := st.MemoryStats.Stats[k]; ok && v < used {
			used -= v
			break
		}
	}
	return int64(used), nil
}
