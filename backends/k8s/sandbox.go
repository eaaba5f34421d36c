package k8s

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/agenttls"
	"github.com/sandboxkit/sandboxkit/internal/attach"
	"github.com/sandboxkit/sandboxkit/internal/execframe"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
)

// Sandbox is one pod. It is safe for concurrent use.
type Sandbox struct {
	// Its own terminals end with their client (see Terminal).
	backend.TerminalsEndWithClient

	b  *Backend
	id string
	// pod and container are where commands run: the sandbox's own pod
	// and its "sandbox" container, or for an adopted pod (Spec.Existing)
	// that pod and its default container.
	pod, container string
	// adopted: a pod sandboxkit did not make; name is the entry's name.
	adopted bool
	name    string
	workDir string
	// sbxd: the pod has sbxd at sbxdPath, which wraps every command so a
	// timeout or cancel can kill its process tree.
	sbxd bool
	// framed: the pod's sbxd has exec --framed (version 2 on), which Exec
	// uses (see internal/execframe).
	framed bool
	ports  []int // declared TCP container ports
	// hostAddrs: where Endpoint listens for a port (the entry's host IP
	// and port); others get a free loopback port.
	hostAddrs map[int]string
	destroyed atomic.Bool
	// users holds the ExecRequest.User values sbxd could switch to.
	users sync.Map
	// agent: the credentials of the pod's directly reachable sbxd (this
	// process made the pod; see Config.Agent), and podIP where it
	// listens. Nil: reached through exec only.
	agent *agenttls.Creds
	podIP string
}

var (
	_ backend.Sandbox    = (*Sandbox)(nil)
	_ backend.Attacher   = (*Sandbox)(nil)
	_ backend.Endpointer = (*Sandbox)(nil)
	_ backend.Renewer    = (*Sandbox)(nil)
)

// envExecID is the marker sbxd exec puts on a command's processes.
const envExecID = "SBX_EXEC_ID"

func (b *Backend) sandboxFor(pod *corev1.Pod) *Sandbox {
	s := &Sandbox{b: b, id: pod.Name, pod: pod.Name, container: containerName, workDir: infoOf(pod).WorkDir,
		sbxd: pod.Annotations[annotationSbxd] == sbxdPath}
	s.framed = s.sbxd && sbxdFramed(pod.Annotations[annotationSbxdVersion])
	s.ports = tcpPorts(pod, containerName)
	for kv := range strings.SplitSeq(pod.Annotations[annotationHostPorts], ",") {
		p, addr, ok := strings.Cut(kv, "=")
		if port, err := strconv.Atoi(p); ok && err == nil {
			if s.hostAddrs == nil {
				s.hostAddrs = map[int]string{}
			}
			s.hostAddrs[port] = addr
		}
	}
	return s
}

// tcpPorts are the TCP ports a pod's container declares.
func tcpPorts(pod *corev1.Pod, container string) []int {
	var ports []int
	for _, c := range pod.Spec.Containers {
		if c.Name != container {
			continue
		}
		for _, p := range c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				ports = append(ports, int(p.ContainerPort))
			}
		}
	}
	return ports
}

// stream runs argv in the sandbox's container (see Backend.stream).
func (s *Sandbox) stream(ctx context.Context, argv []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	return s.b.stream(ctx, s.pod, s.container, argv, stdin, stdout, stderr)
}

// fetchPod reads the sandbox's pod.
func (s *Sandbox) fetchPod(ctx context.Context) (*corev1.Pod, error) {
	if s.adopted {
		return s.b.getAnyPod(ctx, s.pod)
	}
	return s.b.getPod(ctx, s.pod)
}

func (s *Sandbox) ID() string { return s.id }

// SbxdPath is where sbxd is in the pod (sbxd.AgentPather), so sbxd.Wrap
// starts the copy Create put there instead of injecting another.
func (s *Sandbox) SbxdPath() string { return sbxdPath }

func (s *Sandbox) opErr(op string, err error) error { return s.b.opErr(op, s.id, err) }

func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	pod, err := s.fetchPod(ctx)
	if err != nil {
		return backend.Info{}, s.opErr("info", err)
	}
	if s.adopted {
		return s.adoptedInfo(pod), nil
	}
	return infoOf(pod), nil
}

// resolve makes a sandbox path absolute against the working directory.
func (s *Sandbox) resolve(name string) string {
	if path.IsAbs(name) {
		return path.Clean(name)
	}
	return path.Join(s.workDir, name)
}

