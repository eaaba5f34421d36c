package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// specEnv is set in the Spec of the exec sandbox; the exec cases check that
// commands see it and that ExecRequest.Env adds to it and overrides it.
const specEnv, specEnvValue = "BT_SPEC_ENV", "from-spec"

// execCase is one row of the exec table: a request and what it must leave.
type execCase struct {
	name string
	// setup, when set, is a shell script run first in the default
	// working directory.
	setup string
	// req builds the request; info describes the sandbox.
	req func(info backend.Info) backend.ExecRequest

	// err, when set, is what Exec's error must wrap; nothing else is
	// checked then.
	err error

	exit      int
	stdout    string
	stderr    string
	truncated bool
	// check, when set, replaces the comparison of stdout and stderr.
	check func(t *testing.T, res backend.ExecResult)
}

// req returns a fixed request.
func req(r backend.ExecRequest) func(backend.Info) backend.ExecRequest {
	return func(backend.Info) backend.ExecRequest { return r }
}

func shell(script string) func(backend.Info) backend.ExecRequest {
	return req(backend.ExecRequest{Shell: script})
}

// sameDirScript prints the physical working directory, then the physical
// path of $1, so a check can compare them whatever symlinks lie on the way.
const sameDirScript = `pwd -P; cd -- "$1" && pwd -P`

func checkSameDir(t *testing.T, res backend.ExecResult) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(res.Stdout), "\n"), "\n")
	if len(lines) != 2 || lines[0] == "" || lines[0] != lines[1] {
		t.Errorf("working directory and expected directory (pwd -P of each) = %s, want two equal lines (stderr %s)",
			quote(res.Stdout), quote(res.Stderr))
	}
}

