package attach

import (
	"context"
	"io"
	"os/exec"
	"sync/atomic"
	"testing"
)

func TestStartAndExit(t *testing.T) {
	cmd := exec.Command("sh", "-c", "cat; exit 3")
	stdin, stdout, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var kills atomic.Int32
	p := New(t.Context(), stdin, stdout, func(<-chan struct{}) { kills.Add(1) })
	go func() {
		err := cmd.Wait()
		p.Exit(cmd.ProcessState.ExitCode(), Failed(err))
	}()
	io.WriteString(p.Stdin(), "hello")
	p.Stdin().Close()
	out, err := io.ReadAll(p.Stdout())
	if err != nil || string(out) != "hello" {
		t.Fatalf("stdout %q, %v", out, err)
	}
	if code, err := p.Wait(); code != 3 || err != nil {
		t.Errorf("Wait = %d, %v; want 3, nil (an exit status is no error)", code, err)
	}
	p.Kill()
	p.Kill()
	if n := kills.Load(); n != 1 {
		t.Errorf("kill ran %d times, want once", n)
	}
}

func TestKillWhenContextEnds(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	stdin, stdout, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := New(ctx, stdin, stdout, func(<-chan struct{}) { cmd.Process.Kill() })
	go func() {
		err := cmd.Wait()
		p.Exit(-1, Failed(err))
	}()
	cancel()
	if code, err := p.Wait(); code != -1 || err != nil {
		t.Errorf("Wait = %d, %v", code, err)
	}
	if !cmd.ProcessState.Exited() && cmd.ProcessState.String() != "signal: killed" {
		t.Errorf("sleep ended as %v, want killed", cmd.ProcessState)
	}
}

func TestStartFails(t *testing.T) {
	if _, _, err := Start(exec.Command("/no/such/program")); err == nil {
		t.Fatal("Start of a missing program succeeded")
	}
}
