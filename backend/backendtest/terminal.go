package backendtest

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/termbuf"
)

// Typed commands print markers split by quotes ("mark''1" prints mark1),
// so the terminal's echo of what was typed never matches what the tests
// wait for.

// testTerminaler checks programs on a pseudo-terminal: the size a program
// sees and a resize it is told about (SIGWINCH), Ctrl-C reaching the
// foreground program, the exit code, a program that does not exist, and,
// where terminals outlive their client, detaching and attaching again with
// the kept output replayed.
func (s *suite) testTerminaler(t *testing.T, sb backend.Sandbox) {
	tr, ok := backend.As[backend.Terminaler](sb)
	if !ok {
		t.Skip("the sandbox is not a Terminaler")
	}
	t.Run("Session", func(t *testing.T) {
		ctx := testCtx(t)
		term, err := tr.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"sh"}, Size: backend.TermSize{Rows: 24, Cols: 80}})
		if err != nil {
			t.Fatalf("Terminal: %v", err)
		}
		defer term.Close()
		out := termbuf.Pump(term, 1<<20)
		expect := func(typed, want string) {
			t.Helper()
			if _, err := io.WriteString(term, typed); err != nil {
				t.Fatalf("typing %q: %v", typed, err)
			}
			if got, ok := out.WaitFor(ctx, want); !ok {
				t.Fatalf("typed %q: no %q in the output; got %q", typed, want, got)
			}
		}
		expect("echo tty-''$(stty size)-''end\r", "tty-24 80-end")
		exit3 := func() {
			t.Helper()
			if _, err := io.WriteString(term, "exit 3\r"); err != nil {
				t.Fatal(err)
			}
			if r := out.Read(ctx, nil, 0); !errors.Is(r.Err, io.EOF) {
				t.Fatalf("after exit: the output did not end (%v); got %q", r.Err, r.Output)
			}
			if code, ok := term.ExitCode(); !ok || code != 3 {
				t.Errorf("ExitCode() = %d, %v; want 3, true", code, ok)
			}
		}
		if why := s.cfg.noTermSignals; why != "" {
			// The new size still reaches the terminal; only the signals
			// are left unchecked.
			if err := term.Resize(ctx, backend.TermSize{Rows: 40, Cols: 100}); err != nil {
				t.Fatalf("Resize: %v", err)
			}
			expect("echo after-''$(stty size)-''resize\r", "after-40 100-resize")
			exit3()
			t.Skipf("SIGWINCH on a resize and SIGINT on Ctrl-C not checked: %s", why)
		}
		// A foreground program that reports SIGWINCH, then dies of Ctrl-C.
		expect(`sh -c 'trap "echo got-''winch" WINCH; echo wai''ting; while :; do sleep 0.1; done'`+"\r", "waiting")
		if err := term.Resize(ctx, backend.TermSize{Rows: 40, Cols: 100}); err != nil {
			t.Fatalf("Resize: %v", err)
		}
		if got, ok := out.WaitFor(ctx, "got-winch"); !ok {
			t.Fatalf("the program did not see the resize (SIGWINCH); got %q", got)
		}
		// Ctrl-C: the loop dies (else the shell would not run the next line).
		if _, err := io.WriteString(term, "\x03"); err != nil {
			t.Fatal(err)
		}
		expect("echo after-''$(stty size)-''ctrlc\r", "after-40 100-ctrlc")
		exit3()
	})
	t.Run("NotFound", func(t *testing.T) {
		ctx := testCtx(t)
		term, err := tr.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"/no/such/program"}})
		if err != nil {
			return // refused at once: as good as an exit status
		}
		defer term.Close()
		io.Copy(io.Discard, term)
		if code, ok := term.ExitCode(); !ok || code != 127 && code != 126 {
			t.Errorf("ExitCode() of a missing program = %d, %v; want 127 (or 126), true", code, ok)
		}
	})
	t.Run("DetachAttach", func(t *testing.T) {
		if !tr.Detachable() {
			if _, err := tr.AttachTerminal(testCtx(t), "nope", backend.TermSize{}); !errors.Is(err, backend.ErrNotDetachable) {
				t.Errorf("AttachTerminal on a sandbox whose terminals are not detachable = %v, want ErrNotDetachable", err)
			}
			t.Skip("terminals end with their client here")
		}
		ctx := testCtx(t)
		if _, err := tr.AttachTerminal(ctx, "no-such-terminal", backend.TermSize{}); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("AttachTerminal(unknown id) = %v, want ErrNotFound", err)
		}
		term, err := tr.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"sh"}})
		if err != nil {
			t.Fatalf("Terminal: %v", err)
		}
		id := term.ID()
		out := termbuf.Pump(term, 1<<20)
		io.WriteString(term, "echo before-''detach\r")
		if got, ok := out.WaitFor(ctx, "before-detach"); !ok {
			t.Fatalf("no output before detaching; got %q", got)
		}
		if err := term.Close(); err != nil {
			t.Fatalf("Close (detach): %v", err)
		}
		list, err := tr.Terminals(ctx)
		if err != nil {
			t.Fatalf("Terminals: %v", err)
		}
		if !slices.ContainsFunc(list, func(i backend.TerminalInfo) bool { return i.ID == id && i.Running }) {
			t.Fatalf("Terminals() after detaching = %+v, want %s running", list, id)
		}
		again, err := tr.AttachTerminal(ctx, id, backend.TermSize{Rows: 30, Cols: 90})
		if err != nil {
			t.Fatalf("AttachTerminal: %v", err)
		}
		defer again.Close()
		out = termbuf.Pump(again, 1<<20)
		if got, ok := out.WaitFor(ctx, "before-detach"); !ok {
			t.Fatalf("attaching again did not replay the kept output; got %q", got)
		}
		io.WriteString(again, "echo after-''attach-''$(stty size)\r")
		if got, ok := out.WaitFor(ctx, "after-attach-30 90"); !ok {
			t.Fatalf("the terminal does not answer after attaching again (or missed its new size); got %q", got)
		}
		io.WriteString(again, "exit 0\r")
		if r := out.Read(ctx, nil, 0); !errors.Is(r.Err, io.EOF) {
			t.Fatalf("after exit: %v", r.Err)
		}
		if code, ok := again.ExitCode(); !ok || code != 0 {
			t.Errorf("ExitCode() = %d, %v; want 0, true", code, ok)
		}
	})
	t.Run("Kill", func(t *testing.T) { killed(t, testCtx(t), tr) })
}

// killed checks that Kill ends a terminal's program.
func killed(t *testing.T, ctx context.Context, tr backend.Terminaler) {
	t.Helper()
	term, err := tr.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"sh", "-c", "trap '' HUP; echo rea''dy; exec sleep 600"}})
	if err != nil {
		t.Fatalf("Terminal: %v", err)
	}
	defer term.Close()
	out := termbuf.Pump(term, 1<<20)
	if got, ok := out.WaitFor(ctx, "ready"); !ok {
		t.Fatalf("no output; got %q", got)
	}
	if err := term.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if r := out.Read(ctx, nil, 0); !errors.Is(r.Err, io.EOF) {
		t.Fatalf("after Kill the output did not end: %v", r.Err)
	}
	if code, ok := term.ExitCode(); !ok || code == 0 {
		t.Errorf("ExitCode() after Kill = %d, %v; want a signal's status", code, ok)
	}
}