// gone is the error of calls on a sandbox this handle destroyed.
func (s *Sandbox) gone() error {
	return fmt.Errorf("%w: sandbox %s was destroyed", backend.ErrNotFound, s.id)
}

// command is the argv run in the pod for req: argv with req's environment
// and working directory, under sbxd exec when the pod has sbxd (with
// --framed when framed: see streamFramed).
func (s *Sandbox) command(ctx context.Context, req backend.ExecRequest, argv []string, execID string, timeout time.Duration, framed bool) ([]string, error) {
	if req.User != "" {
		if err := s.checkUser(ctx, req.User); err != nil {
			return nil, err
		}
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, fmt.Errorf("%w: %v", backend.ErrInvalidConfig, err)
	}
	dir := ""
	if req.WorkDir != "" {
		dir = s.resolve(req.WorkDir)
	}
	cmd := withEnv(argv, req.Env, dir)
	if !s.sbxd {
		return cmd, nil
	}
	w := []string{sbxdPath, "exec", "--id", execID}
	if framed {
		w = append(w, "--framed")
	}
	if req.User != "" {
		w = append(w, "--user", req.User)
	}
	if timeout > 0 {
		w = append(w, "--timeout", timeout.String())
	}
	return append(append(w, "--"), cmd...), nil
}

// Exec runs req under sbxd exec, which owns the timeout and kills the
// command's process tree inside the pod; cancelling ctx runs sbxd kill in a
// second exec (the exec API itself cannot kill).
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if s.destroyed.Load() {
		return backend.ExecResult{}, s.opErr("exec", s.gone())
	}
	argv, err := req.Argv()
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	execID := randomHex(8)
	cmd, err := s.command(ctx, req, argv, execID, req.Timeout, s.framed)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	start := time.Now()
	out := backend.NewOutputs(req)
	g := &gate{}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		code int
		err  error
	}
	done := make(chan outcome, 1)
	go func() {
		streamer := s.stream
		if s.framed {
			streamer = s.streamFramed
		}
		code, err := streamer(sctx, cmd, req.Stdin, g.writer(out.Stdout), g.writer(out.Stderr))
		done <- outcome{code, err}
	}()

	// sbxd ends the command at req.Timeout; this later deadline only
	// guards against a wrapper that cannot (a frozen node). Without sbxd it
	// is the timeout itself.
	var backstop <-chan time.Time
	if req.Timeout > 0 {
		d := req.Timeout + 30*time.Second
		if !s.sbxd {
			d = req.Timeout
		}
		t := time.NewTimer(d)
		defer t.Stop()
		backstop = t.C
	}
	var res backend.ExecResult
	var o outcome
	var ctxErr error
	select {
	case o = <-done:
	case <-ctx.Done():
		ctxErr = ctx.Err()
		cancel()
		<-done
		s.kill(execID)
	case <-backstop:
		res.TimedOut = true
		cancel()
		<-done
		s.kill(execID)
	}
	g.close()
	res.Duration = time.Since(start)
	out.Finish(&res)
	switch {
	case ctxErr != nil:
		res.ExitCode = -1
		return res, s.opErr("exec", ctxErr)
	case res.TimedOut:
		res.ExitCode = backend.TimeoutExitCode
		return res, nil
	case o.err != nil:
		return res, s.opErr("exec", s.explain(ctx, o.err))
	}
	res.ExitCode = o.code
	// sbxd exits 124 only when its timer fired (or the command itself
	// exits 124 at or after the deadline, which is indistinguishable).
	res.TimedOut = req.Timeout > 0 && o.code == backend.TimeoutExitCode && res.Duration >= req.Timeout
	return res, nil
}

// explain turns a failed exec stream into ErrNotFound when the pod is gone
// (deleted behind our back, or destroyed through this handle).
func (s *Sandbox) explain(ctx context.Context, err error) error {
	if s.destroyed.Load() {
		return s.gone()
	}
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, gerr := s.fetchPod(gctx); errors.Is(gerr, backend.ErrNotFound) {
		return fmt.Errorf("%w: pod %s/%s is gone (deleted outside sandboxkit?): %v", backend.ErrNotFound, s.b.ns, s.pod, err)
	}
	return err
}

