package lite

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
)

// lite makes a gVisor container's cgroup itself only for the settings it
// writes (a pids limit, a CPU weight; device rules runsc ignores): any
// other limit is runsc's to make, which also tells the sentry of it.
func TestLimitsLiteWrites(t *testing.T) {
	n := int64(64)
	shares := uint64(2)
	quota := int64(50000)
	mem := int64(1 << 28)
	for _, c := range []struct {
		name string
		r    *specs.LinuxResources
		want bool
	}{
		{"none", nil, true},
		{"empty", &specs.LinuxResources{}, true},
		{"lite's default", resources(backend.Spec{}, 4096), true},
		{"pids and weight", &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &n}, CPU: &specs.LinuxCPU{Shares: &shares}}, true},
		{"privileged's devices", &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}, true},
		{"memory", resources(backend.Spec{Resources: backend.Resources{MemoryBytes: mem}}, 4096), false},
		{"cpus", resources(backend.Spec{Resources: backend.Resources{CPUs: 0.5}}, 4096), false},
		{"quota with weight", &specs.LinuxResources{CPU: &specs.LinuxCPU{Shares: &shares, Quota: &quota}}, false},
		{"cpu set", &specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: "0"}}, false},
		{"block io", &specs.LinuxResources{BlockIO: &specs.LinuxBlockIO{}}, false},
		{"unified", &specs.LinuxResources{Unified: map[string]string{"memory.high": "1"}}, false},
	} {
		if got := limitsLiteWrites(c.r); got != c.want {
			t.Errorf("%s: limitsLiteWrites = %v, want %v", c.name, got, c.want)
		}
	}
	if ownsCgroup(&specs.Spec{Linux: &specs.Linux{}}) {
		t.Error("a config without a cgroup path (rootless) has its cgroup made by lite")
	}
}

// requireRunsc skips t without Debian's runsc (fails with
// SBX_REQUIRE_RUNSC=1).
func requireRunsc(t *testing.T) {
	t.Helper()
	if _, err := lookRuntime("runsc", ""); err != nil {
		if os.Getenv("SBX_REQUIRE_RUNSC") == "1" {
			t.Fatalf("SBX_REQUIRE_RUNSC=1 and %v", err)
		}
		t.Skipf("no runsc: %v", err)
	}
}

// A gVisor sandbox on a host with cgroup v1 runs in a cgroup lite made,
// in every hierarchy, with its pids limit: runsc, told to ignore cgroups,
// and everything it starts (gofer, sandbox) are in it, and a command in
// the sandbox works. One with a memory limit is left to runsc's own
// cgroups, and its sandbox sees the limit as its memory.
func TestGVisorInLitesCgroup(t *testing.T) {
	requireRunsc(t)
	e := newTestEnv(t)
	e.cfg.Runtime = "runc"
	b := e.open(t)
	spec := e.spec("gvisor-cgroup")
	spec.Runtime = backend.RuntimeGVisor
	spec.Resources.PidsLimit = 321
	sb := create(t, b, spec)
	if res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"echo", "ok"}}); err != nil || string(res.Stdout) != "ok\n" {
		t.Fatalf("echo ok in the sandbox: %q %q (%v)", res.Stdout, res.Stderr, err)
	}
	sentry := sentryArgs(t, sb)
	if !ownCgroupHost() {
		// Only a host without cgroup v1's cpu and pids hierarchies may
		// leave the cgroup to runsc (read here apart from ownCgroupHost,
		// so that a fault of it cannot pass for such a host).
		for _, c := range []string{"cpu", "pids"} {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", c, "cgroup.procs")); err == nil {
				t.Fatalf("the host has cgroup v1's %s hierarchy, and lite does not make gVisor's cgroups", c)
			}
		}
		// A v2-only host: runsc's own cgroups.
		if slices.Contains(sentry, "--ignore-cgroups=true") {
			t.Fatalf("the sentry ignores cgroups on a host where lite makes none: %q", sentry)
		}
		return
	}
	if !slices.Contains(sentry, "--ignore-cgroups=true") {
		t.Fatalf("the sentry's arguments %q lack --ignore-cgroups=true: runsc made the cgroup", sentry)
	}
	m, err := sb.meta()
	if err != nil {
		t.Fatal(err)
	}
	dirs := cgroupDirs(cgroupName(sb.id, m.Gen))
	var procs [][]string
	for _, root := range v1CgroupRoots() {
		d := filepath.Join(root, cgroupParent, cgroupName(sb.id, m.Gen))
		if !slices.Contains(dirs, d) {
			t.Fatalf("no cgroup %s (the sandbox's: %v)", d, dirs)
		}
		data, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			t.Fatal(err)
		}
		p := strings.Fields(string(data))
		slices.Sort(p)
		procs = append(procs, p)
		if max, err := os.ReadFile(filepath.Join(d, "pids.max")); err == nil && strings.TrimSpace(string(max)) != "321" {
			t.Errorf("%s/pids.max = %q, want 321", d, max)
		}
	}
	names := map[string]bool{}
	for _, pid := range procs[0] {
		if args := cmdline(pid); len(args) > 0 {
			names[filepath.Base(args[0])] = true
		}
	}
	if !names["runsc-gofer"] || !names["runsc-sandbox"] {
		t.Errorf("processes in the sandbox's cgroup: %v; want runsc's gofer and sandbox", names)
	}
	for i, p := range procs[1:] {
		if !slices.Equal(p, procs[0]) {
			t.Errorf("the cgroup in %s holds %v, the one in %s %v: not every process joined every hierarchy", v1CgroupRoots()[i+1], p, v1CgroupRoots()[0], procs[0])
		}
	}

	spec = e.spec("gvisor-memory")
	spec.Runtime = backend.RuntimeGVisor
	spec.Resources.MemoryBytes = 256 << 20
	sb = create(t, b, spec)
	if args := sentryArgs(t, sb); slices.Contains(args, "--ignore-cgroups=true") {
		t.Fatalf("a sandbox with a memory limit: the sentry ignores cgroups (%q); runsc should make them", args)
	}
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "grep MemTotal /proc/meminfo"})
	if err != nil || !strings.Contains(string(res.Stdout), " 262144 kB") {
		t.Errorf("MemTotal in a sandbox of 256 MiB: %q %q (%v)", res.Stdout, res.Stderr, err)
	}
}

// sentryArgs returns the command line of sandbox sb's gVisor sandbox
// process (runsc-sandbox boot), found through its cgroup.
func sentryArgs(t *testing.T, sb *Sandbox) []string {
	t.Helper()
	m, err := sb.meta()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cgroupDirs(cgroupName(sb.id, m.Gen)) {
		data, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		for _, pid := range strings.Fields(string(data)) {
			if args := cmdline(pid); len(args) > 0 && filepath.Base(args[0]) == "runsc-sandbox" {
				return args
			}
		}
	}
	t.Fatalf("no runsc-sandbox process in the cgroup of sandbox %s", sb.id)
	return nil
}

func cmdline(pid string) []string {
	if _, err := strconv.Atoi(pid); err != nil {
		return nil
	}
	data, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}
