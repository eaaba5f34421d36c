package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/internal/pty"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
	"github.com/sandboxkit/sandboxkit/internal/termbuf"
)

// ttySession is sbx running on a pseudo-terminal, as in a user's terminal
// window: the terminal is its controlling terminal, so resizing it sends
// sbx SIGWINCH.
type ttySession struct {
	t      *testing.T
	ctx    context.Context
	master *os.File
	tty    string // the terminal's name
	cmd    *exec.Cmd
	out    *termbuf.Buffer
	before *unix.Termios
}

func startTTY(t *testing.T, args ...string) *ttySession {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	if err := pty.SetSize(master, 24, 80); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sbxBin(t), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	// Only sbx holds the terminal now: its output ends when sbx does.
	tty.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &ttySession{t: t, ctx: ctx, master: master, tty: tty.Name(), cmd: cmd, out: termbuf.Pump(master, 1<<20), before: before}
}

// prompt waits for a shell's prompt (busybox's ash asks the terminal
// where its cursor is after it: ESC [ 6 n). A terminal size set just
// after the shell started (k8s applies the first size through its resize
// channel) makes ash draw the prompt again and clear the rest of the
// screen: ESC [ J.
func (s *ttySession) prompt() {
	s.t.Helper()
	if r := s.out.Read(s.ctx, regexp.MustCompile(`[$#] (\x1b\[6n|\x1b\[J)?$`), 0); !r.Matched {
		s.t.Fatalf("no shell prompt; got %q", r.Output)
	}
}

// expect types typed and waits for want in the output.
func (s *ttySession) expect(typed, want string) string {
	s.t.Helper()
	if typed != "" {
		if _, err := io.WriteString(s.master, typed); err != nil {
			s.t.Fatalf("typing %q: %v", typed, err)
		}
	}
	got, ok := s.out.WaitFor(s.ctx, want)
	if !ok {
		s.t.Fatalf("typed %q: no %q in the output; got %q", typed, want, got)
	}
	return got
}

// wait waits for sbx to exit and checks its status and that the terminal's
// settings were put back (raw mode undone).
func (s *ttySession) wait(code int) {
	s.t.Helper()
	err := s.cmd.Wait()
	got := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			s.t.Fatal(err)
		}
		got = ee.ExitCode()
	}
	if got != code {
		s.t.Errorf("sbx exited %d, want %d; output %q", got, code, s.out.Read(context.Background(), nil, 100*time.Millisecond).Output)
	}
	tty, err := os.OpenFile(s.tty, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		s.t.Fatal(err)
	}
	defer tty.Close()
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		s.t.Fatal(err)
	}
	if *after != *s.before {
		s.t.Errorf("the terminal's settings were not restored:\nbefore %+v\nafter  %+v", *s.before, *after)
	}
}

// shellSession drives an interactive shell through sbx: the size it sees,
// a resize that reaches the foreground program (SIGWINCH), Ctrl-C to that
// program, and the exit code coming back as sbx's.
func shellSession(t *testing.T, args ...string) {
	s := startTTY(t, args...)
	s.prompt()
	s.expect("echo sz-''$(stty size)-''end\r", "sz-24 80-end")
	s.expect(`sh -c 'trap "echo got-''winch" WINCH; echo wai''ting; while :; do sleep 0.1; done'`+"\r", "waiting")
	if err := pty.SetSize(s.master, 33, 101); err != nil {
		t.Fatal(err)
	}
	s.expect("", "got-winch")
	s.expect("\x03", "\n")
	s.expect("echo after-''$(stty size)-''ctrlc\r", "after-33 101-ctrlc")
	s.expect("exit 7\r", "exit 7")
	s.wait(7)
}

func TestShellLocal(t *testing.T) {
	setup(t)
	id := keptSandbox(t)
	t.Run("shell", func(t *testing.T) { shellSession(t, "shell", id) })
	t.Run("exec -it", func(t *testing.T) { shellSession(t, "exec", "-it", id, "--", "sh") })
	t.Run("run -it", func(t *testing.T) { shellSession(t, "run", "-it", "--", "sh") })
	t.Run("no detaching", func(t *testing.T) {
		// The local backend's terminals end with sbx: the detach keys are
		// typed through, and --attach and --list say why they cannot work.
		s := startTTY(t, "shell", id, "--", "sh", "-c", "echo rea''dy; exec cat -v")
		s.expect("", "ready")
		// Ctrl-Q reaches the sandbox's terminal, which takes it as XON.
		s.expect("\x10\x11x\r", "^Px")
		s.expect("\x04", "")
		s.wait(0)
		r := sbx(t, "shell", "--list", id)
		r.expect(t, 1)
		if !strings.Contains(r.stderr, "end with their client") {
			t.Errorf("--list on local: %q", r.stderr)
		}
		a := startTTY(t, "shell", "--attach", "abc", id)
		a.expect("", "end with their client")
		a.wait(1)
	})
	t.Run("not a terminal", func(t *testing.T) {
		r := sbx(t, "shell", id)
		r.expect(t, 1)
		if !regexp.MustCompile(`not a terminal`).MatchString(r.stderr) {
			t.Errorf("sbx shell with piped input: %q", r.stderr)
		}
	})
}

