//go:build linux

package main_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/execframe"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// These tests run sbxd on the host (Linux); the container-side behaviour is
// covered by backends/native's tests.

var sbxd string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sbxd-test-*")
	if err != nil {
		panic(err)
	}
	sbxd = filepath.Join(dir, "sbxd")
	build := exec.Command("go", "build", "-o", sbxd, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		panic("building sbxd: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(sbxd, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

func TestExecExitCodes(t *testing.T) {
	for _, c := range []struct {
		name string
		argv []string
		code int
		out  string
	}{
		{"ok", []string{"sh", "-c", "echo hi"}, 0, "hi\n"},
		{"exit 3", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"not found", []string{"no-such-program-xyz"}, 127, ""},
		{"not executable", []string{"/etc/hostname"}, 126, ""},
		{"env marker", []string{"sh", "-c", "echo $SBX_EXEC_ID"}, 0, "m1\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, _, code := run(t, append([]string{"exec", "--id", "m1", "--"}, c.argv...)...)
			if code != c.code || out != c.out {
				t.Errorf("got code %d, out %q; want %d, %q", code, out, c.code, c.out)
			}
		})
	}
}

// --user switches to a user from /etc/passwd (needs root); a user that
// cannot be had exits 125 with a message naming it.
func TestExecUser(t *testing.T) {
	_, errOut, code := run(t, "exec", "--user", "no-such-user-xyz", "--", "true")
	if code != 125 || !strings.Contains(errOut, "no-such-user-xyz") {
		t.Errorf("unknown user: code %d, stderr %q; want 125 naming the user", code, errOut)
	}
	if os.Getuid() != 0 {
		_, errOut, code = run(t, "exec", "--user", "0", "--", "id", "-u")
		if code != 125 || !strings.Contains(errOut, "root") {
			t.Errorf("switching to root as uid %d: code %d, stderr %q; want 125 saying it needs root", os.Getuid(), code, errOut)
		}
		return
	}
	out, errOut, code := run(t, "exec", "--user", "65534:65534", "--", "sh", "-c", "id -u; id -g")
	if code != 0 || out != "65534\n65534\n" {
		t.Errorf("--user 65534:65534: code %d, out %q, stderr %q", code, out, errOut)
	}
}

func TestDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if _, errOut, code := run(t, "dial", addr, "5s"); code != 0 {
		t.Errorf("dial to a listener: code %d, stderr %q; want 0", code, errOut)
	}
	l.Close()
	if _, errOut, code := run(t, "dial", addr, "5s"); code != 1 || errOut == "" {
		t.Errorf("dial to a closed port: code %d, stderr %q; want 1 with a message", code, errOut)
	}
}

