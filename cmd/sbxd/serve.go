//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/sandboxkit/sandboxkit/sbxd/agent"
)

// serveMain is `sbxd serve [--state-dir DIR]`: the agent, answering
// sandboxkit's requests multiplexed over its stdin and stdout (see package
// sbxd for the protocol and its client, sbxd/agent for the server). It
// exits when its stdin closes, once its background jobs have ended.
func serveMain(args []string) int {
	fl := flag.NewFlagSet("sbxd serve", flag.ContinueOnError)
	stateDir := fl.String("state-dir", "", "directory for background jobs (default $TMPDIR/sbxd-jobs)")
	listen := fl.String("listen", "", "serve clients that connect to this Unix socket instead of stdin/stdout")
	if err := fl.Parse(args); err != nil || fl.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: sbxd serve [--state-dir DIR] [--listen SOCKET]")
		return exitUsageError
	}
	srv := newAgent(*stateDir, "")
	// Its client ends it by closing stdin, not with SIGHUP; a broken
	// stdout ends the session, not the process. Notify (rather than
	// Ignore) leaves the commands it starts the default dispositions.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGPIPE, syscall.SIGHUP)
	go func() {
		for range signals {
		}
	}()
	// Bigger pipes mean fewer wakeups per megabyte on both ends of the
	// stream (where stdin and stdout are pipes or FIFOs, as with docker
	// exec); a refusal (pipe-max-size) only costs speed.
	if *listen != "" {
		return listenMain(srv, *listen)
	}
	for _, fd := range []uintptr{0, 1} {
		syscall.Syscall(syscall.SYS_FCNTL, fd, fSetPipeSize, pipeSize)
	}
	err := srv.Serve(context.Background(), stdio{agent.NewCoalescingWriter(os.Stdout)})
	srv.WaitJobs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbxd serve:", err)
		return 1
	}
	return 0
}

// F_SETPIPE_SZ (not in package syscall) and the size asked for.
const (
	fSetPipeSize = 1031
	pipeSize     = 1 << 20
)

// stdio is the agent's end of its stream: stdin, and stdout through w.
type stdio struct{ w io.Writer }

func (stdio) Read(p []byte) (int, error)    { return os.Stdin.Read(p) }
func (s stdio) Write(p []byte) (int, error) { return s.w.Write(p) }
func (stdio) Close() error                  { os.Stdin.Close(); return os.Stdout.Close() }

// listenMain serves clients connecting to the Unix socket at path (only
// its owner may: mode 0600) until the process is killed.
func listenMain(srv *agent.Server, path string) int {
	l, err := listenSocket(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbxd serve:", err)
		return 1
	}
	if err := srv.ServeListener(context.Background(), l); err != nil {
		fmt.Fprintln(os.Stderr, "sbxd serve:", err)
		return 1
	}
	return 0
}

// newAgent is the agent's server. The agent shares the sandbox's memory
// with the commands it runs: its heap is kept small even while large files
// stream through it.
func newAgent(stateDir, sandbox string) *agent.Server {
	debug.SetMemoryLimit(12 << 20)
	debug.SetGCPercent(50)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return agent.NewServer(agent.ServerOptions{StateDir: stateDir, Logger: log, Sandbox: sandbox})
}

// listenSocket listens on the Unix socket path (mode 0600), replacing one
// an earlier agent left. The socket appears at path only once it listens,
// so a client that sees it can connect.
func listenSocket(path string) (net.Listener, error) {
	os.Remove(path)
	l, err := net.Listen("unix", path+".tmp")
	if err == nil {
		err = os.Chmod(path+".tmp", 0o600)
	}
	if err == nil {
		err = os.Rename(path+".tmp", path)
	}
	if err != nil && l != nil {
		l.Close()
	}
	return l, err
}
