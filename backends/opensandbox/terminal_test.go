package opensandbox_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/internal/termbuf"
)

// terminalSandbox makes a sandbox on an in-process server with opts.
func terminalSandbox(t *testing.T, opts opensandboxtest.Options, proxied bool) backend.Terminaler {
	t.Helper()
	opts.APIKey = testAPIKey
	srv := newServer(t, opts)
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey, UseServerProxy: proxied})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, backend.Spec{Name: "tty", Image: testImage, TTL: 10 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
	return sb.(backend.Terminaler)
}

// TestTerminalEnvironment runs a program through the server proxy (the
// WebSocket upgraded through it) with an environment whose values hold
// what a line editor would take as keys (tab, newline, quotes, escape) and
// a relative working directory: the program sees them exactly, and the
// output holds nothing of the typed line.
func TestTerminalEnvironment(t *testing.T) {
	t.Parallel()
	tr := terminalSandbox(t, opensandboxtest.Options{}, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := tr.(backend.Sandbox).Exec(ctx, backend.ExecRequest{Cmd: []string{"mkdir", "-p", "sub dir"}})
	require.NoError(t, err)
	value := "a\tb\nc'd\"e\\f\x1b[0m ü $HOME"
	term, err := tr.Terminal(ctx, backend.TerminalRequest{
		Cmd:     []string{"sh", "-c", `printf '<%s>|' "$V" "$TERM" "${PWD##*/}"; exit 5`},
		Env:     map[string]string{"V": value},
		WorkDir: "sub dir",
	})
	require.NoError(t, err)
	defer term.Close()
	out, err := io.ReadAll(term)
	require.NoError(t, err)
	want := "<" + strings.ReplaceAll(value, "\n", "\r\n") + ">|<xterm>|<sub dir>|"
	assert.Equal(t, want, string(out))
	code, ok := term.ExitCode()
	assert.True(t, ok)
	assert.Equal(t, 5, code)
}

// TestTerminalWithoutSessions: an execd without bash sessions (the
// versions the specs here describe) gives errors.ErrUnsupported, saying
// what is missing.
func TestTerminalWithoutSessions(t *testing.T) {
	t.Parallel()
	tr := terminalSandbox(t, opensandboxtest.Options{NoTerminalSessions: true}, false)
	_, err := tr.Terminal(context.Background(), backend.TerminalRequest{Cmd: []string{"sh"}})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "no terminal sessions")
}

// TestTerminalOtherUser: the sessions run as execd's user, so a terminal
// as another user is refused, naming it.
func TestTerminalOtherUser(t *testing.T) {
	t.Parallel()
	tr := terminalSandbox(t, opensandboxtest.Options{}, false)
	_, err := tr.Terminal(context.Background(), backend.TerminalRequest{Cmd: []string{"sh"}, User: "65534"})
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), `user "65534"`)
}

// TestTerminalCloseEndsProgram: the terminals end with their client: a
// program still running when the terminal is closed is gone (its session
// deleted), as a new terminal's look at the process table shows.
func TestTerminalCloseEndsProgram(t *testing.T) {
	t.Parallel()
	tr := terminalSandbox(t, opensandboxtest.Options{}, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	term, err := tr.Terminal(ctx, backend.TerminalRequest{Cmd: []string{"sh", "-c", "echo $$ > pid; echo rea''dy; exec sleep 600"}})
	require.NoError(t, err)
	out := termbuf.Pump(term, 1<<20)
	_, ok := out.WaitFor(ctx, "ready")
	require.True(t, ok)
	require.NoError(t, term.Close())
	sb := tr.(backend.Sandbox)
	for {
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", `kill -0 "$(cat pid)" 2>/dev/null && echo alive || echo gone`}})
		require.NoError(t, err)
		if strings.TrimSpace(string(res.Stdout)) == "gone" {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the program outlived its closed terminal")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
