package outpipe

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
)

// slowWriter stalls the copy, as a starved goroutine would be.
type slowWriter struct{ syncbuf.Buffer }

func (s *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(50 * time.Millisecond)
	return s.Buffer.Write(p)
}

// Everything the command wrote before it exited arrives, even when the copy
// is slower than the grace period (os/exec's WaitDelay would cut it).
func TestNothingLostWhenTheCopyIsSlow(t *testing.T) {
	var dst slowWriter
	p, err := New(&dst)
	if err != nil {
		t.Fatal(err)
	}
	// Several writes, so the copy needs several slow Writes.
	cmd := exec.Command("sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.01; done")
	runTo(t, p, cmd)
	Finish(time.Millisecond, p)
	if got := strings.Count(dst.String(), "line "); got != 8 {
		t.Errorf("got %d lines, want 8:\n%s", got, dst.String())
	}
}

// A background child holding the pipe does not hold Finish up past the
// grace period.
func TestBackgroundChildDoesNotBlock(t *testing.T) {
	var dst syncbuf.Buffer
	p, err := New(&dst)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "echo before; sleep 30 & echo after")
	runTo(t, p, cmd)
	done := make(chan struct{})
	go func() { Finish(50*time.Millisecond, p); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Finish waited for the background child")
	}
	if got := dst.String(); got != "before\nafter\n" {
		t.Errorf("output %q", got)
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the background sleep
}

// Settle waits for everything the command wrote, however slow the copy,
// and the copy goes on for a background child that writes afterwards.
func TestSettleWaitsForTheCommandAndKeepsCopying(t *testing.T) {
	var dst slowWriter
	p, err := New(&dst)
	if err != nil {
		t.Fatal(err)
	}
	// The background child writes only once a file appears.
	flag := t.TempDir() + "/go"
	cmd := exec.Command("sh", "-c", `for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.01; done
(while [ ! -e `+flag+` ]; do sleep 0.01; done; echo late) &
exit 0`)
	runTo(t, p, cmd)
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	p.Settle(time.Millisecond)
	if got := strings.Count(dst.String(), "line "); got != 8 {
		t.Fatalf("after Settle: %d lines, want 8:\n%s", got, dst.String())
	}
	select {
	case <-p.Done():
		t.Fatal("the copy ended although a background child holds the pipe")
	default:
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the copy did not end when the background child exited")
	}
	if !strings.HasSuffix(dst.String(), "late\n") {
		t.Errorf("the background child's output is missing: %q", dst.String())
	}
}

// runTo runs cmd, in a process group of its own, with its stdout on p, and
// waits for it to exit.
func runTo(t *testing.T, p *Pipe, cmd *exec.Cmd) {
	t.Helper()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = p.W()
	if err := cmd.Start(); err != nil {
		p.Close()
		t.Fatal(err)
	}
	p.Started()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}
