package cli

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
)

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// What a command made and could not name to its caller (stdout gone) is
// removed, and the error says so; written, nothing is undone.
func TestHandOver(t *testing.T) {
	undone := 0
	undo := func(context.Context) error { undone++; return nil }
	err := handOver(t.Context(), failingWriter{}, []byte("abc\n"), "forks", undo)
	if err == nil || undone != 1 || !strings.Contains(err.Error(), "they were removed") || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("a failed write: %v (undone %d)", err, undone)
	}
	err = handOver(t.Context(), failingWriter{}, []byte("abc\n"), "forks", func(context.Context) error { return errors.New("engine gone") })
	if err == nil || !strings.Contains(err.Error(), "removing them failed too: engine gone") {
		t.Fatalf("a failed undo: %v", err)
	}
	var buf strings.Builder
	if err := handOver(t.Context(), &buf, []byte("abc\n"), "forks", undo); err != nil || buf.String() != "abc\n" || undone != 1 {
		t.Fatalf("a good write: %v, %q, undone %d", err, buf.String(), undone)
	}
}
