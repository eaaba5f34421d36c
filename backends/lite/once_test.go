package lite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

var _ backend.OneShotRunner = (*Backend)(nil)

// TestRunOnce runs commands as one-shot sandboxes' first processes: the
// command's output, exit code, environment, working directory, user and
// stdin, the command as PID 1 (no agent), sbxd's codes for a command that
// cannot start, and nothing left after each (the test env's check).
func TestRunOnce(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	run := func(t *testing.T, req backend.ExecRequest) backend.ExecResult {
		t.Helper()
		res, err := b.RunOnce(t.Context(), e.spec("once"), req)
		if err != nil {
			t.Fatalf("RunOnce: %v", err)
		}
		return res
	}
	t.Run("output", func(t *testing.T) {
		res := run(t, backend.ExecRequest{Shell: `echo out; echo err >&2; tr '\0' ' ' </proc/1/cmdline; echo; ls -a /.sbx; exit 3`})
		if res.ExitCode != 3 || res.TimedOut {
			t.Fatalf("exit %d (timed out %v), want 3; stderr %q", res.ExitCode, res.TimedOut, res.Stderr)
		}
		out := string(res.Stdout)
		if !strings.HasPrefix(out, "out\nsh -c echo out;") {
			t.Errorf("stdout %q: want out, then the command as PID 1", out)
		}
		if strings.Contains(out, "agent") {
			t.Errorf("a one-shot sandbox has the agent's folder: %q", out)
		}
		if string(res.Stderr) != "err\n" {
			t.Errorf("stderr %q, want err", res.Stderr)
		}
	})
	t.Run("environment", func(t *testing.T) {
		res := run(t, backend.ExecRequest{
			Shell: `echo "$FOO $HOSTNAME"; pwd; id -u`, Env: map[string]string{"FOO": "bar"},
			WorkDir: "/tmp/made", User: "nobody",
		})
		lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "bar ") || lines[1] != "/tmp/made" || lines[2] != "65534" {
			t.Errorf("stdout %q: want FOO, the working directory and nobody's uid", res.Stdout)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		res := run(t, backend.ExecRequest{Cmd: []string{"sh", "-c", "read line; echo got $line"}, Stdin: strings.NewReader("hello\n")})
		if string(res.Stdout) != "got hello\n" {
			t.Errorf("stdout %q", res.Stdout)
		}
		// A stdin that never ends (a file, a reader) does not keep
		// RunOnce waiting.
		fr, _ := ioPipe(t)
		ir, iw := io.Pipe()
		defer iw.Close()
		for _, in := range []io.Reader{fr, ir} {
			if res := run(t, backend.ExecRequest{Cmd: []string{"true"}, Stdin: in}); res.ExitCode != 0 {
				t.Errorf("exit %d", res.ExitCode)
			}
		}
	})
	t.Run("cannot start", func(t *testing.T) {
		for _, c := range []struct {
			argv []string
			code int
			msg  string
		}{
			{[]string{"/no/such/command"}, 127, `exec: "/no/such/command": no such file or directory`},
			{[]string{"nosuch"}, 127, `exec: "nosuch": executable file not found in $PATH`},
			{[]string{"/etc/passwd"}, 126, `exec: "/etc/passwd": permission denied`},
			{[]string{"tmp"}, 127, `exec: "tmp": executable file not found in $PATH`},
			{[]string{"../tmp"}, 126, `exec: "../tmp": permission denied`},
		} {
			res := run(t, backend.ExecRequest{Cmd: c.argv})
			if res.ExitCode != c.code || strings.TrimSpace(string(res.Stderr)) != c.msg {
				t.Errorf("%q: exit %d, stderr %q: want %d, %q", c.argv, res.ExitCode, res.Stderr, c.code, c.msg)
			}
		}
		// Found through PATH, a link and a relative name.
		res := run(t, backend.ExecRequest{Shell: "cd /bin && ./sh -c 'echo $0'", WorkDir: "/tmp"})
		if res.ExitCode != 0 || string(res.Stdout) != "./sh\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
		res = run(t, backend.ExecRequest{Cmd: []string{"../bin/echo", "relative"}, WorkDir: "/tmp"})
		if res.ExitCode != 0 || string(res.Stdout) != "relative\n" {
			t.Errorf("../bin/echo from /tmp: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
		}
	})
	t.Run("refused", func(t *testing.T) {
		spec := e.spec("own-command")
		spec.Command = []string{"sleep", "60"}
		req := backend.ExecRequest{Cmd: []string{"true"}}
		if b.CanRunOnce(spec, req) {
			t.Error("CanRunOnce takes a spec with a command of its own")
		}
		if _, err := b.RunOnce(t.Context(), spec, req); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("RunOnce: %v, want errors.ErrUnsupported", err)
		}
		if b.CanRunOnce(e.spec("relative"), backend.ExecRequest{Cmd: []string{"true"}, WorkDir: "sub"}) {
			t.Error("CanRunOnce takes a relative working directory")
		}
	})
}