// execCases is the exec table. Some rows depend on the backend's
// capabilities.
func (s *suite) execCases() []execCase {
	allBytes := make([]byte, 0, 4*256)
	for range 4 {
		for i := range 256 {
			allBytes = append(allBytes, byte(i))
		}
	}
	large := randomBytes(8<<20, 1)
	zeros := make([]byte, 8<<20)

	// The streaming cases check writers the request made, so the row's
	// req and check share them.
	streamOut := newSyncBuffer()
	streamBoth := [2]*syncBuffer{newSyncBuffer(), newSyncBuffer()}

	cases := []execCase{
		{name: "stdout", req: shell(`printf 'hello\nworld\n'`), stdout: "hello\nworld\n"},
		{name: "stderr apart from stdout", req: shell(`echo out; echo err >&2; echo out2`), stdout: "out\nout2\n", stderr: "err\n"},
		{name: "no output", req: req(backend.ExecRequest{Cmd: []string{"true"}})},
		{name: "exit code 3 is data", req: shell(`exit 3`), exit: 3},
		{name: "exit code 255 is data", req: shell(`exit 255`), exit: 255},
		{name: "output kept on non-zero exit", req: shell(`echo partial; echo oops >&2; exit 7`), exit: 7, stdout: "partial\n", stderr: "oops\n"},
		{name: "argv exit code", req: req(backend.ExecRequest{Cmd: []string{"false"}}), exit: 1},
		{name: "killed by signal is 128+N", req: shell(`kill -KILL $$`), exit: 128 + 9},
		{
			name: "shell not found is 127",
			req:  shell(`backendtest-no-such-command`),
			exit: 127,
			check: func(t *testing.T, res backend.ExecResult) {
				if len(res.Stderr) == 0 {
					t.Error("stderr is empty, want the shell's complaint")
				}
			},
		},
		{
			name:   "shell string",
			req:    shell(`x=wor; echo "hello ${x}ld" | cat; echo $((6 * 7)); cd / && pwd`),
			stdout: "hello world\n42\n/\n",
		},
		{
			name:   "argv passed verbatim",
			req:    req(backend.ExecRequest{Cmd: []string{"printf", "%s|", "a b", "it's", `"dq"`, "$HOME", "*", ";", "\\n", "", "  x  "}}),
			stdout: `a b|it's|"dq"|$HOME|*|;|\n||  x  |`,
		},
		{
			name:   "argv is not run by a shell",
			req:    req(backend.ExecRequest{Cmd: []string{"echo", "$HOME", ";", "exit", "7", "|", "cat"}}),
			stdout: "$HOME ; exit 7 | cat\n",
		},
		{
			name: "env",
			req: req(backend.ExecRequest{
				Cmd: []string{"sh", "-c", `printf '%s|%s' "$BT_A" "$BT_B"`},
				Env: map[string]string{"BT_A": "one", "BT_B": "two words = 'x' $y"},
			}),
			stdout: `one|two words = 'x' $y`,
		},
		{
			name: "env adds to the sandbox environment",
			req: req(backend.ExecRequest{
				Shell: `printf '%s|%s|%s\n' "$BT_SPEC_ENV" "$BT_A" "${PATH:+path set}"`,
				Env:   map[string]string{"BT_A": "one"},
			}),
			stdout: specEnvValue + "|one|path set\n",
		},
		{
			name: "env overrides spec env",
			req: req(backend.ExecRequest{
				Shell: `echo "$BT_SPEC_ENV"`,
				Env:   map[string]string{specEnv: "from-request"},
			}),
			stdout: "from-request\n",
		},
		{
			name: "workdir default is Info.WorkDir",
			req: func(info backend.Info) backend.ExecRequest {
				return backend.ExecRequest{Cmd: []string{"sh", "-c", sameDirScript, "sh", info.WorkDir}}
			},
			check: checkSameDir,
		},
		{
			name:  "workdir explicit",
			setup: `mkdir -p bt-workdir`,
			req: func(info backend.Info) backend.ExecRequest {
				dir := path.Join(info.WorkDir, "bt-workdir")
				return backend.ExecRequest{Cmd: []string{"sh", "-c", sameDirScript, "sh", dir}, WorkDir: dir}
			},
			check: func(t *testing.T, res backend.ExecResult) {
				checkSameDir(t, res)
				if !strings.HasSuffix(string(res.Stdout), "/bt-workdir\n") {
					t.Errorf("stdout = %s, want the bt-workdir directory", quote(res.Stdout))
				}
			},
		},
		{
			name:   "stdin",
			req:    req(backend.ExecRequest{Cmd: []string{"cat"}, Stdin: strings.NewReader("line one\nline two\n")}),
			stdout: "line one\nline two\n",
		},
		{
			name: "stdin and stdout are binary clean",
			req:  req(backend.ExecRequest{Cmd: []string{"cat"}, Stdin: bytes.NewReader(allBytes)}),
			check: func(t *testing.T, res backend.ExecResult) {
				checkBytes(t, "stdout", res.Stdout, allBytes)
			},
		},
		{
			// The timeout turns a hang (stdin never closed) into a failure.
			name: "no stdin reads as empty",
			req:  req(backend.ExecRequest{Cmd: []string{"cat"}, Timeout: 30 * time.Second}),
		},
		{
			name: "large output",
			req:  req(backend.ExecRequest{Cmd: []string{"head", "-c", strconv.Itoa(len(zeros)), "/dev/zero"}, OutputLimit: 16 << 20}),
			check: func(t *testing.T, res backend.ExecResult) {
				checkBytes(t, "stdout", res.Stdout, zeros)
			},
		},
		{
			name: "large stdin round trip",
			req:  req(backend.ExecRequest{Cmd: []string{"cat"}, Stdin: bytes.NewReader(large), OutputLimit: -1}),
			check: func(t *testing.T, res backend.ExecResult) {
				checkBytes(t, "stdout", res.Stdout, large)
			},
		},
		{
			name:      "output cap",
			req:       req(backend.ExecRequest{Shell: `yes | head -c 5000`, OutputLimit: 1000}),
			truncated: true,
			stdout:    string(yes(1000)),
		},
		{
			name:      "output cap on stderr",
			req:       req(backend.ExecRequest{Shell: `echo out; yes | head -c 5000 >&2`, OutputLimit: 1000}),
			truncated: true,
			stdout:    "out\n",
			stderr:    string(yes(1000)),
		},
		{
			name:      "default output cap",
			req:       shell(fmt.Sprintf(`yes | head -c %d`, backend.DefaultOutputLimit+1000)),
			truncated: true,
			check: func(t *testing.T, res backend.ExecResult) {
				checkBytes(t, "stdout", res.Stdout, yes(backend.DefaultOutputLimit))
			},
		},
		{
			// 200 MiB through a 4 KiB cap: the command must run to the end
			// (its output drained, not blocked) and only the cap be kept.
			name:      "output cap on a flood",
			req:       req(backend.ExecRequest{Shell: `yes | head -c 209715200; echo done >&2`, OutputLimit: 4096}),
			truncated: true,
			check: func(t *testing.T, res backend.ExecResult) {
				checkBytes(t, "stdout", res.Stdout, yes(4096))
				checkOutput(t, "stderr", res.Stderr, "done\n")
			},
		},
		{
			name: "stdout writer",
			req: req(backend.ExecRequest{
				Shell:  `echo out; echo err >&2`,
				Stdout: streamOut,
			}),
			check: func(t *testing.T, res backend.ExecResult) {
				if res.Stdout != nil {
					t.Errorf("result Stdout = %s, want nil when a writer is given", quote(res.Stdout))
				}
				checkOutput(t, "Stdout writer", streamOut.Bytes(), "out\n")
				checkOutput(t, "stderr", res.Stderr, "err\n")
			},
		},
		{
			name: "stdout and stderr writers",
			req: req(backend.ExecRequest{
				Shell:  `echo out; echo err >&2; yes | head -c 100000`,
				Stdout: streamBoth[0],
				Stderr: streamBoth[1],
				// Writers are not capped.
				OutputLimit: 10,
			}),
			check: func(t *testing.T, res backend.ExecResult) {
				if res.Stdout != nil || res.Stderr != nil {
					t.Errorf("result Stdout, Stderr = %s, %s, want nil when writers are given", quote(res.Stdout), quote(res.Stderr))
				}
				checkBytes(t, "Stdout writer", streamBoth[0].Bytes(), append([]byte("out\n"), yes(100000)...))
				checkOutput(t, "Stderr writer", streamBoth[1].Bytes(), "err\n")
			},
		},
		{
			name:   "timeout not reached",
			req:    req(backend.ExecRequest{Shell: `echo fast`, Timeout: time.Minute}),
			stdout: "fast\n",
		},
		{name: "no command is invalid", req: req(backend.ExecRequest{}), err: backend.ErrInvalidConfig},
		{
			name: "both Cmd and Shell is invalid",
			req:  req(backend.ExecRequest{Cmd: []string{"true"}, Shell: "true"}),
			err:  backend.ErrInvalidConfig,
		},
	}

	// The user case: honoured when the backend can switch users, refused
	// otherwise (never silently run as the default user).
	if s.caps.User {
		cases = append(cases, execCase{
			name:   "user",
			req:    req(backend.ExecRequest{Cmd: []string{"id", "-u"}, User: "65534"}),
			stdout: "65534\n",
		})
	} else {
		cases = append(cases, execCase{
			name: "user is unsupported",
			req:  req(backend.ExecRequest{Cmd: []string{"id", "-u"}, User: "65534"}),
			err:  errors.ErrUnsupported,
		})
	}
	return cases
}

