package backendtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// logsScript is a main command that prints one line to stderr and five to
// stdout, then stays.
const logsScript = `echo "bt-logs-stderr $1" >&2
for i in 1 2 3 4 5; do echo "bt-logs-$i $1"; done
exec sleep 3600`

// testLogReader checks that Logs returns what the main command printed, on
// both streams, and that tail keeps the last lines.
func (s *suite) testLogReader(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.LogReader](sb); !ok {
		t.Skip("the sandbox is not a LogReader")
	}
	token := randomHex(6)
	spec := s.spec("logs")
	s.needCommand(t)
	spec.Command, spec.ImageCommand = []string{"sh", "-c", logsScript, "sh", token}, false
	sb = s.create(t, spec)
	lr, ok := backend.As[backend.LogReader](sb)
	if !ok {
		t.Fatal("the logs case's sandbox is not a LogReader, though the suite's first sandbox is")
	}
	ctx := testCtx(t)
	var stdout []string
	for i := 1; i <= 5; i++ {
		stdout = append(stdout, fmt.Sprintf("bt-logs-%d %s", i, token))
	}
	stderr := "bt-logs-stderr " + token
	var lines []string
	var err error
	if !poll(readyTimeout, func() bool {
		var out []byte
		out, err = lr.Logs(ctx, 0)
		lines = strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		return err == nil && slices.Contains(lines, stdout[4]) && slices.Contains(lines, stderr)
	}) {
		t.Fatalf("Logs(0) = %q, %v; want the main command's six lines within %v", lines, err, readyTimeout)
	}
	// The streams may interleave in any order; each keeps its own.
	got := slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return l == stderr })
	if !slices.Equal(got, stdout) {
		t.Errorf("Logs(0) = %q; want the stdout lines %q in order, and %q", lines, stdout, stderr)
	}
	out, err := lr.Logs(ctx, 2)
	if err != nil {
		t.Fatalf("Logs(2): %v", err)
	}
	if want := strings.Join(lines[len(lines)-2:], "\n") + "\n"; string(out) != want {
		t.Errorf("Logs(2) = %q, want the last two lines %q", out, want)
	}
}