// keptSandbox makes a sandbox with sbx run --keep (removed when the test
// ends if the test did not).
func keptSandbox(t *testing.T) string {
	t.Helper()
	kept := sbx(t, "run", "--keep", "--", "true")
	kept.expect(t, 0)
	lines := strings.Split(strings.TrimSpace(kept.stderr), "\n")
	id := lines[len(lines)-1]
	t.Cleanup(func() { sbx(t, "rm", id) })
	return id
}

// detachAttach detaches from a shell in sandbox id, lists it, attaches to
// it from another sbx (its output replayed), and checks that a stopped
// sbx (its terminal closed: SIGHUP) leaves no program running.
func detachAttach(t *testing.T, id string) {
	s := startTTY(t, "shell", id)
	s.prompt()
	s.expect("echo before-''detach\r", "before-detach")
	out := s.expect("\x10\x11", "--attach ")
	s.wait(0)
	m := regexp.MustCompile(`detached from terminal (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no terminal ID in %q", out)
	}
	term := m[1]
	if list := must(t, "shell", "--list", id); !regexp.MustCompile(term + `\s+running`).MatchString(list) {
		t.Errorf("sbx shell --list after detaching:\n%s", list)
	}

	a := startTTY(t, "shell", "--attach", term, id)
	a.expect("", "before-detach")
	a.expect("echo after-''attach\r", "after-attach")
	a.expect("exit 4\r", "exit 4")
	a.wait(4)

	k := startTTY(t, "shell", id, "--", "sh", "-c", "echo rea''dy; exec sleep 600")
	k.expect("", "ready")
	k.cmd.Process.Signal(syscall.SIGHUP)
	k.wait(128 + int(syscall.SIGHUP))
	var list []struct {
		Cmd     []string
		Running bool
	}
	if err := json.Unmarshal([]byte(must(t, "--json", "shell", "--list", id)), &list); err != nil {
		t.Fatal(err)
	}
	for _, l := range list {
		if l.Running {
			t.Errorf("still running after its sbx was stopped: %v", l.Cmd)
		}
	}
}

// Where the sandbox runs its own agent (lite; native and remotedocker as
// root), a terminal outlives sbx (see detachAttach). On k8s the agent is
// the one sbx starts: the shell works, without detaching.
func TestShellBackends(t *testing.T) {
	for _, target := range []struct {
		name       string
		make       func(t *testing.T) chaosTarget
		detachable bool
	}{
		{"lite", requireLite(chaosLite), true},
		{"native", chaosNative, true},
		{"remotedocker", shellRemote, true},
		{"k8s", chaosK8s, false},
		{"opensandbox", shellOpenSandbox, false},
	} {
		t.Run(target.name, func(t *testing.T) {
			setup(t)
			ct := target.make(t)
			t.Setenv("SBX_CONFIG", ct.config)
			var before []string
			if ct.inventory != nil {
				before = ct.inventory(t)
			}
			id := keptSandbox(t)
			shellSession(t, "shell", id)
			if target.detachable {
				detachAttach(t, id)
			}
			sbx(t, "rm", id).expect(t, 0)
			if ct.inventory == nil {
				return
			}
			if left := leftBehind(t, before, ct.inventory); len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// shellOpenSandbox is a config for the in-process OpenSandbox server (its
// execd has the WebSocket PTY sessions of newer execd versions).
func shellOpenSandbox(t *testing.T) chaosTarget {
	const key = "sbx-shell-test-key"
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if v := srv.Violations(); len(v) > 0 {
			t.Errorf("protocol violations seen by the in-process server: %q", v)
		}
		srv.Close()
	})
	t.Setenv("OPEN_SANDBOX_API_KEY", key)
	return chaosTarget{config: writeConfig(t, `
[sandbox]
backend = "opensandbox"
default_image = "ubuntu:24.04"
[sandbox.opensandbox]
domain = "`+srv.Domain()+`"
[sandbox.sandboxes.main]
`)}
}

// shellRemote is the remote-host harness's config (no inventory: the
// remotedocker tests check leftovers on the remote engine).
func shellRemote(t *testing.T) chaosTarget {
	h := remotetest.Get(t)
	return chaosTarget{config: remoteConfig(t, h)}
}