// A timeout kills the whole tree, including a child that left the process
// group with setsid, and exits 124.
func TestExecTimeoutKillsTree(t *testing.T) {
	cmd := exec.Command(sbxd, "exec", "--id", "tree-"+strconv.Itoa(os.Getpid()), "--timeout", "300ms", "--",
		"sh", "-c", "sleep 300 & echo $!; setsid sleep 301 & echo $!; wait")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var pids []int
	for len(pids) < 2 && sc.Scan() {
		pid, _ := strconv.Atoi(sc.Text())
		pids = append(pids, pid)
	}
	for sc.Scan() {
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 124 {
		t.Errorf("exit code %d, want 124", code)
	}
	for _, pid := range pids {
		if procfs.Alive(pid, 0) {
			t.Errorf("pid %d survived the timeout", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// sbxd kill ends every process with the marker, as a client cancel does.
func TestKill(t *testing.T) {
	id := "kill-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command(sbxd, "exec", "--id", id, "--", "sh", "-c", "sleep 300 & echo $!; wait")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Scan()
	child, _ := strconv.Atoi(sc.Text())
	if _, _, code := run(t, "kill", id); code != 0 {
		t.Fatalf("sbxd kill exited %d", code)
	}
	cmd.Wait()
	if procfs.Alive(child, 0) {
		t.Errorf("child %d survived sbxd kill", child)
		syscall.Kill(child, syscall.SIGKILL)
	}
}

// exec forwards SIGTERM to the command's group.
func TestExecForwardsSignals(t *testing.T) {
	cmd := exec.Command(sbxd, "exec", "--", "sh", "-c", "trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Scan()
	if sc.Text() != "ready" {
		t.Fatalf("got %q", sc.Text())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	sc.Scan()
	if sc.Text() != "got-term" {
		t.Errorf("got %q, want got-term", sc.Text())
	}
	for sc.Scan() {
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Errorf("exit code %d, want 5", code)
	}
}

// init with a command exits with the command's status; without one it
// stays up until SIGTERM.
func TestInit(t *testing.T) {
	if _, _, code := run(t, "init", "--", "sh", "-c", "exit 9"); code != 9 {
		t.Errorf("init -- sh -c 'exit 9' exited %d", code)
	}
	cmd := exec.Command(sbxd, "init")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	// Signal until it is handled: the first may arrive before sbxd has
	// installed its handler (then it dies of it, which ends the test too).
	for {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
			if !cmd.ProcessState.Exited() && cmd.ProcessState.ExitCode() != -1 {
				t.Errorf("init: %v", cmd.ProcessState)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A caller that reads slowly gets all of a command's output, however short
// the grace period: what the pipes still hold when it ends is passed on.
func TestExecSlowReaderLosesNothing(t *testing.T) {
	const size = 3_000_000
	cmd := exec.Command(sbxd, "exec", "--grace", "1ms", "--", "sh", "-c", fmt.Sprintf("head -c %d /dev/zero", size))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var n int
	buf := make([]byte, 4096)
	for {
		k, err := out.Read(buf)
		n += k
		if err != nil {
			break
		}
		time.Sleep(200 * time.Microsecond) // a slow reader, not a wait for anything
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Errorf("read %d bytes, want %d", n, size)
	}
}

// A background child that keeps stdout open does not hold the command's
// end back beyond the grace period.
func TestExecBackgroundChildDoesNotHold(t *testing.T) {
	cmd := exec.Command(sbxd, "exec", "--", "sh", "-c", "sleep 300 & echo $!; echo done")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("sbxd exec still runs 60 s after its command ended (a background child holds stdout)")
	}
	lines := strings.Fields(stdout.String())
	if len(lines) != 2 || lines[1] != "done" {
		t.Fatalf("output %q", stdout.String())
	}
	if pid, err := strconv.Atoi(lines[0]); err == nil {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// exec --framed: the command's input arrives through stdin frames and its
// EOF at the close frame; stdout, stderr and the exit code come back
// framed; and sbxd, after the exit frame, stays until its stdin closes, so
// its exit cannot cut off output still on its way to the caller.
func TestExecFramed(t *testing.T) {
	cmd := exec.Command(sbxd, "exec", "--framed", "--linger", "1h", "--",
		"sh", "-c", "cat; echo to-stderr >&2; exit 7")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var unframed strings.Builder
	cmd.Stderr = &unframed
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fw := execframe.NewWriter(stdin)
	fw.Frame(execframe.KindStdin, []byte("echoed "))
	fw.Frame(execframe.KindStdin, []byte("input"))
	fw.Frame(execframe.KindStdinClose, nil) // cat ends here
	var out, errOut bytes.Buffer
	code, err := execframe.Demux(stdout, &out, &errOut)
	if err != nil || code != 7 {
		t.Fatalf("Demux = %d, %v; want exit code 7", code, err)
	}
	if out.String() != "echoed input" || errOut.String() != "to-stderr\n" || unframed.Len() != 0 {
		t.Errorf("stdout %q, stderr %q, unframed stderr %q", out.String(), errOut.String(), unframed.String())
	}
	// Still there after the exit frame: the caller has not closed stdin.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("sbxd exited before its stdin closed: %v", err)
	case <-time.After(time.Second): // a bounded look for an exit that must not come
	}
	stdin.Close()
	if err := <-exited; cmd.ProcessState.ExitCode() != 7 {
		t.Errorf("sbxd exec --framed exited %d (%v), want 7", cmd.ProcessState.ExitCode(), err)
	}

	// A command that cannot start still ends with an exit frame.
	cmd = exec.Command(sbxd, "exec", "--framed", "--linger", "1ms", "--", "/no/such/command")
	cmd.Stdin = strings.NewReader("")
	var raw bytes.Buffer
	cmd.Stdout = &raw
	cmd.Run()
	code, err = execframe.Demux(&raw, io.Discard, &errOut)
	if err != nil || code != 127 {
		t.Errorf("a missing command: Demux = %d, %v; want 127", code, err)
	}
}
