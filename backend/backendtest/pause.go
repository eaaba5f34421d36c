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
// time so a reader never sees half a number.
const counterScript = `i=0
while :; do
	i=$((i+1))
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
// counter and pausing took (so the calls are short beside it). The steps
// it took across the whole interval are compared with what it does
// running freely right after, for as long as the window: with a frozen
// window the steps are about the rate times the time outside it, without
// one the rate times the whole interval. The limit lies halfway, and the
// rate is measured, so the check holds on a slow machine too.
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

	paused, free := resumed-before, running-resumed
	if free <= 0 {
		t.Fatalf("the counter did not advance after Resume (%d, then %d %v later)", resumed, running, t3.Sub(t2))
	}
	rate := float64(free) / t3.Sub(t2).Seconds() // steps per second
	frozen := r0.Sub(p1)
	outside := t2.Sub(t0) - frozen
	limit := rate * (outside + frozen/2).Seconds()
	t.Logf("counter: %d steps across %v with Pause (%v frozen), %d across %v running (%.0f/s); limit %.1f",
		paused, t2.Sub(t0).Round(time.Millisecond), frozen.Round(time.Millisecond), free, t3.Sub(t2).Round(time.Millisecond), rate, limit)
	if float64(paused) >= limit {
		t.Errorf("the counter took %d steps across %v with the sandbox paused for %v; running, it takes %.0f a second, "+
			"so a frozen sandbox would take about %.0f: Pause did not freeze its processes",
			paused, t2.Sub(t0).Round(time.Millisecond), frozen.Round(time.Millisecond), rate, rate*outside.Seconds())
	}
	if st := state(); st != backend.StateRunning {
		t.Errorf("State after Resume = %q, want %q", st, backend.StateRunning)
	}
}
