package server_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// Typed commands print markers split by quotes ("val-''$x" prints val-42),
// so the terminal's echo of what was typed never matches what the tests
// wait for.

var (
	terminalIDRE = regexp.MustCompile(`Started terminal (\S+) running`)
	pidRE        = regexp.MustCompile(`pid=(\d+)\n`)
)

// prompt is a shell's prompt at the end of the output so far.
const prompt = `[$#] $`

// startTerminal calls terminal_start and returns the terminal's ID and the
// answer.
func startTerminal(t *testing.T, call servertest.Caller, args map[string]any) (string, string) {
	t.Helper()
	text := servertest.Must(t, call, "terminal_start", args)
	m := terminalIDRE.FindStringSubmatch(text)
	require.NotNil(t, m, "terminal_start answer without a terminal ID: %s", text)
	return m[1], text
}

// termArgs are args plus a sandbox and terminal.
func termArgs(id, term string, args map[string]any) map[string]any {
	out := map[string]any{"sandbox_id": id}
	if term != "" {
		out["terminal_id"] = term
	}
	for k, v := range args {
		out[k] = v
	}
	return out
}

// assertPlain checks that an answer has no escape sequences or carriage
// returns left.
func assertPlain(t *testing.T, text string) {
	t.Helper()
	assert.NotContains(t, text, "\x1b", "escape sequences must be stripped")
	assert.NotContains(t, text, "\r", "carriage returns must be stripped")
}

// procAlive reports whether host process pid is running (a zombie is
// not): the local backend's programs are host processes.
func procAlive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z" && fields[0] != "X"
}

// stubbornProgram ignores hangups and prints its PID: only a kill ends it.
const stubbornProgram = "trap '' HUP; echo pid=$$; exec sleep 1000"

// startStubborn starts stubbornProgram on a terminal and returns its
// terminal ID and PID, running.
func startStubborn(t *testing.T, call servertest.Caller, id string) (string, int) {
	t.Helper()
	term, text := startTerminal(t, call, termArgs(id, "", map[string]any{"command": stubbornProgram, "wait_for": `pid=\d+\n`}))
	m := pidRE.FindStringSubmatch(text)
	require.NotNil(t, m, "no pid in: %s", text)
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.True(t, procAlive(pid), "the terminal's program %d must run", pid)
	return term, pid
}

