package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// cpus: a number is a quota (a whole one warned about: OpenSage pins that
// CPU); text in Docker's cpuset form is a CPU set, carried by LabelCPUSet
// with a quota of its size; a fraction in text stays a quota (templates).
func TestCPUs(t *testing.T) {
	for _, tt := range []struct {
		value   string
		quota   float64
		set     string
		warning string
	}{
		{value: `1.5`, quota: 1.5},
		{value: `"1.5"`, quota: 1.5},
		{value: `"${CPU_QUOTA}"`, quota: 0.5},
		{value: `2`, quota: 2, warning: `sandbox.sandboxes.main.cpus = 2: a CPU quota here (2 CPUs' time, on any CPUs); OpenSage passes cpus to Docker as cpuset_cpus, which pins CPU 2 (write cpus = "2" for that)`},
		{value: `"0,1"`, quota: 2, set: "0,1"},
		{value: `"0-3"`, quota: 4, set: "0-3"},
		{value: `"1"`, quota: 1, set: "1"},
		{value: `"0-1,4"`, quota: 3, set: "0-1,4"},
		{value: `"${CPU_SET}"`, quota: 2, set: "2-3"},
	} {
		cfg := mustParse(t, "CPU_QUOTA = 0.5\nCPU_SET = \"2-3\"\n[sandbox.sandboxes.main]\ncpus = "+tt.value+"\n")
		spec := mustSpec(t, cfg, "main")
		assert.Equal(t, tt.quota, spec.Resources.CPUs, tt.value)
		assert.Equal(t, tt.set, spec.Labels[LabelCPUSet], tt.value)
		var warned []string
		for _, w := range cfg.Warnings {
			if strings.Contains(w, ".cpus") {
				warned = append(warned, w)
			}
		}
		if tt.warning != "" {
			assert.Equal(t, []string{tt.warning}, warned, tt.value)
		} else {
			assert.Empty(t, warned, tt.value)
		}
	}
	for _, tt := range []struct{ value, want string }{
		{`"half"`, `sandbox.sandboxes.main.cpus: want a CPU quota (a number: 1.5) or a CPU set as Docker's cpuset_cpus takes it (text: "0,1", "0-3", "2"), got "half"`},
		{`"3-1"`, `CPU set "3-1": "3-1" is not a CPU number or an ascending range`},
		{`"0,0"`, `CPU set "0,0" names CPU 0 twice`},
		{`true`, `want a CPU quota`},
		{`-1`, `sandbox.sandboxes.main.cpus: want 0 (no limit) or`},
	} {
		_, err := parse(t, "[sandbox.sandboxes.main]\ncpus = "+tt.value+"\n")
		require.ErrorIs(t, err, backend.ErrInvalidConfig, tt.value)
		assert.ErrorContains(t, err, tt.want, tt.value)
	}
}
