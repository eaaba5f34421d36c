// Command gdbmcp is gdb behind an MCP server: the gdb_mcp initializer
// copies it into a sandbox whose image has gdb and starts it there, so an
// agent can debug a program in the sandbox through MCP tools: set_program,
// set_args (arguments and an input file), run, break, continue, next,
// step, finish, backtrace, print, gdb_command and kill.
//
//	gdbmcp serve [--listen ADDR] [--gdb PATH] [--workdir DIR] [--log FILE] [--detach]
//	    Serve MCP on ADDR (default 0.0.0.0:1111): streamable HTTP at /mcp,
//	    the older SSE transport at /sse. With --detach it starts itself in
//	    the background (a session of its own, output to --log) and exits
//	    once the server accepts connections, so a plain exec can start it.
//	gdbmcp version
//
// It drives gdb through its machine interface (gdb --interpreter=mi3),
// one gdb for all clients, one tool call at a time. The program's output
// goes to a file and is returned with each stop.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// version is reported in the MCP handshake.
const version = "1"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gdbmcp serve [--listen ADDR] [--gdb PATH] [--workdir DIR] [--log FILE] [--detach] | gdbmcp version")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serveMain(os.Args[2:]))
	case "version":
		fmt.Println("gdbmcp", version)
	default:
		fmt.Fprintf(os.Stderr, "gdbmcp: unknown command %q (want serve or version)\n", os.Args[1])
		os.Exit(2)
	}
}

// envChild marks the background copy --detach starts.
const envChild = "GDBMCP_DETACHED"

func serveMain(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "0.0.0.0:1111", "address to serve MCP on")
	gdb := fs.String("gdb", "gdb", "gdb program")
	workDir := fs.String("workdir", "", "working directory of gdb and the program (default: the current one)")
	logPath := fs.String("log", "", "with --detach: file for the server's output (default /tmp/gdbmcp.log)")
	detach := fs.Bool("detach", false, "start in the background and exit once serving")
	noInit := fs.Bool("nx", false, "do not read gdb's init files (gdb -nx); by default an image's gdbinit (pwndbg, gef) loads")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *detach && os.Getenv(envChild) == "" {
		return detachSelf(args, *listen, *logPath)
	}
	if _, err := exec.LookPath(*gdb); err != nil {
		fmt.Fprintf(os.Stderr, "gdbmcp: %v (install gdb in the image, or pass --gdb)\n", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	d, err := newDebugger(*gdb, *workDir, *noInit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcp:", err)
		return 1
	}
	defer d.close()
	mux := newHandler(d, logger)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcp:", err)
		return 1
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	logger.Info("gdbmcp serving", "addr", ln.Addr().String(), "gdb", *gdb)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "gdbmcp:", err)
		return 1
	}
	return 0
}

// newHandler serves d's tools: streamable HTTP at /mcp, SSE at /sse.
func newHandler(d *debugger, logger *slog.Logger) http.Handler {
	server := mcp.NewServer(&mcp.Implementation{Name: "gdbmcp", Version: version}, &mcp.ServerOptions{Logger: logger})
	d.register(server)
	mux := http.NewServeMux()
	getServer := func(*http.Request) *mcp.Server { return server }
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(getServer, nil))
	mux.Handle("/sse", mcp.NewSSEHandler(getServer, nil))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "gdbmcp ok") })
	return mux
}

// detachSelf starts this program again in a session of its own with its
// output in logPath, without the caller's exec marker (so the exec that
// started it can end without taking it along), and waits until it
// accepts connections on listen.
func detachSelf(args []string, listen, logPath string) int {
	if logPath == "" {
		logPath = "/tmp/gdbmcp.log"
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcp:", err)
		return 1
	}
	defer logf.Close()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcp:", err)
		return 1
	}
	cmd := exec.Command(self, append([]string{"serve"}, args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SBX_EXEC_ID=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envChild+"=1")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcp:", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gdbmcp: --listen:", err)
		return 1
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	addr := net.JoinHostPort(host, port)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logPath)
			fmt.Fprintf(os.Stderr, "gdbmcp: the server exited (%v):\n%s", err, out)
			return 1
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			fmt.Printf("gdbmcp serving on %s (pid %d, log %s)\n", listen, cmd.Process.Pid, logPath)
			return 0
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "gdbmcp: the server did not accept connections on %s within 30s (log %s)\n", addr, logPath)
	return 1
}
