package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// A child that drops the marker (env -i) and its session (setsid) is still
// killed: it is a descendant of a marked process.
func TestKillByEnvReachesUnmarkedDescendants(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command("sh", "-c", `setsid env -i sh -c 'echo $$ > "$1"; exec sleep 207' sh "$1" & sleep 100`, "sh", pidFile)
	cmd.Env = append(os.Environ(), "PROCFS_TEST_MARK=tree")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go cmd.Wait()
	var escaped int
	deadline := time.Now().Add(10 * time.Second)
	for escaped == 0 {
		if data, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(data), "\n") {
			escaped, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		} else if time.Now().After(deadline) {
			t.Fatal("the child did not start")
		} else {
			time.Sleep(5 * time.Millisecond)
		}
	}
	if slices.Contains(FindByEnv("PROCFS_TEST_MARK", "tree"), escaped) {
		t.Fatal("the child kept the marker: the test proves nothing")
	}
	if left := KillByEnv("PROCFS_TEST_MARK", "tree"); left != 0 {
		t.Fatalf("KillByEnv left %d processes", left)
	}
	deadline = time.Now().Add(2 * time.Second)
	for Alive(escaped, 0) {
		if time.Now().After(deadline) {
			syscall.Kill(escaped, syscall.SIGKILL)
			t.Fatalf("the setsid env -i child %d survived", escaped)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
