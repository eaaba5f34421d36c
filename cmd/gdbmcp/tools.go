package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// debugger is the state behind the MCP tools: one gdb, the program, its
// arguments and input, and the file its output goes to.
type debugger struct {
	gdbPath string
	workDir string
	noInit  bool // gdb -nx: no init files

	mu        sync.Mutex // one tool call at a time
	gdb       *gdbProc
	program   string
	args      string
	inputFile string
	outFile   string
	outRead   int64 // bytes of outFile already returned
	// unseen: the last run or continue returned while the program ran on;
	// its next stop has not been reported yet.
	unseen bool
}

// defaultStopWait bounds how long run and continue wait for the program
// to stop when the call gives no timeout.
const defaultStopWait = 30 * time.Second

func newDebugger(gdbPath, workDir string, noInit bool) (*debugger, error) {
	out, err := os.CreateTemp("", "gdbmcp-output-*.txt")
	if err != nil {
		return nil, err
	}
	out.Close()
	return &debugger{gdbPath: gdbPath, workDir: workDir, noInit: noInit, outFile: out.Name()}, nil
}

// proc returns the running gdb, starting one (and loading the program
// again) when there is none or it exited.
func (d *debugger) proc() (*gdbProc, error) {
	if d.gdb != nil && d.gdb.alive() {
		return d.gdb, nil
	}
	g, err := startGDB(d.gdbPath, d.workDir, d.noInit)
	if err != nil {
		return nil, err
	}
	d.gdb = g
	if d.program != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, _, err := g.run(ctx, "-file-exec-and-symbols "+quoteMI(d.program)); err != nil {
			return nil, fmt.Errorf("loading %s again: %w", d.program, err)
		}
	}
	return g, nil
}

func (d *debugger) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gdb != nil {
		d.gdb.close()
	}
	os.Remove(d.outFile)
}

// newOutput returns what the program wrote since the last call.
func (d *debugger) newOutput() string {
	f, err := os.Open(d.outFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(d.outRead, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	d.outRead += int64(len(b))
	return string(b)
}

// outputText is what the program wrote since the last call, headed for a
// tool's answer ("" when nothing).
func (d *debugger) outputText() string {
	if out := d.newOutput(); out != "" {
		return "\nprogram output:\n" + out
	}
	return ""
}

// text is a tool result of plain text.
func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

type setProgramIn struct {
	Path string `json:"path" jsonschema:"path of the program to debug, inside the sandbox (relative to the working directory)"`
	Args string `json:"args,omitempty" jsonschema:"command-line arguments, as a shell would split them"`
}

type setArgsIn struct {
	Args      string `json:"args" jsonschema:"command-line arguments of the program, as a shell would split them"`
	InputFile string `json:"input_file,omitempty" jsonschema:"file whose contents become the program's standard input"`
}

type runIn struct {
	TimeoutSec float64 `json:"timeout_sec,omitempty" jsonschema:"how long to wait for the program to stop (default 30)"`
}

type commandIn struct {
	Command string `json:"command" jsonschema:"a gdb command, as typed at the (gdb) prompt"`
}

type breakIn struct {
	Location string `json:"location" jsonschema:"where to stop: a function, FILE:LINE, or *ADDRESS"`
}

type printIn struct {
	Expression string `json:"expression" jsonschema:"a C expression in the current frame"`
}

type empty struct{}

// register adds the debugger's tools to s.
func (d *debugger) register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "set_program", Description: "Load a program (with its debug symbols) to debug. Optionally set its arguments."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in setProgramIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) { return d.setProgram(ctx, in) })
		})
	mcp.AddTool(s, &mcp.Tool{Name: "set_args", Description: "Set the program's arguments and, optionally, a file to read its standard input from. Takes effect at the next run."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in setArgsIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) {
				d.args, d.inputFile = in.Args, in.InputFile
				return text(fmt.Sprintf("arguments: %q; input file: %q", d.args, d.inputFile)), nil
			})
		})
	mcp.AddTool(s, &mcp.Tool{Name: "run", Description: "Start the program from the beginning and wait until it stops (breakpoint, signal, exit) or the timeout passes. Returns why it stopped, where, and its output."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) { return d.run(ctx, in) })
		})
	mcp.AddTool(s, &mcp.Tool{Name: "continue", Description: "Continue the stopped program and wait until it stops again or the timeout passes."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) { return d.resume(ctx, "-exec-continue", in) })
		})
	for _, step := range []struct{ name, mi, desc string }{
		{"next", "-exec-next", "Run to the next source line, stepping over calls."},
		{"step", "-exec-step", "Run to the next source line, stepping into calls."},
		{"finish", "-exec-finish", "Run until the current function returns."},
	} {
		mcp.AddTool(s, &mcp.Tool{Name: step.name, Description: step.desc},
			func(ctx context.Context, _ *mcp.CallToolRequest, in runIn) (*mcp.CallToolResult, any, error) {
				return d.locked(func() (*mcp.CallToolResult, error) { return d.resume(ctx, step.mi, in) })
			})
	}
	mcp.AddTool(s, &mcp.Tool{Name: "break", Description: "Set a breakpoint."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in breakIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) { return d.breakAt(ctx, in) })
		})
	mcp.AddTool(s, &mcp.Tool{Name: "backtrace", Description: "Show the call stack of the stopped program, innermost frame first."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) { return d.backtrace(ctx) })
		})
	mcp.AddTool(s, &mcp.Tool{Name: "print", Description: "Evaluate an expression in the current frame."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in printIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) {
				g, err := d.proc()
				if err != nil {
					return nil, err
				}
				rec, _, err := g.run(ctx, "-data-evaluate-expression "+quoteMI(in.Expression))
				if err != nil {
					return nil, err
				}
				return text(in.Expression + " = " + rec.str("value")), nil
			})
		})
	mcp.AddTool(s, &mcp.Tool{Name: "gdb_command", Description: "Run any gdb command (as at the (gdb) prompt) and return what it printed. Prefer the other tools for running the program."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in commandIn) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) { return d.command(ctx, in.Command) })
		})
	mcp.AddTool(s, &mcp.Tool{Name: "kill", Description: "Kill the program being debugged."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ empty) (*mcp.CallToolResult, any, error) {
			return d.locked(func() (*mcp.CallToolResult, error) {
				g, err := d.proc()
				if err != nil {
					return nil, err
				}
				if _, _, err := g.run(ctx, "-interpreter-exec console \"kill\""); err != nil {
					return nil, err
				}
				d.unseen = false
				g.drainStopped()
				return text("killed"), nil
			})
		})
}

