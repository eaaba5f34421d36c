package cgwarm

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Mount lines as a cgroup v1 host with systemd's named hierarchy and the
// unified one (this project's CI machines) shows them.
const hybridMounts = `25 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 33 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
39 33 0:34 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
40 33 0:35 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,pids
`

const hybridCgroups = `12:pids:/user.slice/user-0.slice
4:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-0.slice/session-1.scope
0::/user.slice/user-0.slice/session-1.scope
`

func TestOwnProcsFile(t *testing.T) {
	for _, c := range []struct {
		name, mounts, cgroups, want string
	}{
		{"hybrid: systemd's named hierarchy, which has no controller", hybridMounts, hybridCgroups,
			"/sys/fs/cgroup/systemd/user.slice/user-0.slice/session-1.scope/cgroup.procs"},
		{"hybrid without the named hierarchy: the v2 one", hybridMounts,
			"12:pids:/a\n0::/b\n", "/sys/fs/cgroup/unified/b/cgroup.procs"},
		{"v1 controllers only: one of them", hybridMounts,
			"4:cpu,cpuacct:/c\n", "/sys/fs/cgroup/cpu,cpuacct/c/cgroup.procs"},
		{"v2 only",
			"30 1 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			"0::/system.slice/x.service\n", "/sys/fs/cgroup/system.slice/x.service/cgroup.procs"},
		{"a mount point with a space, escaped",
			`30 1 0:26 / /mnt/cg\040two rw shared:4 - cgroup2 cgroup2 rw` + "\n",
			"0::/\n", "/mnt/cg two/cgroup.procs"},
		{"a hierarchy mounted from below its root (a container's view) is not used",
			"30 1 0:26 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/\n", ""},
		{"a controller list no mount has", hybridMounts, "7:memory:/m\n", ""},
		{"a path that climbs", hybridMounts, "1:name=systemd:/../../etc\n", ""},
		{"a mount point that is not an absolute clean path",
			"30 1 0:26 / 0 rw - cgroup2 cgroup2 rw\n31 1 0:27 / /a/../b rw - cgroup2 cgroup2 rw\n", "0::/\n", ""},
		{"no cgroup file system", "25 30 0:22 / /sys rw - sysfs sysfs rw\n", hybridCgroups, ""},
		{"nothing", "", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ownProcsFile([]byte(c.mounts), []byte(c.cgroups)); got != c.want {
				t.Errorf("ownProcsFile = %q, want %q", got, c.want)
			}
		})
	}
}

func FuzzOwnProcsFile(f *testing.F) {
	f.Add([]byte(hybridMounts), []byte(hybridCgroups))
	f.Add([]byte("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"), []byte("0::/a\n"))
	f.Add([]byte(`1 2 3 / /a\0 b - - cgroup c name=x`), []byte("1:name=x:/\n"))
	f.Fuzz(func(t *testing.T, mounts, cgroups []byte) {
		got := ownProcsFile(mounts, cgroups)
		if got == "" {
			return
		}
		if !filepath.IsAbs(got) || filepath.Base(got) != "cgroup.procs" {
			t.Fatalf("ownProcsFile = %q: not an absolute cgroup.procs path", got)
		}
		if strings.Contains(got, "/../") {
			t.Fatalf("ownProcsFile = %q: climbs out of its hierarchy", got)
		}
	})
}

// fileAt returns a path func for start naming a new empty file.
func fileAt(t *testing.T) (string, func() string) {
	p := filepath.Join(t.TempDir(), "cgroup.procs")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, func() string { return p }
}

// TestWarmsUntil: the warming writes this process's PID, polls until after
// each write, and ends when until says so (no write after).
func TestWarmsUntil(t *testing.T) {
	p, path := fileAt(t)
	var polls atomic.Int32
	stop := start(path, func() bool { return polls.Add(1) == 5 })
	deadline := time.Now().Add(10 * time.Second)
	for polls.Load() < 5 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	if n := polls.Load(); n != 5 {
		t.Fatalf("until was polled %d times, want 5", n)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat(strconv.Itoa(os.Getpid()), 5); string(data) != want {
		t.Errorf("written %q, want the PID once per poll: %q", data, want)
	}
}

// TestStopEndsWarming: stop returns once the warming has ended (no write
// after it), and may be called again.
func TestStopEndsWarming(t *testing.T) {
	_, path := fileAt(t)
	var polls atomic.Int32
	stop := start(path, func() bool { polls.Add(1); return false })
	for polls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	stop()
	n := polls.Load()
	time.Sleep(5 * interval)
	if m := polls.Load(); m != n {
		t.Errorf("until was polled %d more times after stop returned", m-n)
	}
	stop()
}

// TestNothingToWarmWith: no file, one that cannot be opened for writing,
// or one that refuses the write: the warming ends at once, never polling
// until.
func TestNothingToWarmWith(t *testing.T) {
	for _, p := range []string{"", t.TempDir(), "/dev/full"} {
		var polls atomic.Int32
		stop := start(func() string { return p }, func() bool { polls.Add(1); return false })
		stop()
		if n := polls.Load(); n != 0 {
			t.Errorf("%q: until was polled %d times by a warming that cannot write", p, n)
		}
	}
}

// TestForEnds: For's until is false until its time has passed.
func TestForEnds(t *testing.T) {
	until := For(20 * time.Millisecond)
	if until() {
		t.Fatal("For(20ms) is true at once")
	}
	time.Sleep(25 * time.Millisecond)
	if !until() {
		t.Fatal("For(20ms) is still false after 25 ms")
	}
}

// TestStartMovesNothing: on this host, where the process can write its own
// cgroup.procs (root on a cgroup file system), the warming leaves it in the
// cgroups it was in, and its cgroup still lists it.
func TestStartMovesNothing(t *testing.T) {
	p := procsFile()
	if p == "" {
		t.Skip("no cgroup hierarchy mounted at its root holds this process")
	}
	if f, err := os.OpenFile(p, os.O_WRONLY, 0); err != nil {
		t.Skipf("cannot write %s: %v", p, err)
	} else {
		f.Close()
	}
	before, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int32
	stop := Start(func() bool { return polls.Add(1) == 3 })
	deadline := time.Now().Add(10 * time.Second)
	for polls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	if n := polls.Load(); n != 3 {
		t.Fatalf("until was polled %d times, want 3: the writes to %s failed", n, p)
	}
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Errorf("the process's cgroups changed:\nbefore %s\nafter  %s", before, after)
	}
	procs, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(os.Getpid())+"\n") {
		t.Errorf("%s does not list this process (%d) after the warming", p, os.Getpid())
	}
}
