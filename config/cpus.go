package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/backend"
)

// LabelCPUSet is the label by which a CPU set (an entry's cpus written as
// "0,1" or "0-3") reaches the backend: backend.Spec has no field for it
// yet, and adding one changes the sandbox agent every backend embeds.
// native (and remotedocker through it) gives it to Docker as cpuset_cpus,
// lite to the OCI runtime as linux.resources.cpu.cpus; a backend that
// cannot pin CPUs still gets a quota of as many CPUs (Resources.CPUs).
const LabelCPUSet = backend.LabelPrefix + "cpuset"

// CPULimit is an entry's cpus. A number is a CPU quota in cores, as docker
// run --cpus (sandboxkit's meaning: "1.5" too); text in Docker's cpuset
// form ("0,1", "0-3", "2") is the set of CPUs the sandbox runs on, as
// OpenSage passes cpus to Docker's cpuset_cpus.
type CPULimit struct {
	// Quota is the CPU quota in cores (0: none). For a Set it is the
	// set's size.
	Quota float64
	// Set is the CPU set ("" for a quota).
	Set string
	// whole: a quota written as a whole number, which OpenSage reads as a
	// CPU to pin (warned about).
	whole bool
}

// cpuSetRE is Docker's cpuset form: CPU numbers and ranges, comma-separated.
var cpuSetRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d+(-\d+)?(,\d+(-\d+)?)*$`) })

// UnmarshalTOML implements toml.Unmarshaler.
func (c *CPULimit) UnmarshalTOML(v any) error {
	*c = CPULimit{}
	switch v := v.(type) {
	case int64:
		c.Quota, c.whole = float64(v), true
		return nil
	case float64:
		c.Quota, c.whole = v, v == math.Trunc(v)
		return nil
	case string:
		s := strings.TrimSpace(v)
		if s == "" {
			return nil
		}
		if cpuSetRE().MatchString(s) {
			n, err := cpuSetSize(s)
			if err != nil {
				return err
			}
			c.Set, c.Quota = s, float64(n)
			return nil
		}
		// A fraction cannot name CPUs: a quota ("1.5", "${CPU_QUOTA}").
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			c.Quota = f
			return nil
		}
	}
	return fmt.Errorf(`want a CPU quota (a number: 1.5) or a CPU set as Docker's cpuset_cpus takes it (text: "0,1", "0-3", "2"), got %s`, describeValue(v))
}

// cpuSetSize counts the CPUs of a set in cpuSetRE's form, refusing ranges
// that run backwards and CPUs named twice.
func cpuSetSize(s string) (int, error) {
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a || b-a > backend.MaxCPUs {
			return 0, fmt.Errorf("CPU set %q: %q is not a CPU number or an ascending range", s, part)
		}
		for n := a; n <= b; n++ {
			if seen[n] {
				return 0, fmt.Errorf("CPU set %q names CPU %d twice", s, n)
			}
			seen[n] = true
		}
	}
	return len(seen), nil
}

// bareNumberWarning is the warning of a cpus written as a whole number:
// sandboxkit's quota, which OpenSage reads as the CPU to pin.
func (c CPULimit) bareNumberWarning(key string) string {
	if !c.whole || c.Quota == 0 {
		return ""
	}
	n := strconv.FormatFloat(c.Quota, 'f', -1, 64)
	return fmt.Sprintf(`%s = %s: a CPU quota here (%s CPUs' time, on any CPUs); OpenSage passes cpus to Docker as cpuset_cpus, which pins CPU %s (write cpus = "%s" for that)`,
		key, n, n, n, n)
}