// kill runs sbxd kill for a command's marker in a second exec, detached
// from the caller's context (which is usually what was cancelled).
func (s *Sandbox) kill(execID string) {
	if !s.sbxd {
		s.b.log.Warn("no sbxd in the pod: the command cannot be killed and keeps running in it",
			"sandbox", s.id, "exec", execID)
		return
	}
	if s.destroyed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr strings.Builder
	code, err := s.stream(ctx, []string{sbxdPath, "kill", execID}, nil, io.Discard, &stderr)
	if err == nil && code != 0 {
		err = fmt.Errorf("sbxd kill exited %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	if err != nil {
		s.b.log.Warn("killing a command in a sandbox failed", "sandbox", s.id, "exec", execID, "err", err)
	}
}

// Destroy deletes the pod with the configured grace period, and with it
// the claims Create made for it. It does not wait for the pod's processes
// to end: the pod is not found from then on. Destroying a sandbox that is
// gone is not an error.
//
// An adopted pod (Spec.Existing) is left running: Destroy only stops the
// sandbox's port forwards, as sandboxkit did not make the pod.
func (s *Sandbox) Destroy(ctx context.Context) error {
	if s.adopted {
		s.b.stopForwards(s.pod)
		return nil
	}
	s.destroyed.Store(true)
	s.b.stopForwards(s.id)
	rctx, cancel := s.b.reqCtx(ctx)
	defer cancel()
	return s.opErr("destroy", s.b.deletePod(rctx, s.id, s.b.cfg.deleteGrace()))
}

// Renew moves the sandbox's expiry to ttl from now.
func (s *Sandbox) Renew(ctx context.Context, ttl time.Duration) (time.Time, error) {
	if s.adopted {
		return time.Time{}, s.opErr("renew", fmt.Errorf("%w: pod %s was not made by sandboxkit (pod_name): it has no time to live", errors.ErrUnsupported, s.pod))
	}
	pod, err := s.b.getPod(ctx, s.id)
	if err != nil {
		return time.Time{}, s.opErr("renew", err)
	}
	exp := now().Add(ttl).UTC().Truncate(time.Second)
	all := labelsOf(pod.ObjectMeta)
	all[backend.LabelExpiresAt] = exp.Format(time.RFC3339)
	// Fails if the pod changed since it was read (another Renew, a claim).
	if _, err := s.b.writeLabels(ctx, pod, all); err != nil {
		return time.Time{}, s.opErr("renew", err)
	}
	return exp, nil
}

// patchAnnotations sets annotations that no other writer changes (what
// Create records), so it needs no read first and cannot conflict with a
// claim of the pod meanwhile (a pool member is claimable as soon as it
// runs).
func (b *Backend) patchAnnotations(ctx context.Context, pod string, ann map[string]string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	_, err := b.kube.Pods(b.ns).Patch(rctx, pod, types.MergePatchType, patch, metav1.PatchOptions{})
	return b.translate(err)
}

// injectScript reports the node's architecture and the container's working
// directory, then stores the sbxd binary it reads from stdin. (Sending it
// gzipped for gunzip in the pod was measured no faster here: busybox's
// gunzip costs what the smaller transfer saves.)
//
// The size comes first, so a transfer cut short never leaves a truncated
// binary for the pod's main process to exec; then a line with the agent's
// credentials (see agentFile), or an empty one, which lands before the
// binary does, so that sbxd init finds it; with credentials, the pod's
// main process is keepAliveAgent, which a SIGUSR1 wakes.
const injectScript = `uname -m 2>/dev/null || echo unknown
pwd
read -r n
read -r agent
mkdir -p ` + sbxdDir + ` &&
{ [ -z "$agent" ] || (umask 077 && printf '%s\n' "$agent" > ` + sbxdDir + `/.agent.tmp && mv -f ` + sbxdDir + `/.agent.tmp ` + agentFile + `); } &&
cat > ` + sbxdDir + `/.sbxd.tmp &&
[ "$(wc -c < ` + sbxdDir + `/.sbxd.tmp)" -eq "$n" ] &&
chmod 755 ` + sbxdDir + `/.sbxd.tmp && mv -f ` + sbxdDir + `/.sbxd.tmp ` + sbxdPath + ` &&
{ [ -z "$agent" ] || kill -USR1 1 2>/dev/null || true; }`

// setUp puts sbxd in the pod and records what Get needs to know later
// (sbxd is there; the image's working directory when findWorkDir). Without
// a shell in the image there is no sbxd: commands then run as plain execs,
// which a timeout or cancel cannot kill inside the pod.
func (s *Sandbox) setUp(ctx context.Context, findWorkDir bool) error {
	arch, wd, err := s.inject(ctx)
	if err != nil {
		s.b.log.Warn("putting sbxd in the pod failed; timeouts and cancels will not kill commands inside it",
			"sandbox", s.id, "arch", arch, "err", err)
		if findWorkDir {
			if err := s.probeWorkDir(ctx); err != nil {
				s.b.log.Debug("finding the image's working directory failed; using /", "sandbox", s.id, "err", err)
			}
		}
		return nil
	}
	ann := map[string]string{annotationSbxd: sbxdPath, annotationSbxdVersion: strconv.Itoa(execframe.SbxdVersion)}
	if findWorkDir && path.IsAbs(wd) {
		ann[annotationWorkDir] = wd
		s.workDir = wd
	}
	if err := s.b.patchAnnotations(ctx, s.id, ann); err != nil {
		return err
	}
	s.sbxd, s.framed = true, true
	return nil
}

// inject streams the sbxd binary for the node's architecture into the pod.
func (s *Sandbox) inject(ctx context.Context) (arch, workDir string, err error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr syncbuf.Buffer
	done := make(chan error, 1)
	var code int
	go func() {
		var err error
		code, err = s.stream(ctx, []string{"/bin/sh", "-c", injectScript}, inR, outW, &stderr)
		outW.Close()
		inR.Close()
		done <- err
	}()
	lines := bufio.NewReader(outR)
	arch, _ = lines.ReadString('\n')
	workDir, _ = lines.ReadString('\n')
	arch, workDir = strings.TrimSpace(arch), strings.TrimSpace(workDir)
	go io.Copy(io.Discard, lines)
	var bin []byte
	if arch != "" {
		bin, err = s.b.sbxdBinary(sbxdbin.NormalizeArch(arch))
	} else {
		err = errors.New("no reply from the pod's shell")
	}
	if err == nil {
		line := ""
		if s.agent != nil {
			line = s.agent.Line()
		}
		_, err = fmt.Fprintf(inW, "%d\n%s\n", len(bin), line)
	}
	if err == nil {
		_, err = inW.Write(bin)
	}
	inW.CloseWithError(err)
	if serr := <-done; err == nil {
		err = serr
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("the copy exited %d: %s", code, strings.TrimSpace(stderr.String()))
	}
	return arch, workDir, err
}

// probeWorkDir finds the container's working directory with pwd and
// records it on the pod.
func (s *Sandbox) probeWorkDir(ctx context.Context) error {
	wd, err := s.pwd(ctx)
	if err != nil {
		return err
	}
	s.workDir = wd
	return s.b.patchAnnotations(ctx, s.id, map[string]string{annotationWorkDir: wd})
}

// pwd is the container's working directory, as a plain exec finds it.
func (s *Sandbox) pwd(ctx context.Context) (string, error) {
	var out strings.Builder
	code, err := s.stream(ctx, []string{"pwd"}, nil, &out, io.Discard)
	if err != nil {
		return "", err
	}
	wd := strings.TrimSpace(out.String())
	if code != 0 || !path.IsAbs(wd) {
		return "", fmt.Errorf("pwd exited %d with %q", code, wd)
	}
	return wd, nil
}

// Attach starts a long-lived command (how sbxd's stream mode is started)
// with its stdin and stdout connected to the caller.
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest) (backend.Process, error) {
	if s.destroyed.Load() {
		return nil, s.opErr("attach", s.gone())
	}
	argv, err := req.Argv()
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	execID := randomHex(8)
	// Not framed: the caller speaks to the command itself.
	cmd, err := s.command(ctx, req, argv, execID, 0, false)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	stderr := req.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// The kill ends the process tree with sbxd kill, then drops the
	// stream (which alone would leave the process running in the pod).
	p := attach.New(ctx, inW, outR, func(<-chan struct{}) {
		s.kill(execID)
		cancel()
	})
	g := &gate{}
	go func() {
		code, err := s.stream(sctx, cmd, inR, g.writer(outW), g.writer(stderr))
		g.close()
		if err != nil {
			err = s.explain(sctx, err)
		}
		outW.CloseWithError(err)
		inR.Close()
		if err != nil {
			err = s.opErr("attach", err)
		}
		p.Exit(code, err)
		cancel()
	}()
	return p, nil
}

// sbxdBinary is the sbxd binary for arch, found once per backend.
func (b *Backend) sbxdBinary(arch string) ([]byte, error) {
	b.payloadMu.Lock()
	defer b.payloadMu.Unlock()
	if p, ok := b.payloads[arch]; ok {
		return p, nil
	}
	bin, err := sbxdbin.Find(b.cfg.SbxdPath, arch)
	if err != nil {
		return nil, err
	}
	if b.payloads == nil {
		b.payloads = map[string][]byte{}
	}
	b.payloads[arch] = bin
	return bin, nil
}