func TestTerminalTools(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	call := servertest.HTTP(serveHTTP(t, s), "", "c")
	id := servertest.Create(t, call, nil)

	t.Run("ShellREPL", func(t *testing.T) {
		term, text := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "sh", "wait_for": prompt}))
		assert.Contains(t, text, "wait_for matched")
		out := servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{
			"input": "x=$((6*7)); echo val-''$x\n", "wait_for": "val-42"}))
		assert.Contains(t, out, "val-42\n[terminal "+term+": wait_for matched")
		assertPlain(t, out)
		// What came after the match is kept: the next prompt.
		out = servertest.Must(t, call, "terminal_read", termArgs(id, term, map[string]any{"wait_for": prompt}))
		assert.Contains(t, out, "wait_for matched")
		// Without wait_for a read returns after a quiet moment.
		out = servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "echo quiet-''one\n"}))
		assert.Contains(t, out, "quiet-one")
		// The answer ends where output stopped: the program is still there.
		out = servertest.Must(t, call, "terminal_read", termArgs(id, term, map[string]any{"quiet_ms": 50}))
		assert.Contains(t, out, "no output for 50 ms; the program is still running")
		out = servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "exit 5\n", "wait_for": "never-printed"}))
		assert.Contains(t, out, "the program ended with exit code 5; the terminal is closed")
		// Reported once, then forgotten.
		out = servertest.Fails(t, call, "terminal_read", termArgs(id, term, nil))
		assert.Contains(t, out, "Terminal '"+term+"' not found")
		assert.Contains(t, out, "terminal_start")
	})

	t.Run("CtrlC", func(t *testing.T) {
		term, _ := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "sh", "wait_for": prompt}))
		// The program prints once it runs in the foreground (it took the
		// terminal before it runs), then becomes sleep.
		servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{
			"input": "sh -c 'echo sleep''ing; exec sleep 100'\n", "wait_for": "sleeping"}))
		servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "\u0003"}))
		// Were sleep still running, the shell would not answer for 100 s.
		out := servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{
			"input": "echo after-''int\n", "wait_for": "after-int", "timeout": 60}))
		assert.Contains(t, out, "after-int\n[terminal "+term+": wait_for matched")
		servertest.Must(t, call, "terminal_close", termArgs(id, term, nil))
	})

	t.Run("ExitCode", func(t *testing.T) {
		term, text := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "echo bye-now; exit 7", "wait_for": "never-printed"}))
		assert.Contains(t, text, "bye-now\n")
		assert.Contains(t, text, "[terminal "+term+": the program ended with exit code 7; the terminal is closed]")
		assert.Contains(t, servertest.Fails(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "x"})), "not found")
	})

	t.Run("CloseKills", func(t *testing.T) {
		term, pid := startStubborn(t, call, id)
		out := servertest.Must(t, call, "terminal_close", termArgs(id, term, nil))
		assert.Contains(t, out, "Closed terminal "+term+": its program was killed.")
		waitFor(t, func() bool { return !procAlive(pid) })
		assert.Contains(t, servertest.Fails(t, call, "terminal_read", termArgs(id, term, nil)), "not found")
		assert.Contains(t, servertest.Fails(t, call, "terminal_close", termArgs(id, term, nil)), "not found")
	})

	t.Run("OutputBound", func(t *testing.T) {
		s := newServer(t, b, func(o *server.Options) { o.OutputLimit = 1000 })
		call := servertest.HTTP(serveHTTP(t, s), "", "c")
		id := servertest.Create(t, call, nil)
		_, text := startTerminal(t, call, termArgs(id, "", map[string]any{
			"command": `printf '\033[1;31m'; head -c 5000 /dev/zero | tr '\0' a; printf '\033[0m\r\n'; echo END`, "wait_for": "END"}))
		assert.Contains(t, text, "bytes of earlier output dropped")
		assert.Contains(t, text, "aaa\nEND\n")
		_, body, _ := strings.Cut(text, "...]\n")
		body, _, _ = strings.Cut(body, "[terminal ")
		assert.LessOrEqual(t, len(body), 1000+1, "one answer holds at most the output limit (and a newline)")
		assertPlain(t, text)
		servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	})

	t.Run("BadArguments", func(t *testing.T) {
		for _, c := range []struct {
			tool string
			args map[string]any
			want string
		}{
			{"terminal_start", map[string]any{"command": " "}, "command is empty"},
			{"terminal_start", map[string]any{"command": "sh", "wait_for": "("}, "not a valid regular expression"},
			{"terminal_start", map[string]any{"command": "sh", "quiet_ms": -1}, "quiet_ms must not be negative"},
			{"terminal_start", map[string]any{"command": "sh", "rows": -1}, "out of range"},
			{"terminal_send", map[string]any{"terminal_id": "x", "input": ""}, "input is empty"},
			{"terminal_read", map[string]any{"terminal_id": ""}, "terminal_id is empty"},
			{"terminal_read", map[string]any{"terminal_id": "nope"}, "Terminal 'nope' not found"},
			{"terminal_close", map[string]any{"terminal_id": "nope"}, "Terminal 'nope' not found"},
		} {
			assert.Contains(t, servertest.Fails(t, call, c.tool, termArgs(id, "", c.args)), c.want, "%s %v", c.tool, c.args)
		}
	})

	t.Run("Limit", func(t *testing.T) {
		id := servertest.Create(t, call, nil)
		var terms []string
		for range 16 {
			term, _ := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "exec sleep 1000", "quiet_ms": 1}))
			terms = append(terms, term)
		}
		out := servertest.Fails(t, call, "terminal_start", termArgs(id, "", map[string]any{"command": "sh"}))
		assert.Contains(t, out, "already has 16 terminals")
		assert.Contains(t, out, "terminal_close")
		servertest.Must(t, call, "terminal_close", termArgs(id, terms[0], nil))
		startTerminal(t, call, termArgs(id, "", map[string]any{"command": "exec sleep 1000", "quiet_ms": 1}))
		servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	})

	t.Run("Python", func(t *testing.T) {
		if _, err := exec.LookPath("python3"); err != nil {
			t.Skip("no python3 on this host")
		}
		term, text := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "python3 -q", "wait_for": ">>> $"}))
		assert.Contains(t, text, "wait_for matched")
		out := servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "print(6*7)\n", "wait_for": `(?m)^42$`}))
		assert.Contains(t, out, "wait_for matched")
		assertPlain(t, out)
		out = servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{
			"input": "def f(n):\n    return n * 2\n\n", "wait_for": ">>> $"}))
		assert.Contains(t, out, "wait_for matched")
		// Up to the prompt after the answer: a Ctrl-D that reaches the
		// terminal before Python reads again is taken by the terminal's
		// own line editing, not by Python's, and may end nothing (CI here:
		// the wait for 42 alone let it through before the prompt).
		out = servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "f(21)\n", "wait_for": `(?m)^42\n>>> $`}))
		assert.Contains(t, out, "wait_for matched")
		out = servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "\u0004", "wait_for": "never-printed"}))
		assert.Contains(t, out, "the program ended with exit code 0")
	})
}

