package main

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpSession serves a debugger over streamable HTTP, as gdbmcp serve does,
// and connects the official MCP client to it. call runs one tool with a
// deadline of its own, so a server that stopped answering fails the test
// instead of hanging it.
func httpSession(t *testing.T) (call func(name string, args map[string]any) (string, bool)) {
	t.Helper()
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("no gdb on this host")
	}
	d, err := newDebugger("gdb", t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	ts := httptest.NewServer(newHandler(d, slog.New(slog.DiscardHandler)))
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return func(name string, args map[string]any) (string, bool) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		start := time.Now()
		res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s %v: %v (after %s)", name, args, err, time.Since(start).Round(time.Millisecond))
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String(), res.IsError
	}
}

// Exit codes are shown in decimal: gdb's MI writes them in octal.
func TestExitCodesAreDecimal(t *testing.T) {
	call := httpSession(t)
	if got, isErr := call("set_program", map[string]any{"path": "/bin/sh"}); isErr {
		t.Fatalf("set_program: %s", got)
	}
	for _, code := range []string{"10", "255", "1", "8", "64"} {
		call("set_args", map[string]any{"args": "-c 'exit " + code + "'"})
		got, _ := call("run", nil)
		if !strings.Contains(got, "exited with code "+code+"\n") || strings.Contains(got, "code 0") {
			t.Errorf("exit %s: %q", code, got)
		}
	}
}

// A program that keeps running does not lock the server: while it runs,
// print answers, interrupt stops it, continue and kill work; continue
// after a timeout reports the stop that came meanwhile.
func TestRunningProgram(t *testing.T) {
	call := httpSession(t)
	must := func(name string, args map[string]any, want string) string {
		t.Helper()
		got, isErr := call(name, args)
		if isErr || !strings.Contains(got, want) {
			t.Fatalf("%s %v: want %q, got %q (tool error %v)", name, args, want, got, isErr)
		}
		return got
	}
	must("set_program", map[string]any{"path": "/bin/sleep", "args": "100000"}, "loaded")
	must("run", map[string]any{"timeout_sec": 1}, "still running after 1s")
	must("print", map[string]any{"expression": "1+1"}, "= 2")
	if got, isErr := call("next", nil); !isErr || !strings.Contains(got, "running") {
		t.Errorf("next while running: want a tool error saying it runs, got %q (error %v)", got, isErr)
	}
	must("gdb_command", map[string]any{"command": "interrupt"}, "SIGINT")
	must("backtrace", nil, "#0")
	must("continue", map[string]any{"timeout_sec": 0.5}, "still running")
	must("continue", map[string]any{"timeout_sec": 0.5}, "still running")
	must("kill", nil, "killed")
	must("gdb_command", map[string]any{"command": "interrupt"}, "not running")

	// run restarts a program that still runs.
	must("run", map[string]any{"timeout_sec": 0.5}, "still running")
	must("run", map[string]any{"timeout_sec": 0.5}, "still running")
	must("kill", nil, "killed")

	// A stop that comes while nobody waits is what continue reports.
	must("set_program", map[string]any{"path": "/bin/sh", "args": "-c 'sleep 1; exit 3'"}, "loaded")
	must("run", map[string]any{"timeout_sec": 0.2}, "still running")
	time.Sleep(2 * time.Second)
	must("continue", map[string]any{"timeout_sec": 5}, "exited with code 3")
}

// The SSE transport at /sse (the one OpenSage's gdb_mcp image serves, and
// GDB_MCP_SSE_URL names) gives an MCP client the same tools as /mcp.
func TestSSETransport(t *testing.T) {
	d, err := newDebugger("gdb", t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	ts := httptest.NewServer(newHandler(d, slog.New(slog.DiscardHandler)))
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := func(transport mcp.Transport) []string {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, transport, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range res.Tools {
			out = append(out, tl.Name)
		}
		slices.Sort(out)
		return out
	}
	sse := names(&mcp.SSEClientTransport{Endpoint: ts.URL + "/sse"})
	streamable := names(&mcp.StreamableClientTransport{Endpoint: ts.URL + "/mcp"})
	if !slices.Contains(sse, "run") || !slices.Equal(sse, streamable) {
		t.Errorf("tools over SSE %v, over streamable HTTP %v: want the same, with run", sse, streamable)
	}
}
