package backendtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// resetMarker is the command line of the background process the Resetter
// case starts; no other process of a sandbox has it.
const resetMarker = "sleep 987654"

// markedScript prints the pids of the live processes whose command line is
// exactly resetMarker (zombies have an empty one).
const markedScript = `for f in /proc/[0-9]*/cmdline; do
	c=$(tr '\0' ' ' < "$f" 2>/dev/null) || continue
	[ "$c" = "` + resetMarker + ` " ] && { p=${f#/proc/}; echo "${p%/cmdline}"; }
done
true`

// startMarked writes text to file in sb's working directory and starts
// resetMarker in the background, checking that it outlives the Exec that
// started it (as on every backend so far; if it did not, a check that it
// is gone would prove nothing). It returns the function that lists the
// pids running resetMarker.
func startMarked(t *testing.T, ctx context.Context, sb backend.Sandbox, text, file string) (marked func() []string) {
	t.Helper()
	marked = func() []string {
		t.Helper()
		res := mustExec(t, ctx, sb, backend.ExecRequest{Shell: markedScript})
		return strings.Fields(string(res.Stdout))
	}
	mustExec(t, ctx, sb, backend.ExecRequest{Shell: `echo ` + text + ` > ` + file + ` && ` + resetMarker + ` </dev/null >/dev/null 2>&1 &`})
	if pids := marked(); len(pids) != 1 {
		t.Fatalf("processes running %q after the Exec that started it in the background: %v, want one", resetMarker, pids)
	}
	return marked
}

// testResetter checks that Reset brings the sandbox back to its image: a
// file written before is gone, a background process is gone, the sandbox
// keeps its ID and labels and runs commands again. A Settler's Settle then
// returns (its work after the Reset ends) and leaves the sandbox running
// commands.
func (s *suite) testResetter(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Resetter](sb); !ok {
		t.Skip("the sandbox is not a Resetter")
	}
	sb = s.create(t, s.spec("reset"))
	r, ok := backend.As[backend.Resetter](sb)
	if !ok {
		t.Fatal("the reset case's sandbox is not a Resetter, though the suite's first sandbox is")
	}
	ctx := testCtx(t)
	marked := startMarked(t, ctx, sb, "before", "bt-reset-file")

	id := sb.ID()
	if err := r.Reset(ctx); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if sb.ID() != id {
		t.Errorf("ID() = %q after Reset, was %q", sb.ID(), id)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info after Reset: %v", err)
	}
	if info.ID != id || info.Name != "reset" || info.State != backend.StateRunning || info.Labels[labelRun] != s.runID {
		t.Errorf("Info after Reset = ID %q, name %q, state %q, %s label %q; want %q, %q, %q, %q",
			info.ID, info.Name, info.State, labelRun, info.Labels[labelRun], id, "reset", backend.StateRunning, s.runID)
	}
	res := mustExec(t, ctx, sb, backend.ExecRequest{Shell: `echo usable; test -e bt-reset-file && echo file-still-there; true`})
	checkOutput(t, "stdout after Reset (the file written before must be gone)", res.Stdout, "usable\n")
	// A process being killed may take a moment to leave /proc.
	var pids []string
	if !poll(5*time.Second, func() bool { pids = marked(); return len(pids) == 0 }) {
		t.Errorf("processes %v running %q are still there after Reset", pids, resetMarker)
		sb.Exec(context.WithoutCancel(ctx), backend.ExecRequest{Cmd: append([]string{"kill", "-KILL"}, pids...)})
	}
	if got, err := s.b.Get(ctx, id); err != nil {
		t.Errorf("Get(%q) after Reset: %v", id, err)
	} else {
		res := mustExec(t, ctx, got, backend.ExecRequest{Cmd: []string{"echo", "reattached"}})
		checkOutput(t, "stdout through Get after Reset", res.Stdout, "reattached\n")
	}
	if st, ok := backend.As[backend.Settler](sb); ok {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := st.Settle(sctx)
		cancel()
		if err != nil {
			t.Errorf("Settle after Reset: %v", err)
		}
		res := mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"echo", "settled"}})
		checkOutput(t, "stdout after Settle", res.Stdout, "settled\n")
	}
}
