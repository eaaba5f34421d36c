package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestParseRecord covers the MI shapes the tools read.
func TestParseRecord(t *testing.T) {
	r, ok := parseRecord(`12*stopped,reason="signal-received",signal-name="SIGSEGV",frame={addr="0x1",func="crash",args=[{name="line",value="0x2 \"boom\\n\""}],file="crash.c",line="9"},thread-id="1"`)
	if !ok || r.token != 12 || r.kind != '*' || r.class != "stopped" || r.str("signal-name") != "SIGSEGV" {
		t.Fatalf("stopped record: %+v %v", r, ok)
	}
	f := r.vals["frame"].(map[string]any)
	if describeFrame(f) != "crash (crash.c:9) at 0x1" {
		t.Errorf("frame: %q", describeFrame(f))
	}
	args := f["args"].([]any)
	if v := args[0].(map[string]any)["value"]; v != "0x2 \"boom\\n\"" {
		t.Errorf("nested string: %q", v)
	}
	r, ok = parseRecord(`^done,stack=[frame={level="0",func="a"},frame={level="1",func="b"}]`)
	if !ok || len(r.vals["stack"].([]any)) != 2 {
		t.Errorf("list of results: %+v", r)
	}
	r, ok = parseRecord(`~"Breakpoint 1 at 0x1: file a.c, line 3.\n"`)
	if !ok || r.text != "Breakpoint 1 at 0x1: file a.c, line 3.\n" {
		t.Errorf("console: %+v", r)
	}
	if _, ok := parseRecord("(gdb) "); ok {
		t.Error("the prompt parsed as a record")
	}
	if quoteMI("a\"b\\c\n") != `"a\"b\\c\n"` {
		t.Errorf("quoteMI: %s", quoteMI("a\"b\\c\n"))
	}
}

// TestToolsWithHostGDB debugs a crashing C program through the MCP tools
// over an in-memory transport, with the host's gdb and gcc (skipped
// without them). The container end-to-end test is in the root package.
func TestToolsWithHostGDB(t *testing.T) {
	for _, tool := range []string{"gdb", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this host", tool)
		}
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "crash")
	if out, err := exec.Command("gcc", "-g", "-O0", "-o", prog, "testdata/crash.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	input := filepath.Join(dir, "input.txt")
	os.WriteFile(input, []byte("boom\n"), 0o644)

	d, err := newDebugger("gdb", dir, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	server := mcp.NewServer(&mcp.Implementation{Name: "gdbmcp", Version: version}, nil)
	d.register(server)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	call := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		if res.IsError {
			t.Fatalf("%s: tool error: %s", name, b.String())
		}
		return b.String()
	}
	call("set_program", map[string]any{"path": "crash"})
	call("set_args", map[string]any{"args": "first", "input_file": input})
	if got := call("break", map[string]any{"location": "parse"}); !strings.Contains(got, "breakpoint 1") {
		t.Errorf("break: %q", got)
	}
	got := call("run", nil)
	if !strings.Contains(got, "breakpoint 1") || !strings.Contains(got, "parse") {
		t.Errorf("run: want a stop at breakpoint 1 in parse, got %q", got)
	}
	if !strings.Contains(got, "args: 2 first") {
		t.Errorf("run: want the program's output, got %q", got)
	}
	got = call("continue", nil)
	if !strings.Contains(got, "SIGSEGV") {
		t.Errorf("continue: want SIGSEGV, got %q", got)
	}
	bt := call("backtrace", nil)
	lines := strings.Split(strings.TrimSpace(bt), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "crash (") || !strings.Contains(lines[1], "parse") || !strings.Contains(lines[2], "main") {
		t.Errorf("backtrace: want crash, parse, main; got\n%s", bt)
	}
	if got := call("print", map[string]any{"expression": "line[0]"}); !strings.Contains(got, "'b'") {
		t.Errorf("print: %q", got)
	}
	if got := call("gdb_command", map[string]any{"command": "info breakpoints"}); !strings.Contains(got, "parse") {
		t.Errorf("gdb_command: %q", got)
	}
	// A tool error, not a protocol error, for a bad location.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "break", Arguments: map[string]any{"location": "no_such_function_xyz"}})
	if err != nil || !res.IsError {
		t.Errorf("break at a missing function: want a tool error, got %v, %+v", err, res)
	}
	call("kill", nil)
	// Run again without breakpoints' effect on exit: delete them, clean input.
	call("gdb_command", map[string]any{"command": "delete"})
	os.WriteFile(input, []byte("ok\n"), 0o644)
	if got := call("run", nil); !strings.Contains(got, "exited normally") {
		t.Errorf("second run: %q", got)
	}
}

// TestGDBInit: gdb reads the user's gdbinit (an image's pwndbg) unless the
// server runs with --nx.
func TestGDBInit(t *testing.T) {
	if _, err := exec.LookPath("gdb"); err != nil {
		t.Skip("no gdb on this host")
	}
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".gdbinit"), []byte("set $sbx_init_marker = 4242\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	for _, noInit := range []bool{false, true} {
		d, err := newDebugger("gdb", home, noInit)
		if err != nil {
			t.Fatal(err)
		}
		g, err := d.proc()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, out, err := g.run(ctx, `-interpreter-exec console "print $sbx_init_marker"`)
		cancel()
		d.close()
		if err != nil {
			t.Fatal(err)
		}
		loaded := strings.Contains(out, "4242")
		if loaded == noInit {
			t.Errorf("noInit=%v: print of the gdbinit's variable gave %q", noInit, out)
		}
	}
}