// locked runs one tool call at a time; errors become tool errors (the
// agent sees them) rather than protocol errors.
func (d *debugger) locked(f func() (*mcp.CallToolResult, error)) (*mcp.CallToolResult, any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	res, err := f()
	return res, nil, err
}

func (d *debugger) setProgram(ctx context.Context, in setProgramIn) (*mcp.CallToolResult, error) {
	if in.Path == "" {
		return nil, errors.New("path: empty")
	}
	p := in.Path
	if !filepath.IsAbs(p) && d.workDir != "" {
		p = filepath.Join(d.workDir, p)
	}
	if _, err := os.Stat(p); err != nil {
		return nil, err
	}
	g, err := d.proc()
	if err != nil {
		return nil, err
	}
	_, out, err := g.run(ctx, "-file-exec-and-symbols "+quoteMI(p))
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", p, err)
	}
	d.program, d.args, d.inputFile = p, in.Args, ""
	return text(strings.TrimSpace("loaded " + p + "\n" + out)), nil
}

// shellQuote quotes s for the shell gdb starts the program with.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (d *debugger) run(ctx context.Context, in runIn) (*mcp.CallToolResult, error) {
	if d.program == "" {
		return nil, errors.New("no program: call set_program first")
	}
	g, err := d.proc()
	if err != nil {
		return nil, err
	}
	// gdb starts the program through a shell, which does the redirections:
	// output to a file this server returns, input from the chosen file.
	if err := os.Truncate(d.outFile, 0); err != nil {
		return nil, err
	}
	d.outRead = 0
	args := d.args + " > " + shellQuote(d.outFile) + " 2>&1"
	if d.inputFile != "" {
		args += " < " + shellQuote(d.inputFile)
	} else {
		args += " < /dev/null"
	}
	if _, _, err := g.run(ctx, "-interpreter-exec console "+quoteMI("set args "+args)); err != nil {
		return nil, fmt.Errorf("setting arguments: %w", err)
	}
	return d.resume(ctx, "-exec-run", in)
}

