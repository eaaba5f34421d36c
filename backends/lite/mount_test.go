package lite

import (
	"os"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/mountinfo"
)

// superOptions returns the super block options of the mount at target
// (the last field of its /proc/self/mountinfo line), or false.
func superOptions(t *testing.T, target string) (string, bool) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts, found := "", false
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && mountinfo.Unescape(f[4]) == target {
			opts, found = f[len(f)-1], true // the last mount there wins
		}
	}
	return opts, found
}

// A sandbox's overlay is volatile where the kernel has the option (5.10
// and later): its removal does not sync the host's file system.
func TestOverlayVolatile(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("volatile"))
	m, err := readMeta(sb.dir)
	if err != nil {
		t.Fatal(err)
	}
	opts, ok := superOptions(t, rootfsDir(sb.dir, m.Gen))
	if !ok {
		t.Fatalf("no mount at %s", rootfsDir(sb.dir, m.Gen))
	}
	if noVolatile.Load() {
		t.Skipf("this kernel refused a volatile overlay; mounted plain (%s)", opts)
	}
	// Shown as "volatile", or as "fsync=volatile" by newer kernels.
	if o := "," + opts + ","; !strings.Contains(o, ",volatile,") && !strings.Contains(o, ",fsync=volatile,") {
		t.Errorf("the root file system's overlay is mounted with %q, want volatile", opts)
	}
}
