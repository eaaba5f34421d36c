package owner

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

func TestSelfIsAlive(t *testing.T) {
	s := Self()
	host, pid, start, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.Hostname(); host != want || pid != os.Getpid() || start == 0 {
		t.Fatalf("Self() = %q, want %s:%d:<non-zero start>", s, want, os.Getpid())
	}
	if alive, known := Alive(s); !alive || !known {
		t.Fatalf("Alive(Self()) = %v, %v; want true, true", alive, known)
	}
}

func TestFinishedChildIsDead(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if alive, known := Alive(s); !alive || !known {
		t.Fatalf("running child: Alive(%q) = %v, %v; want true, true", s, alive, known)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if alive, known := Alive(s); alive || !known {
		t.Fatalf("finished child: Alive(%q) = %v, %v; want false, true", s, alive, known)
	}
}

func TestReusedPIDIsDead(t *testing.T) {
	// Same PID, other start time: another process got the PID.
	host, pid, start, err := Parse(Self())
	if err != nil {
		t.Fatal(err)
	}
	s := host + ":" + strconv.Itoa(pid) + ":" + strconv.FormatUint(start+1, 10)
	if alive, known := Alive(s); alive || !known {
		t.Fatalf("Alive(%q) = %v, %v; want false, true", s, alive, known)
	}
}

func TestUnknown(t *testing.T) {
	for _, s := range []string{
		"some-other-host.example:1:1",
		"",
		"garbage",
		"host:notapid:1",
		":1:2",
		"h:1",
		"h:-5:1",
	} {
		if alive, known := Alive(s); alive || known {
			t.Errorf("Alive(%q) = %v, %v; want false, false", s, alive, known)
		}
	}
}

func TestParseHostWithColon(t *testing.T) {
	host, pid, start, err := Parse("a:b:12:34")
	if err != nil || host != "a:b" || pid != 12 || start != 34 {
		t.Fatalf("Parse = %q, %d, %d, %v", host, pid, start, err)
	}
}