func (s *suite) testExec(t *testing.T) {
	spec := s.spec("exec")
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	spec.Env[specEnv] = specEnvValue
	sb := s.create(t, spec)
	info, err := sb.Info(testCtx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}

	for _, c := range s.execCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runExecCase(t, sb, info, c)
		})
	}
	t.Run("timeout kills the process tree", func(t *testing.T) { t.Parallel(); testTimeout(t, sb) })
	t.Run("cancel kills the process tree", func(t *testing.T) { t.Parallel(); testCancel(t, sb) })
	t.Run("context deadline", func(t *testing.T) { t.Parallel(); testDeadline(t, sb) })
	t.Run("concurrent", func(t *testing.T) { t.Parallel(); testConcurrentExec(t, sb) })
	t.Run("streams while running", func(t *testing.T) { t.Parallel(); testStreaming(t, sb) })
	t.Run("unread stdin does not block", func(t *testing.T) { t.Parallel(); testUnreadStdin(t, sb) })
}

func runExecCase(t *testing.T, sb backend.Sandbox, info backend.Info, c execCase) {
	ctx := testCtx(t)
	if c.setup != "" {
		mustExec(t, ctx, sb, backend.ExecRequest{Shell: c.setup})
	}
	req := c.req(info)
	res, err := sb.Exec(ctx, req)
	if c.err != nil {
		checkErr(t, "Exec", err, c.err)
		return
	}
	if err != nil {
		t.Fatalf("Exec(%s): %v", describe(req), err)
	}
	if res.ExitCode != c.exit {
		t.Errorf("exit code = %d, want %d (stderr %s)", res.ExitCode, c.exit, quote(res.Stderr))
	}
	if res.TimedOut {
		t.Error("TimedOut is set")
	}
	if res.Truncated != c.truncated {
		t.Errorf("Truncated = %v, want %v", res.Truncated, c.truncated)
	}
	if res.Duration <= 0 {
		t.Errorf("Duration = %v, want > 0", res.Duration)
	}
	if c.check != nil {
		c.check(t, res)
		return
	}
	checkOutput(t, "stdout", res.Stdout, c.stdout)
	checkOutput(t, "stderr", res.Stderr, c.stderr)
}

// testTimeout runs a process tree that would live 30 s under a 1 s timeout.
func testTimeout(t *testing.T, sb backend.Sandbox) {
	start := time.Now()
	res, err := sb.Exec(testCtx(t), backend.ExecRequest{Shell: treeScript + "; echo before; wait", Timeout: time.Second})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Exec: %v (a timeout is data, not an error)", err)
	}
	if elapsed > 10*time.Second {
		t.Errorf("Exec returned after %v; the timeout was 1 s", elapsed.Round(time.Millisecond))
	}
	if res.ExitCode != backend.TimeoutExitCode || !res.TimedOut {
		t.Errorf("exit code, TimedOut = %d, %v; want %d, true", res.ExitCode, res.TimedOut, backend.TimeoutExitCode)
	}
	pids := parsePIDs(res.Stdout)
	if !strings.HasSuffix(string(res.Stdout), "\nbefore\n") || pids == nil {
		t.Errorf("stdout = %s, want the output printed before the timeout (pids line, then before)", quote(res.Stdout))
	}
	checkGone(t, sb, pids)
}

