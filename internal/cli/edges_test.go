package cli

import (
	"strings"
	"testing"
)

// A negative --timeout is refused, naming the flag, rather than meaning no
// timeout at all.
func TestNegativeTimeout(t *testing.T) {
	setup(t)
	for _, args := range [][]string{
		{"run", "--timeout", "-1s", "--", "true"},
		{"exec", "--timeout", "-1s", "main", "--", "true"},
		{"tools", "execute", "--timeout", "-1s", "main", "true"},
	} {
		r := sbx(t, args...)
		r.expect(t, 1)
		if !strings.Contains(r.stderr, "--timeout -1s: a timeout must not be negative") {
			t.Errorf("sbx %v: stderr %q, want the flag named", args, r.stderr)
		}
	}
}

// A program that does not exist exits 127 and says so, on local as on the
// other backends.
func TestRunMissingProgram(t *testing.T) {
	setup(t)
	r := sbx(t, "run", "--", "no-such-program-xyz")
	r.expect(t, 127)
	if !strings.Contains(r.stderr, "no-such-program-xyz: command not found") {
		t.Errorf("stderr %q, want a message naming the program", r.stderr)
	}
}
