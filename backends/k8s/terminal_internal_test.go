package k8s

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/termbuf"
)

// A terminal has its size from its first command on, even when the
// kubelet applies the exec stream's sizes late (held here until the
// first command ran; CI once saw a shell's first `stty size` fail so under
// load), and later sizes still reach it.
func TestTerminalSizeBeforeTheStreamsFirst(t *testing.T) {
	b := agentTestBackend(t, "")
	hold := make(chan struct{})
	b.holdSizes = hold
	sb := agentTestSandbox(t, b)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	term, err := sb.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"sh"}, Size: backend.TermSize{Rows: 24, Cols: 80}})
	require.NoError(t, err)
	defer term.Close()
	out := termbuf.Pump(term, 1<<20)
	expect := func(typed, want string) {
		t.Helper()
		_, err := io.WriteString(term, typed)
		require.NoError(t, err)
		got, ok := out.WaitFor(ctx, want)
		require.True(t, ok, "typed %q: no %q in the output; got %q", typed, want, got)
	}
	expect("echo tty-''$(stty size)-''end\r", "tty-24 80-end")
	// The held first size (the same, so no SIGWINCH) and then the new one
	// reach the program.
	expect(`sh -c 'trap "echo got-\$(stty size)-winch" WINCH; echo wai''ting; while :; do sleep 0.1; done'`+"\r", "waiting")
	close(hold)
	require.NoError(t, term.Resize(ctx, backend.TermSize{Rows: 40, Cols: 100}))
	got, ok := out.WaitFor(ctx, "got-40 100-winch")
	require.True(t, ok, "the program did not see the new size; got %q", got)
}