// resume sends a command that lets the program run (run, continue, next,
// ...) and reports the stop that follows.
func (d *debugger) resume(ctx context.Context, command string, in runIn) (*mcp.CallToolResult, error) {
	g, err := d.proc()
	if err != nil {
		return nil, err
	}
	// After a call that stopped waiting, continue waits for the stop that
	// was not reported (which may have come meanwhile) instead of
	// continuing past it.
	waitOnly := command == "-exec-continue" && d.unseen && (g.isRunning() || len(g.stopped) > 0)
	d.unseen = false
	switch {
	case waitOnly:
	case g.isRunning() && command != "-exec-run":
		return nil, errors.New("the program is running: call continue to wait for it to stop, gdb_command \"interrupt\" to stop it, or kill")
	default:
		g.drainStopped()
		if _, _, err := g.run(ctx, command); err != nil {
			return nil, err
		}
	}
	wait := defaultStopWait
	if in.TimeoutSec > 0 {
		wait = time.Duration(in.TimeoutSec * float64(time.Second))
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	rec, ok := g.waitStopped(wctx)
	g.outMu.Lock()
	console := g.console.String()
	g.outMu.Unlock()
	var b strings.Builder
	if !ok {
		d.unseen = g.isRunning()
		fmt.Fprintf(&b, "the program is still running after %s (call continue to wait longer, gdb_command \"interrupt\" to stop it, or kill)\n", wait)
	} else {
		b.WriteString(describeStop(rec))
	}
	if s := strings.TrimSpace(console); s != "" {
		s = octalExit.ReplaceAllStringFunc(s, func(m string) string {
			return "exited with code " + exitCode(octalExit.FindStringSubmatch(m)[1])
		})
		b.WriteString("\ngdb:\n" + s + "\n")
	}
	b.WriteString(d.outputText())
	return text(b.String()), nil
}

// describeStop explains a *stopped record in one or two lines.
func describeStop(rec record) string {
	reason := rec.str("reason")
	var b strings.Builder
	switch reason {
	case "exited-normally":
		return "the program exited normally (exit code 0)\n"
	case "exited":
		return fmt.Sprintf("the program exited with code %s\n", exitCode(rec.str("exit-code")))
	case "exited-signalled":
		return fmt.Sprintf("the program was killed by %s (%s)\n", rec.str("signal-name"), rec.str("signal-meaning"))
	case "signal-received":
		fmt.Fprintf(&b, "the program received %s (%s)", rec.str("signal-name"), rec.str("signal-meaning"))
	case "breakpoint-hit":
		fmt.Fprintf(&b, "stopped at breakpoint %s", rec.str("bkptno"))
	case "":
		b.WriteString("stopped")
	default:
		fmt.Fprintf(&b, "stopped (%s)", reason)
	}
	if f, ok := rec.vals["frame"].(map[string]any); ok {
		b.WriteString(" in " + describeFrame(f))
	}
	b.WriteString("\n")
	return b.String()
}

// octalExit is how gdb's console reports an exit code: in octal too.
var octalExit = regexp.MustCompile(`exited with code (0[0-7]*)\b`)

// exitCode turns MI's exit-code, which gdb writes in octal ("012" for exit
// 10, "0377" for 255), into decimal.
func exitCode(octal string) string {
	n, err := strconv.ParseUint(octal, 8, 32)
	if err != nil {
		return octal
	}
	return strconv.FormatUint(n, 10)
}

// describeFrame renders an MI frame tuple: "func (file:line) at addr".
func describeFrame(f map[string]any) string {
	s := func(k string) string { v, _ := f[k].(string); return v }
	out := s("func")
	if out == "" {
		out = "??"
	}
	if file := s("file"); file != "" {
		out += " (" + file + ":" + s("line") + ")"
	} else if from := s("from"); from != "" {
		out += " from " + from
	}
	if addr := s("addr"); addr != "" {
		out += " at " + addr
	}
	return out
}

func (d *debugger) breakAt(ctx context.Context, in breakIn) (*mcp.CallToolResult, error) {
	if in.Location == "" {
		return nil, errors.New("location: empty")
	}
	g, err := d.proc()
	if err != nil {
		return nil, err
	}
	rec, _, err := g.run(ctx, "-break-insert "+quoteMI(in.Location))
	if err != nil {
		return nil, err
	}
	bk, _ := rec.vals["bkpt"].(map[string]any)
	s := func(k string) string { v, _ := bk[k].(string); return v }
	msg := fmt.Sprintf("breakpoint %s at %s", s("number"), s("addr"))
	if fn := s("func"); fn != "" {
		msg += " in " + fn
	}
	if file := s("file"); file != "" {
		msg += " (" + file + ":" + s("line") + ")"
	}
	return text(msg), nil
}

func (d *debugger) backtrace(ctx context.Context) (*mcp.CallToolResult, error) {
	g, err := d.proc()
	if err != nil {
		return nil, err
	}
	rec, _, err := g.run(ctx, "-stack-list-frames")
	if err != nil {
		return nil, fmt.Errorf("backtrace: %w (is the program stopped?)", err)
	}
	frames, _ := rec.vals["stack"].([]any)
	var b strings.Builder
	for _, fr := range frames {
		f, ok := fr.(map[string]any)
		if !ok {
			continue
		}
		level, _ := f["level"].(string)
		fmt.Fprintf(&b, "#%s %s\n", level, describeFrame(f))
	}
	if b.Len() == 0 {
		return text("no stack"), nil
	}
	return text(b.String()), nil
}

func (d *debugger) command(ctx context.Context, command string) (*mcp.CallToolResult, error) {
	if strings.TrimSpace(command) == "" {
		return nil, errors.New("command: empty")
	}
	g, err := d.proc()
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(command) == "interrupt" {
		if !g.isRunning() {
			return text("the program is not running"), nil
		}
		g.drainStopped()
		if err := g.interrupt(ctx); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if rec, ok := g.waitStopped(wctx); ok {
			d.unseen = false
			return text(describeStop(rec) + d.outputText()), nil
		}
		return text("interrupt sent; the program has not stopped yet (call continue to wait for it)"), nil
	}
	_, out, err := g.run(ctx, "-interpreter-exec console "+quoteMI(command))
	if err != nil {
		if out != "" {
			return nil, fmt.Errorf("%w\n%s", err, out)
		}
		return nil, err
	}
	if out == "" {
		out = "(no output)"
	}
	return text(out), nil
}
