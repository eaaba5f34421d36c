package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sbxBinary builds sbx once for the tests that need a real process, with
// sbx-full next to it (what sbx runs in its place for the k8s backend and
// sbx serve), as go install puts them.
var sbxBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sbx-bin-")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"sbx", FullName} {
		pkg := "github.com/sandboxkit/sandboxkit/cmd/" + name
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput(); err != nil {
			return "", &buildError{err, string(out)}
		}
	}
	return filepath.Join(dir, "sbx"), nil
})

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "go build: " + e.err.Error() + "\n" + e.out }

func sbxBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the sbx binary")
	}
	bin, err := sbxBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func exitStatus(t *testing.T, err error) int {
	t.Helper()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("want an exit status, got %v", err)
	}
	return ee.ExitCode()
}

// A closed terminal (SIGHUP) and SIGTERM stop sbx run like Ctrl-C: the
// command is killed, the sandbox removed, and the exit status is 128 + the
// signal's number.
func TestStopSignalsCleanUp(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGTERM} {
		pidFile := filepath.Join(t.TempDir(), "pid")
		cmd := exec.Command(bin, "run", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 30`, "sh", pidFile)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids := readPIDs(t, pidFile)
		_ = cmd.Process.Signal(sig)
		if got := exitStatus(t, cmd.Wait()); got != 128+int(sig) {
			t.Errorf("%v: exit status %d, want %d", sig, got, 128+int(sig))
		}
		expectGone(t, pids)
		if got := listSandboxes(t); len(got) != 0 {
			t.Errorf("%v: sandboxes left: %+v", sig, got)
		}
	}
}

// A stop signal sbx was started with ignored stays ignored (nohup's
// SIGHUP): a hangup changes nothing, and the SIGTERM after it stops sbx
// run as SIGTERM does (exit status 143, the sandbox removed).
func TestIgnoredHangupStaysIgnored(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	nohup, err := exec.LookPath("nohup")
	if err != nil {
		t.Skip("no nohup on PATH")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	// nohup execs sbx with SIGHUP ignored (its stdout, no terminal, stays).
	cmd := exec.Command(nohup, bin, "run", "--", "sh", "-c", `echo $$ > "$1"; exec sleep 30`, "sh", pidFile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := readPIDs(t, pidFile)
	_ = cmd.Process.Signal(syscall.SIGHUP)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if got := exitStatus(t, cmd.Wait()); got != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d, want %d (SIGTERM's; a handled SIGHUP gives %d)", got, 128+int(syscall.SIGTERM), 128+int(syscall.SIGHUP))
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left: %+v", got)
	}
}

// A SIGPIPE does not stop sbx: the kernel raises it for a write to any
// closed pipe or socket (a backend's stream, an agent gone), not only
// stdout's, whose reader going away stops sbx by other means (above). It
// is caught, not ignored, so the commands sbx starts still die of it.
func TestSIGPIPEIsNoStopSignal(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out strings.Builder
	cmd := exec.Command(bin, "run", "--", "sh", "-c", `echo $$ > "$1"; sleep 1; grep SigIgn /proc/self/status`, "sh", pidFile)
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readPIDs(t, pidFile)
	_ = cmd.Process.Signal(syscall.SIGPIPE)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sbx run stopped by a SIGPIPE: %v", err)
	}
	field, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "SigIgn:")
	mask, err := strconv.ParseUint(strings.TrimSpace(field), 16, 64)
	if !ok || err != nil {
		t.Fatalf("the command's output %q", out.String())
	}
	if mask&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("the command sbx ran ignores SIGPIPE (SigIgn %s)", strings.TrimSpace(field))
	}
}

// startReadingOneLine starts cmd with its stdout on a pipe, reads one line
// and closes the pipe, as `| head -1` does.
func startReadingOneLine(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatalf("reading the first line: %v", err)
	}
	out.Close()
}

// A reader that goes away (sbx ... -- yes | head -1) stops the command
// inside the sandbox, instead of leaving it spinning: sbx run also removes
// the sandbox, sbx exec leaves it; both exit 141 as a shell reports SIGPIPE.
func TestClosedStdoutStopsTheCommand(t *testing.T) {
	bin := sbxBin(t)
	setup(t)

	pidFile := filepath.Join(t.TempDir(), "run-pid")
	cmd := exec.Command(bin, "run", "--", "sh", "-c", `echo $$ > "$1"; exec yes`, "sh", pidFile)
	startReadingOneLine(t, cmd)
	pids := readPIDs(t, pidFile)
	if got := exitStatus(t, cmd.Wait()); got != exitBrokenPipe {
		t.Errorf("sbx run | head -1: exit status %d, want %d", got, exitBrokenPipe)
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left after sbx run | head -1: %+v", got)
	}

	r := sbx(t, "run", "--keep", "--", "true")
	r.expect(t, 0)
	id := strings.TrimSpace(r.stderr)
	defer sbx(t, "rm", id)
	pidFile = filepath.Join(t.TempDir(), "exec-pid")
	cmd = exec.Command(bin, "exec", id, "--", "sh", "-c", `echo $$ > "$1"; exec yes`, "sh", pidFile)
	startReadingOneLine(t, cmd)
	pids = readPIDs(t, pidFile)
	if got := exitStatus(t, cmd.Wait()); got != exitBrokenPipe {
		t.Errorf("sbx exec | head -1: exit status %d, want %d", got, exitBrokenPipe)
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 1 {
		t.Errorf("sbx exec must leave its sandbox: %+v", got)
	}
}

// A command that prints once and then only waits is stopped as soon as the
// reader goes, not at its next write (which may never come).
func TestClosedStdoutStopsASilentCommand(t *testing.T) {
	bin := sbxBin(t)
	setup(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command(bin, "run", "--", "sh", "-c", `echo $$ > "$1"; echo hi; exec sleep 120`, "sh", pidFile)
	startReadingOneLine(t, cmd)
	pids := readPIDs(t, pidFile)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if got := exitStatus(t, err); got != exitBrokenPipe {
			t.Errorf("exit status %d, want %d", got, exitBrokenPipe)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatal("sbx run kept running for 30 s after its reader went away")
	}
	expectGone(t, pids)
	if got := listSandboxes(t); len(got) != 0 {
		t.Errorf("sandboxes left: %+v", got)
	}
}
