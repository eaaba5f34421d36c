package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

func TestSelf(t *testing.T) {
	start, err := StartTime(os.Getpid())
	if err != nil || start == 0 {
		t.Fatalf("StartTime(self) = %d, %v", start, err)
	}
	if !Alive(os.Getpid(), start) {
		t.Error("Alive(self, start) = false")
	}
	if Alive(os.Getpid(), start+1) {
		t.Error("Alive with a different start time = true: a reused PID would pass for the recorded process")
	}
}

func TestFindAndKillByEnv(t *testing.T) {
	cmd := exec.Command("sleep", "300")
	cmd.Env = append(os.Environ(), "PROCFS_TEST_MARK=x1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	pid := cmd.Process.Pid
	if got := FindByEnv("PROCFS_TEST_MARK", "x1"); !slices.Contains(got, pid) {
		t.Fatalf("FindByEnv = %v, want it to contain %d", got, pid)
	}
	if got := FindByEnv("PROCFS_TEST_MARK", "x"); slices.Contains(got, pid) {
		t.Fatalf("FindByEnv matched a prefix of the value")
	}
	if left := KillByEnv("PROCFS_TEST_MARK", "x1"); left != 0 {
		t.Fatalf("KillByEnv left %d processes", left)
	}
	<-done
	if Alive(pid, 0) {
		t.Error("process still alive after KillByEnv")
	}
}
