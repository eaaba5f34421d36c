package egresstest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// MustKeepOutOfMemory requires value to be in the memory of none of sb's
// processes, read from outside (/proc/PID/mem of every process in the
// sandbox's cgroup, its agent included), while control (something the
// sandbox does hold, such as its placeholder) is found, so that a search
// that reads nothing cannot pass. The sandbox's processes must be host
// processes (runc; not gVisor, whose memory is its sentry's).
func MustKeepOutOfMemory(t *testing.T, sb backend.Sandbox, value, control string) {
	t.Helper()
	pids := sandboxPIDs(t, sb)
	var found, controlFound []int
	for _, pid := range pids {
		has, err := memoryHolds(pid, []byte(value), []byte(control))
		if err != nil {
			continue // ended meanwhile
		}
		if has[0] {
			found = append(found, pid)
		}
		if has[1] {
			controlFound = append(controlFound, pid)
		}
	}
	require.Empty(t, found, "the value is in the memory of sandbox processes %v (of %v)", found, pids)
	require.NotEmpty(t, controlFound, "the search found the control string in none of the sandbox's processes %v: it reads nothing", pids)
}

// sandboxPIDs starts a marked process in sb and returns, on the host, the
// processes of the cgroup it is in.
func sandboxPIDs(t *testing.T, sb backend.Sandbox) []int {
	t.Helper()
	mark := "sbx-mark-" + rand.Text()[:12]
	_, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: `setsid sh -c 'echo "$API_KEY" > /dev/null; while :; do sleep 1; done' ` + mark + ` </dev/null >/dev/null 2>&1 &`})
	require.NoError(t, err)
	t.Cleanup(func() {
		sb.Exec(t.Context(), backend.ExecRequest{Shell: "pkill -f " + mark + " || true"})
	})
	var pid int
	require.Eventually(t, func() bool { pid = findByCmdline(mark); return pid > 0 }, 10*time.Second, 20*time.Millisecond,
		"the marked process is not among the host's processes")
	procs, err := cgroupProcs(pid)
	require.NoError(t, err)
	require.Contains(t, procs, pid)
	return procs
}

// findByCmdline returns a host process whose command line holds mark.
func findByCmdline(mark string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Contains(cl, []byte(mark)) {
			return pid
		}
	}
	return 0
}

// cgroupProcs returns the processes of pid's cgroup (cgroup v2's, or v1's
// pids or memory hierarchy).
func cgroupProcs(pid int) ([]int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	// Candidates, the v1 hierarchies first (a hybrid host has both).
	var v1, v2 []string
	for line := range strings.Lines(string(data)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = append(v2, filepath.Join("/sys/fs/cgroup", parts[2]), filepath.Join("/sys/fs/cgroup/unified", parts[2]))
		case parts[1] == "pids" || parts[1] == "memory":
			v1 = append(v1, filepath.Join("/sys/fs/cgroup", parts[1], parts[2]))
		}
	}
	var list []byte
	for _, dir := range append(v1, v2...) {
		if list, err = os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil && len(list) > 0 {
			break
		}
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("no cgroup of process %d found from %q", pid, data)
	}
	var pids []int
	for _, f := range strings.Fields(string(list)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// memoryHolds reports, for each of needles, whether process pid's readable
// memory holds it.
func memoryHolds(pid int, needles ...[]byte) ([]bool, error) {
	maps, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer maps.Close()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	longest := 0
	for _, n := range needles {
		longest = max(longest, len(n))
	}
	has := make([]bool, len(needles))
	buf := make([]byte, 1<<20)
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[1][0] != 'r' || (len(f) >= 6 && (f[5] == "[vvar]" || f[5] == "[vsyscall]" || f[5] == "[vvar_vclock]")) {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil {
			continue
		}
		// Chunks that overlap by a needle's length, so none is split.
		for off := lo; off < hi; {
			n := min(uint64(len(buf)), hi-off)
			got, _ := mem.ReadAt(buf[:n], int64(off))
			if got <= 0 {
				break // unreadable (unbacked, or gone)
			}
			for i, nd := range needles {
				if !has[i] && bytes.Contains(buf[:got], nd) {
					has[i] = true
				}
			}
			if off+uint64(got) >= hi {
				break
			}
			off += uint64(max(got-longest, 1))
		}
	}
	return has, sc.Err()
}
