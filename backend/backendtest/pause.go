package backendtest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// counterScript is a main command that counts in the file bt-counter of
// its working directory, about every 10 ms, replacing the file whole each
// time so a reader never sees half a number, and appends each step with
// the sandbox's uptime (/proc/uptime, in hundredths of a second) to
// bt-steps.
const counterScript = `i=0
while :; do
	i=$((i+1))
	read up idle < /proc/uptime
	echo "$i $up" >> bt-steps
	echo "$i" > bt-counter.tmp && mv -f bt-counter.tmp bt-counter
	sleep 0.01
done`

// pauseWindow is the least time the Pauser case keeps the sandbox paused
// (and then lets the counter run freely to compare).
const pauseWindow = time.Second

// testPauser checks that Pause freezes the sandbox's processes and Resume
// thaws them. A counter loop runs as the main command; Exec may not work
// while the sandbox is paused, so the counter is read just before Pause
// and just after Resume. Between Pause returning and Resume being called
// the loop must not run; it may run only during the calls around that
// window, which lasts pauseWindow, or four times as long as reading the
// counter and pausing took. The loop stamps every step with the sandbox's
// uptime, so a frozen window shows as a gap between two steps at least as
// long as the window; a loop that ran on has no such gap, however slowly
// a loaded machine ran it. (An earlier check compared the steps with the
// loop's rate measured after Resume; on a loaded CI machine the rate
// around the window was three times that, and a freeze that had worked
// read as none.) After Resume the loop must run again.
func (s *suite) testPauser(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Pauser](sb); !ok {
		t.Skip("the sandbox is not a Pauser")
	}
	spec := s.spec("pause")
	s.needCommand(t)
	spec.Command, spec.ImageCommand = []string{"sh", "-c", counterScript}, false
	sb = s.create(t, spec)
	p, ok := backend.As[backend.Pauser](sb)
	if !ok {
		t.Fatal("the pause case's sandbox is not a Pauser, though the suite's first sandbox is")
	}
	ctx := testCtx(t)
	state := func() backend.State {
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatalf("Info: %v", err)
		}
		return info.State
	}
	counter := func() int {
		t.Helper()
		res := mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"cat", "bt-counter"}})
		n, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
		if err != nil {
			t.Fatalf("bt-counter holds %s, not a number", quote(res.Stdout))
		}
		return n
	}
	if !poll(readyTimeout, func() bool {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "bt-counter"}})
		return err == nil && res.ExitCode == 0
	}) {
		logs, _ := mainLogs(ctx, sb)
		t.Fatalf("the counter loop (the main command) wrote no bt-counter in the working directory within %v%s", readyTimeout, logs)
	}

	t0 := time.Now()
	before := counter()
	if err := p.Pause(ctx); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			// A client whose server decides (the opensandbox backend
			// in front of a server over a backend that cannot pause).
			t.Skipf("Pause: %v", err)
		}
		t.Fatalf("Pause: %v", err)
	}
	p1 := time.Now()
	if st := state(); st != backend.StatePaused {
		t.Errorf("State after Pause = %q, want %q", st, backend.StatePaused)
	}
	window := min(max(pauseWindow, 4*p1.Sub(t0)), 10*time.Second)
	time.Sleep(window) // the interval measured, not a wait for readiness
	r0 := time.Now()
	if err := p.Resume(context.WithoutCancel(ctx)); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	resumed := counter()
	t2 := time.Now()
	time.Sleep(window)
	running := counter()
	t3 := time.Now()

	if running <= resumed {
		t.Fatalf("the counter did not advance after Resume (%d, then %d %v later)", resumed, running, t3.Sub(t2))
	}
	steps := stepTimes(t, mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"cat", "bt-steps"}}).Stdout)
	frozen := r0.Sub(p1)
	// The freeze ends at the first step after it, which may come after
	// the counter was read past Resume (gVisor's sentry takes a moment
	// to run the loop again): resumed+1 is in the interval.
	gap, at := longestGap(steps, before, resumed+1)
	free, _ := longestGap(steps, resumed+1, running)
	t.Logf("counter: steps %d to %d across %v with Pause (%v between Pause and Resume): longest gap %v (after step %d); running after, longest gap %v",
		before, resumed+1, t2.Sub(t0).Round(time.Millisecond), frozen.Round(time.Millisecond), gap, at, free)
	// The step before the freeze is stamped before Pause returned and the
	// one after it once Resume was called, so the gap is the window less
	// the stamps' hundredth of a second at most; 0.8 of it is a generous
	// floor.
	if gap < frozen*8/10 {
		t.Errorf("between steps %d and %d the counter never stopped for more than %v, while the sandbox was paused for %v: Pause did not freeze its processes",
			before, resumed+1, gap, frozen.Round(time.Millisecond))
	}
	if st := state(); st != backend.StateRunning {
		t.Errorf("State after Resume = %q, want %q", st, backend.StateRunning)
	}
}

// stepTimes parses bt-steps ("STEP UPTIME" lines) into each step's uptime.
// A last line without its newline is being written and is left out.
func stepTimes(t *testing.T, out []byte) map[int]time.Duration {
	t.Helper()
	steps := map[int]time.Duration{}
	for line := range strings.Lines(string(out)) {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		step, upText, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, err := strconv.Atoi(step)
		up, uerr := strconv.ParseFloat(upText, 64)
		if err != nil || uerr != nil {
			t.Fatalf("bt-steps has the line %s, want a step and the uptime", quote([]byte(line)))
		}
		steps[n] = time.Duration(up * float64(time.Second))
	}
	return steps
}

// longestGap returns the longest time between consecutive steps from
// first to last, and the step it followed (steps not recorded are
// skipped over).
func longestGap(steps map[int]time.Duration, first, last int) (time.Duration, int) {
	var gap time.Duration
	at, prev := 0, -1
	for n := first; n <= last; n++ {
		up, ok := steps[n]
		if !ok {
			continue
		}
		if prev >= 0 && up-steps[prev] > gap {
			gap, at = up-steps[prev], prev
		}
		prev = n
	}
	return gap, at
}
