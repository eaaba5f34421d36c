package backendtest

import (
	"errors"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// testStopper checks that Stop ends the sandbox's processes and keeps its
// files, and that Start runs it again: a file written before is still
// there, a background process is not, and the sandbox runs commands.
func (s *suite) testStopper(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Stopper](sb); !ok {
		t.Skip("the sandbox is not a Stopper")
	}
	sb = s.create(t, s.spec("stop"))
	st, ok := backend.As[backend.Stopper](sb)
	if !ok {
		t.Fatal("the stop case's sandbox is not a Stopper, though the suite's first sandbox is")
	}
	ctx := testCtx(t)
	marked := startMarked(t, ctx, sb, "kept", "bt-stop-file")
	if err := st.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatalf("Info after Stop: %v", err)
	}
	if info.State == backend.StateRunning {
		t.Errorf("Info after Stop: state %q", info.State)
	}
	if err := st.Start(ctx); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	var res backend.ExecResult
	// The agent (or the engine's exec) may take a moment to answer again.
	if !poll(readyTimeout, func() bool {
		res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"cat", "bt-stop-file"}})
		return err == nil
	}) {
		t.Fatalf("Exec after Start: %v", err)
	}
	checkOutput(t, "the file written before Stop", res.Stdout, "kept\n")
	if pids := marked(); len(pids) != 0 {
		t.Errorf("processes %v running %q outlived Stop", pids, resetMarker)
	}
}

// testDiscarder checks Discard: a sandbox made with AutoRemove is gone
// from Get (at once or once its platform removed it, within a minute), and
// one made without it is destroyed as by Destroy.
func (s *suite) testDiscarder(t *testing.T, sb backend.Sandbox) {
	if _, ok := backend.As[backend.Discarder](sb); !ok {
		t.Skip("the sandbox is not a Discarder")
	}
	ctx := testCtx(t)
	for _, auto := range []bool{true, false} {
		spec := s.spec("discard")
		spec.AutoRemove = auto
		sb := s.create(t, spec)
		d, ok := backend.As[backend.Discarder](sb)
		if !ok {
			t.Fatal("the discard case's sandbox is not a Discarder, though the suite's first sandbox is")
		}
		mustExec(t, ctx, sb, backend.ExecRequest{Cmd: []string{"true"}})
		if err := d.Discard(ctx); err != nil {
			t.Fatalf("Discard (AutoRemove %v): %v", auto, err)
		}
		gone := func() bool {
			_, err := s.b.Get(ctx, sb.ID())
			return errors.Is(err, backend.ErrNotFound)
		}
		if !auto && !gone() {
			t.Errorf("a sandbox made without AutoRemove is still found after Discard")
		}
		if auto && !poll(time.Minute, gone) {
			t.Errorf("a sandbox made with AutoRemove is still found a minute after Discard")
		}
	}
}