// TestTerminalIsolation: another conversation cannot reach a sandbox's
// terminals, and its attempts change nothing for the owner.
func TestTerminalIsolation(t *testing.T) {
	b := localBackend(t)
	s := newServer(t, b, nil)
	base := serveHTTP(t, s)
	alice := servertest.HTTP(base, "", "alice")
	mallory := servertest.HTTP(base, "", "mallory")
	id := servertest.Create(t, alice, nil)
	term, _ := startTerminal(t, alice, termArgs(id, "", map[string]any{"command": "sh", "wait_for": prompt}))

	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"terminal_start", map[string]any{"command": "sh"}},
		{"terminal_send", map[string]any{"terminal_id": term, "input": "echo pwned\n"}},
		{"terminal_read", map[string]any{"terminal_id": term}},
		{"terminal_close", map[string]any{"terminal_id": term}},
	} {
		assert.Contains(t, servertest.Fails(t, mallory, c.tool, termArgs(id, "", c.args)), "was not found", c.tool)
	}
	out := servertest.Must(t, alice, "terminal_send", termArgs(id, term, map[string]any{"input": "echo still-''mine\n", "wait_for": "still-mine"}))
	assert.Contains(t, out, "wait_for matched")
	assert.NotContains(t, out, "pwned")
	servertest.Must(t, alice, "terminal_close", termArgs(id, term, nil))
}

// TestTerminalsEndWithSandbox: deleting a sandbox, or closing the server,
// kills its terminals' programs, even those that ignore hangups.
func TestTerminalsEndWithSandbox(t *testing.T) {
	b := localBackend(t)
	t.Run("Delete", func(t *testing.T) {
		s := newServer(t, b, nil)
		call := servertest.HTTP(serveHTTP(t, s), "", "c")
		id := servertest.Create(t, call, nil)
		_, pid1 := startStubborn(t, call, id)
		_, pid2 := startStubborn(t, call, id)
		servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
		waitFor(t, func() bool { return !procAlive(pid1) && !procAlive(pid2) })
	})
	t.Run("Close", func(t *testing.T) {
		s := newServer(t, b, nil)
		call := servertest.HTTP(serveHTTP(t, s), "", "c")
		id := servertest.Create(t, call, nil)
		_, pid := startStubborn(t, call, id)
		require.NoError(t, s.Close())
		waitFor(t, func() bool { return !procAlive(pid) })
		infos, err := b.List(context.Background(), backend.Filter{})
		require.NoError(t, err)
		assert.Len(t, infos, 1, "Close keeps the sandbox, not its terminals")
		require.NoError(t, must(b.Get(context.Background(), id)).Destroy(context.Background()))
	})
}

// TestTerminalWithoutAgent: with NoAgent the backend's own terminals
// serve, and without those the tools say what is missing.
func TestTerminalWithoutAgent(t *testing.T) {
	t.Run("BackendTerminal", func(t *testing.T) {
		b := localBackend(t)
		s := newServer(t, b, func(o *server.Options) { o.NoAgent = true })
		call := servertest.HTTP(serveHTTP(t, s), "", "c")
		id := servertest.Create(t, call, nil)
		term, _ := startTerminal(t, call, termArgs(id, "", map[string]any{"command": "sh", "wait_for": prompt}))
		out := servertest.Must(t, call, "terminal_send", termArgs(id, term, map[string]any{"input": "echo no-''agent\n", "wait_for": "no-agent"}))
		assert.Contains(t, out, "wait_for matched")
		_, pid := startStubborn(t, call, id)
		servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
		waitFor(t, func() bool { return !procAlive(pid) })
	})
	t.Run("NoTerminal", func(t *testing.T) {
		b := noTerminalBackend{localBackend(t)}
		s := newServer(t, b, func(o *server.Options) { o.NoAgent = true })
		call := servertest.HTTP(serveHTTP(t, s), "", "c")
		id := servertest.Create(t, call, nil)
		out := servertest.Fails(t, call, "terminal_start", termArgs(id, "", map[string]any{"command": "sh"}))
		assert.Contains(t, out, "terminals need the sandbox agent (sbxd)")
		assert.Contains(t, out, "Use execute")
		assert.Contains(t, servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "echo fine"}), "fine")
		servertest.Must(t, call, "delete_sandbox", map[string]any{"sandbox_id": id})
	})
}

// noTerminalBackend's sandboxes have no terminal of their own.
type noTerminalBackend struct{ backend.Backend }

// plainSandbox hides every optional interface of the sandbox it wraps.
type plainSandbox struct{ backend.Sandbox }

func (b noTerminalBackend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	sb, err := b.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return plainSandbox{sb}, nil
}

func (b noTerminalBackend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	sb, err := b.Backend.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return plainSandbox{sb}, nil
}