// startTree starts treeScript followed by wait in a goroutine, with ctx, and
// waits until its pids line arrives. done receives Exec's outcome.
func startTree(t *testing.T, ctx context.Context, sb backend.Sandbox) (pids []string, done <-chan execOutcome) {
	t.Helper()
	out := newSyncBuffer()
	ch := make(chan execOutcome, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: treeScript + "; wait", Stdout: out})
		ch <- execOutcome{res, err}
	}()
	line, ok := out.waitLine("pids ", time.Minute, finished)
	if !ok {
		select {
		case o := <-ch:
			t.Fatalf("Exec ended (exit code %d, error %v) without writing the pids line to the Stdout writer (got %s)",
				o.res.ExitCode, o.err, quote(out.Bytes()))
		default:
			t.Fatalf("the command's first line did not reach the Stdout writer within a minute (got %s)", quote(out.Bytes()))
		}
	}
	return parsePIDs([]byte(line + "\n")), ch
}

type execOutcome struct {
	res backend.ExecResult
	err error
}

func testCancel(t *testing.T, sb backend.Sandbox) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	pids, done := startTree(t, ctx, sb)
	cancel()
	select {
	case o := <-done:
		if !errors.Is(o.err, context.Canceled) {
			t.Errorf("Exec after cancel: result %+v, error %v; want an error wrapping context.Canceled", o.res, o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return within 10 s of cancelling its context (the command sleeps 30 s)")
	}
	checkGone(t, sb, pids)
}

func testDeadline(t *testing.T, sb backend.Sandbox) {
	ctx, cancel := context.WithTimeout(testCtx(t), time.Second)
	defer cancel()
	start := time.Now()
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sleep", "30"}})
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Exec returned after %v; its context's deadline was 1 s", elapsed.Round(time.Millisecond))
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Exec: result %+v, error %v; want an error wrapping context.DeadlineExceeded", res, err)
	}
}

func testConcurrentExec(t *testing.T, sb backend.Sandbox) {
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			n := strconv.Itoa(i)
			res, err := sb.Exec(ctx, backend.ExecRequest{
				Cmd: []string{"sh", "-c", `echo "$1 $BT_I"; echo "err $1" >&2`, "sh", n},
				Env: map[string]string{"BT_I": n},
			})
			switch {
			case err != nil:
				t.Errorf("exec %d: %v", i, err)
			case res.ExitCode != 0 || string(res.Stdout) != n+" "+n+"\n" || string(res.Stderr) != "err "+n+"\n":
				t.Errorf("exec %d: exit code %d, stdout %s, stderr %s; want 0, %q, %q",
					i, res.ExitCode, quote(res.Stdout), quote(res.Stderr), n+" "+n+"\n", "err "+n+"\n")
			}
		})
	}
	wg.Wait()
}

// testStreaming checks that a Stdout writer receives output while the
// command still runs, not when it ends.
func testStreaming(t *testing.T, sb backend.Sandbox) {
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	out := newSyncBuffer()
	done := make(chan execOutcome, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `echo first; exec sleep 30`, Stdout: out, Timeout: time.Minute})
		done <- execOutcome{res, err}
	}()
	line, ok := out.waitLine("first", 30*time.Second, finished)
	cancel()
	if !ok {
		t.Errorf("the Stdout writer got %s while the command ran, want its first line before it ends", quote(out.Bytes()))
	}
	if line != "first" {
		t.Errorf("first line = %q, want %q", line, "first")
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return within 10 s of cancelling its context")
	}
}

// testUnreadStdin runs a command that never reads its stdin, a reader that
// never ends: Exec must return when the command exits.
func testUnreadStdin(t *testing.T, sb backend.Sandbox) {
	pr, pw := io.Pipe()
	defer pw.Close()
	done := make(chan execOutcome, 1)
	go func() {
		res, err := sb.Exec(testCtx(t), backend.ExecRequest{Shell: `echo done`, Stdin: pr})
		done <- execOutcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err != nil || o.res.ExitCode != 0 || string(o.res.Stdout) != "done\n" {
			t.Errorf("Exec: exit code %d, stdout %s, error %v; want 0, %q, nil", o.res.ExitCode, quote(o.res.Stdout), o.err, "done\n")
		}
	case <-time.After(10 * time.Second):
		pw.Close()
		<-done
		t.Error("Exec waited for the end of a stdin the command never read; it must return when the command exits")
	}
}