// ioPipe is an os.Pipe closed at the end of t.
func ioPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// firstWrite is a writer that closes started at its first write.
type firstWrite struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	once    sync.Once
	started chan struct{}
}

func newFirstWrite() *firstWrite { return &firstWrite{started: make(chan struct{})} }

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.started) })
	return w.buf.Write(p)
}

// TestRunOnceTimeoutAndCancel: a timeout kills everything in the sandbox
// (124, TimedOut), a cancelled context too (its error); while the command
// runs the sandbox is listed as running under its owner, and afterwards
// nothing is left.
func TestRunOnceTimeoutAndCancel(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	spec := e.spec("long")
	spec.Owner = "test-owner"
	start := time.Now()
	res, err := b.RunOnce(t.Context(), spec, backend.ExecRequest{Shell: "sleep 60 & sleep 60", Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	if !res.TimedOut || res.ExitCode != backend.TimeoutExitCode {
		t.Errorf("exit %d, timed out %v: want 124 after the timeout", res.ExitCode, res.TimedOut)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s", d)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	out := newFirstWrite()
	errc := make(chan error, 1)
	go func() {
		res, err := b.RunOnce(ctx, spec, backend.ExecRequest{Shell: "echo started; exec sleep 60", Stdout: out})
		if err == nil || res.ExitCode != -1 {
			t.Errorf("cancelled: exit %d", res.ExitCode)
		}
		errc <- err
	}()
	select {
	case <-out.started:
	case err := <-errc:
		t.Fatalf("RunOnce ended before its command wrote: %v", err)
	}
	// The record gets the first process soon after the start.
	deadline := time.Now().Add(10 * time.Second)
	for {
		infos, err := b.List(t.Context(), backend.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) == 1 && infos[0].State == backend.StateRunning {
			if infos[0].Owner != "test-owner" {
				t.Errorf("owner %q", infos[0].Owner)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the one-shot sandbox is not listed as running: %+v", infos)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("RunOnce: %v, want context.Canceled", err)
	}
}

// TestRunOnceRuntimeFailure: a container the runtime fails to start (a
// memory limit below what its start uses) is an error naming the runtime
// and saying why (runc's log), not an exit code; a command only the exec
// itself can refuse (an executable file that is no program) gets the
// runtime's message on its stderr and the runtime's exit code (runc's init
// 1, runsc 128), as under a bare runc or runsc run. Neither leaves
// anything.
func TestRunOnceRuntimeFailure(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notaprogram"), []byte("\x00\x01 no program"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := e.spec("broken")
	spec.Volumes = []backend.Volume{{Type: backend.VolumeBind, Source: dir, Target: "/probe", ReadOnly: true}}
	res, err := b.RunOnce(t.Context(), spec, backend.ExecRequest{Cmd: []string{"/probe/notaprogram"}})
	code, msg := 1, "exec format error"
	if b.runtime.gvisor() {
		code, msg = 128, "/probe/notaprogram"
	}
	if err != nil || res.ExitCode != code || !strings.Contains(string(res.Stderr), msg) {
		t.Errorf("RunOnce: exit %d, %v, stderr %q: want %d and the runtime's message", res.ExitCode, err, res.Stderr, code)
	}
	if b.runtime.gvisor() {
		return // runsc does not apply the limit before its start
	}
	spec = e.spec("too-small")
	spec.Resources.MemoryBytes = 4096
	res, err = b.RunOnce(t.Context(), spec, backend.ExecRequest{Cmd: []string{"true"}})
	if err == nil || !strings.Contains(err.Error(), "runc run: ") || !strings.Contains(err.Error(), "memory limit") {
		t.Errorf("RunOnce: exit %d, %v: want the runtime's error; stderr %q", res.ExitCode, err, res.Stderr)
	}
}

// TestRunOnceUnfedRuntime: runc started before its one-shot sandbox's
// bundle is made (oneShot) reads its config from a pipe. When the process
// making the bundle goes away before writing it (killed, or its write end
// closed as here), runc reads an empty config and ends by itself, having
// made no container: nothing waits forever on a config that never comes
// (the test env's leak check looks for runtime processes naming the state
// folder, and for containers).
func TestRunOnceUnfedRuntime(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	if b.runtime.name != "runc" {
		t.Skipf("the runtime is %s: only runc starts before its bundle", b.runtime.name)
	}
	id := "0123456789ab"
	sb := &Sandbox{b: b, id: id, dir: filepath.Join(b.dir, id)}
	defer os.RemoveAll(sb.dir)
	m := &meta{ID: id, Once: true, ContainerID: containerID(b.runtime, id, 0), Runtime: b.runtime.path, RuntimeRoot: b.runtime.root}
	var stderr bytes.Buffer
	a, err := sb.startAttached(m, backend.ExecRequest{Cmd: []string{"true"}, Stderr: &stderr}, true)
	if err != nil {
		t.Fatal(err)
	}
	a.closeConfig()
	done := make(chan error, 1)
	go func() { done <- a.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("runc run succeeded without a config")
		}
	case <-time.After(time.Minute):
		a.cmd.Process.Kill()
		t.Fatal("runc run still waits for its config a minute after its writer went away")
	}
	a.stopWarm()
	if ids, err := b.runtime.list(t.Context()); err != nil || len(ids) > 0 {
		t.Errorf("containers after an unfed run: %v, %v", ids, err)
	}
	if !strings.Contains(stderr.String(), "EOF") {
		t.Errorf("runc's stderr %q: want its error reading the empty config", stderr.String())
	}
}

// TestRunOnceStartsRuncEarly: a one-shot sandbox's runc is started while
// its bundle is made (oneShot), and runs the command once fed its config.
func TestRunOnceStartsRuncEarly(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	if b.runtime.name != "runc" {
		t.Skipf("the runtime is %s: only runc starts before its bundle", b.runtime.name)
	}
	var stdout bytes.Buffer
	req := backend.ExecRequest{Cmd: []string{"echo", "fed"}, Stdout: &stdout}
	spec := e.spec("early")
	spec.Command = req.Cmd
	o := &oneShot{req: req}
	sb, m, _, err := b.makeBundle(t.Context(), spec, o)
	if err != nil {
		t.Fatal(err)
	}
	if o.a == nil {
		t.Fatal("makeBundle made the bundle without starting runc")
	}
	if o.a.config != nil {
		t.Error("makeBundle returned with runc's config not given to it")
	}
	res, deleted, err := o.a.wait(t.Context(), req)
	m.runtimeDeleted = deleted
	if terr := sb.teardown(context.WithoutCancel(t.Context()), m); terr != nil {
		t.Error(terr)
	}
	if err != nil || res.ExitCode != 0 || stdout.String() != "fed\n" {
		t.Errorf("exit %d, %v, stdout %q: want 0 and fed", res.ExitCode, err, stdout.String())
	}
}
