package native_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// A caller that stops reading a command's output and cancels (as closing
// a file read through Exec early does) gets Exec back: the engine, blocked
// writing the output nobody reads, must not hold up the kill.
func TestCancelWithUnreadOutput(t *testing.T) {
	t.Parallel()
	b := newBackend(t, dockertest.BusyboxImage)
	sb := create(t, b, spec("unread", dockertest.BusyboxImage))
	ctx := t.Context()
	_, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "seq 1 400000 > /tmp/a.txt"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		cctx, cancel := context.WithCancel(ctx)
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			_, err := sb.Exec(cctx, backend.ExecRequest{Cmd: []string{"cat", "/tmp/a.txt"}, Stdout: pw})
			pw.Close()
			done <- err
		}()
		if _, err := io.ReadFull(pr, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		pr.CloseWithError(io.ErrClosedPipe)
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: Exec did not return after its context was cancelled", i)
		}
	}
}
