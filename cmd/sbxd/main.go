//go:build linux

// Command sbxd is sandboxkit's in-sandbox helper: a small static binary
// (CGO_ENABLED=0) that backends copy into each sandbox at create time, so
// that no image needs changing (a scratch image with no shell works).
//
// The native backend puts it at /.sbx/sbxd (see internal/sbxdbin for how
// the library finds the binary without a Go toolchain). It has three modes:
//
//	sbxd init [--agent SOCKET | --agent-tls FILE [--sandbox ID]] [-- ARGV...]
//	    The container's PID 1. Without ARGV it keeps the sandbox alive until
//	    SIGTERM or SIGINT. With ARGV it runs that command, forwards signals to
//	    it and exits with its status. Either way it reaps every orphan that
//	    is re-parented to it, so killed process trees leave no zombies. With
//	    --agent it is also the agent, listening on SOCKET from its first
//	    moment (as `sbxd serve --listen SOCKET` would, in the same
//	    process), so clients on the host can dial it instead of starting
//	    one. --sandbox names the sandbox in the agent's hello, so a client
//	    that dialled a socket the sandbox could have replaced (with a link
//	    to another sandbox's) sees whose agent answered. --agent-tls
//	    listens on TCP port agenttls.Port instead, with TLS on the
//	    credentials in FILE (a line of agenttls.Creds.Line), for clients
//	    that reach the sandbox's network straight (the k8s backend's,
//	    which put FILE there); without FILE it is plain sbxd init.
//
//	sbxd exec [--id ID] [--timeout DURATION] [--grace DURATION] [--user USER] -- ARGV...
//	    Runs ARGV in a process group of its own with SBX_EXEC_ID=ID in its
//	    environment, forwards SIGTERM/SIGINT/SIGHUP/SIGQUIT to the group, and
//	    exits with ARGV's status (128+N when killed by signal N, 127 when the
//	    program does not exist, 126 when it cannot be run). When the timeout
//	    runs out it kills the group and every process carrying the marker
//	    (children that called setsid too) with SIGKILL and exits 124, like
//	    timeout(1). After ARGV exits, output of background children that
//	    still hold its stdout/stderr is passed on for --grace (default
//	    250ms), then sbxd exits so the caller's stream ends. --user runs
//	    ARGV as another user (resolved in the sandbox's /etc/passwd, HOME
//	    set to theirs; needs root): how backends whose exec API has no user
//	    (Kubernetes) switch users. A user that cannot be had exits 125.
//
//	sbxd ls [-0] DIR
//	    Lists DIR without following symlinks, one record per entry:
//	    "RAWMODE-HEX SIZE MTIME-SECONDS NAME" (stat -c '%f %s %Y %n' style),
//	    so sandboxes without a shell or find can list directories. A record
//	    ends with a newline, except that one whose name holds a newline is
//	    framed by NUL bytes ("\0RECORD\0"); with -0 every record is, so a
//	    caller that asks for -0 learns from the usage error (exit code 125)
//	    of an older sbxd that its names are not framed. Exit code 102: DIR
//	    does not exist; 104: permission denied; 105: not a directory (the
//	    codes of package backend's fallback scripts); 108: a symlink loop.
//
//	sbxd stat PATH
//	    Describes PATH, following symlinks, in one NUL-framed record of the
//	    same form (NAME is PATH as given). Exit codes as for ls.
//
//	sbxd cat PATH
//	    Prints "ok" and a newline, then the bytes of PATH, a regular file
//	    (symlinks followed; /proc files are read to their end whatever size
//	    they report). Exit code 103: a directory; 107: not a regular file (a
//	    named pipe, socket or device: refused at once rather than blocking);
//	    the others as for ls. Nothing is printed before a failure.
//
//	sbxd readlink PATH
//	    Prints the target of the symlink PATH as stored, with no newline.
//	    Exit code 109: PATH is not a symlink; the others as for ls.
//
//	sbxd dial HOST:PORT TIMEOUT
//	    Exits 0 when a TCP connection to HOST:PORT opens within TIMEOUT,
//	    else 1: how a backend checks from inside a sandbox that a network
//	    it cut off (k8s: network = "none") really is.
//
//	sbxd kill ID
//	    Kills every process whose environment carries SBX_EXEC_ID=ID: how a
//	    client cancels a command (the engine's exec API has no kill), also
//	    when the daemon is remote.
//
// The fast multiplexed mode (exec and file operations over one stream) is a
// later addition.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/internal/agenttls"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
	"github.com/sandboxkit/sandboxkit/internal/execframe"
	"github.com/sandboxkit/sandboxkit/internal/outpipe"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/sbxd/agent"
)

// EnvExecID is the marker every process of one wrapped command carries.
const EnvExecID = "SBX_EXEC_ID"

// Exit codes, as timeout(1) and POSIX shells use them.
const (
	exitTimeout    = 124
	exitCannotRun  = 126
	exitNotFound   = 127
	exitUsageError = 125
)

func main() {
	if len(os.Args) < 2 {
		os.Exit(initMain(nil, "", ""))
	}
	switch os.Args[1] {
	case "init":
		args, agentSocket, sandbox := os.Args[2:], "", ""
		if len(args) >= 2 && (args[0] == "--agent" || args[0] == "--agent-tls") {
			agentSocket, args = args[1], args[2:]
			if os.Args[2] == "--agent-tls" {
				agentSocket = "tls:" + agentSocket
			}
		}
		if len(args) >= 2 && args[0] == "--sandbox" {
			sandbox, args = args[1], args[2:]
		}
		os.Exit(initMain(afterDashes(args), agentSocket, sandbox))
	case "exec":
		os.Exit(execMain(os.Args[2:]))
	case "serve":
		os.Exit(serveMain(os.Args[2:]))
	case "kill":
		if len(os.Args) != 3 || os.Args[2] == "" {
			usage("sbxd kill ID")
		}
		if left := procfs.KillByEnv(EnvExecID, os.Args[2]); left > 0 {
			fmt.Fprintf(os.Stderr, "sbxd: %d processes survived SIGKILL\n", left)
			os.Exit(1)
		}
	case "ls", "stat", "cat", "readlink":
		os.Exit(fileMain(os.Args[1], os.Args[2:]))
	case "dial":
		if len(os.Args) != 4 {
			usage("sbxd dial HOST:PORT TIMEOUT")
		}
		os.Exit(dialMain(os.Args[2], os.Args[3]))
	case "egress":
		// A sandbox's egress enforcer, run by the backend outside the
		// sandbox (package egressctl).
		if err := egressctl.Run(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "egress-ctl":
		// Talks to an enforcer in the same container (egressctl.Ctl).
		os.Exit(egressctl.Ctl(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	case "version":
		fmt.Printf("sbxd %d\n", execframe.SbxdVersion)
	default:
		usage("sbxd init|exec|serve|ls|stat|cat|readlink|kill|dial|egress|egress-ctl|version")
	}
}

func usage(msg string) {
	fmt.Fprintln(os.Stderr, "usage:", msg)
	os.Exit(exitUsageError)
}

func afterDashes(args []string) []string {
	if len(args) > 0 && args[0] == "--" {
		return args[1:]
	}
	return args
}

var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT}

// initMain is PID 1: reap orphans, and either wait for a stop signal or run
// argv and exit with its status.
func initMain(argv []string, agentSocket, sandbox string) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	if agentSocket != "" {
		return initAgentMain(argv, agentSocket, sandbox, sigs)
	}
	mainPID := 0
	if len(argv) > 0 {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "sbxd init: %v\n", err)
			return startErrorCode(err)
		}
		mainPID = cmd.Process.Pid
	}
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			if mainPID == 0 {
				return 0
			}
			_ = syscall.Kill(mainPID, sig.(syscall.Signal))
			continue
		}
		// Reap everything that has exited; one SIGCHLD may stand for many.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			if pid == mainPID {
				return statusCode(ws)
			}
		}
	}
	return 0
}

// initAgentMain is PID 1 that is also the agent (sbxd init --agent): it
// listens on socket before anything else, so that a client can connect as
// soon as the sandbox starts, serves it in this process (a separate agent
// process would cost a second program start), runs argv if given, and
// reaps orphans: only those, since the agent waits for its own commands
// (see agent.ReapOrphans).
func initAgentMain(argv []string, socket, sandbox string, sigs chan os.Signal) int {
	agent.EnableReaping()
	listen := listenSocket
	if file, ok := strings.CutPrefix(socket, "tls:"); ok {
		listen = func(string) (net.Listener, error) { return listenTLS(file) }
	}
	if l, err := listen(socket); err != nil {
		fmt.Fprintf(os.Stderr, "sbxd init: the agent: %v\n", err)
	} else {
		srv := newAgent("", sandbox)
		go func() {
			if err := srv.ServeListener(context.Background(), l); err != nil {
				fmt.Fprintf(os.Stderr, "sbxd init: the agent: %v\n", err)
			}
		}()
	}
	mainPID, exited := 0, make(chan int, 1)
	if len(argv) > 0 {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := agent.StartCommand(cmd); err != nil {
			fmt.Fprintf(os.Stderr, "sbxd init: %v\n", err)
			return startErrorCode(err)
		}
		mainPID = cmd.Process.Pid
		go func() {
			agent.WaitCommand(cmd)
			exited <- statusCode(cmd.ProcessState.Sys().(syscall.WaitStatus))
		}()
	}
	for {
		select {
		case code := <-exited:
			return code
		case sig := <-sigs:
			switch {
			case sig == syscall.SIGCHLD:
				agent.ReapOrphans()
			case mainPID == 0:
				return 0
			default:
				_ = syscall.Kill(mainPID, sig.(syscall.Signal))
			}
		}
	}
}

// listenTLS listens on agenttls.Port with the credentials in file.
func listenTLS(file string) (net.Listener, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	c, err := agenttls.Parse(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, err
	}
	return agenttls.Listen(fmt.Sprintf(":%d", agenttls.Port), c)
}

func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func startErrorCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return exitNotFound
	}
	return exitCannotRun
}

func execMain(args []string) int {
	fl := flag.NewFlagSet("sbxd exec", flag.ContinueOnError)
	id := fl.String("id", "", "marker value for SBX_EXEC_ID")
	timeout := fl.Duration("timeout", 0, "kill the command's process tree after this long and exit 124")
	grace := fl.Duration("grace", 250*time.Millisecond, "how long to pass on background output after the command exits")
	userSpec := fl.String("user", "", "run ARGV as this user: name, uid, name:group or uid:gid (needs root)")
	framed := fl.Bool("framed", false, "frame stdin, stdout, stderr and the exit code (internal/execframe), and exit once the caller closes stdin after the exit frame")
	linger := fl.Duration("linger", 30*time.Second, "with --framed, how long to wait for the caller to close stdin after the exit frame")
	if err := fl.Parse(args); err != nil {
		return exitUsageError
	}
	argv := fl.Args()
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "usage: sbxd exec [--id ID] [--timeout D] [--user USER] [--framed] -- ARGV...")
		return exitUsageError
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = os.Environ()
	if *id != "" {
		cmd.Env = append(cmd.Env, EnvExecID+"="+*id)
	}
	// stdin is handed over as is; stdout and stderr go through pipes that
	// sbxd copies, so that a background child holding them cannot keep the
	// caller's stream open after the command exits: after the command,
	// output is passed on for --grace, then what the pipes still hold (see
	// internal/outpipe: a slow reader on the caller's side loses nothing).
	// Framed, stdin goes through a pipe too, and the output streams share
	// sbxd's stdout.
	cmd.Stdin = os.Stdin
	var stdout, stderr io.Writer = os.Stdout, os.Stderr
	var frames *execframe.Writer
	var stdinEnded <-chan struct{}
	if *framed {
		frames = execframe.NewWriter(os.Stdout)
		stdout, stderr = frames.Stream(execframe.KindStdout), frames.Stream(execframe.KindStderr)
		r, w, err := os.Pipe()
		if err != nil {
			fmt.Fprintf(os.Stderr, "sbxd: %v\n", err)
			return exitCannotRun
		}
		defer r.Close()
		cmd.Stdin = r
		stdinEnded = execframe.PumpStdin(os.Stdin, w)
	}
	outP, err := outpipe.New(stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sbxd: %v\n", err)
		return exitCannotRun
	}
	errP, err := outpipe.New(stderr)
	if err != nil {
		outP.Close()
		fmt.Fprintf(os.Stderr, "sbxd: %v\n", err)
		return exitCannotRun
	}
	cmd.Stdout, cmd.Stderr = outP.W(), errP.W()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if *userSpec != "" {
		cred, home, err := agent.LookupUser(*userSpec)
		if err != nil {
			outP.Close()
			errP.Close()
			fmt.Fprintf(stderr, "sbxd exec: %v\n", err)
			return endFramed(frames, stdinEnded, *linger, exitUsageError)
		}
		cmd.SysProcAttr.Credential = cred
		if home != "" {
			cmd.Env = append(cmd.Env, "HOME="+home)
		}
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	if err := cmd.Start(); err != nil {
		outP.Close()
		errP.Close()
		fmt.Fprintf(stderr, "sbxd: %s: %v\n", argv[0], unwrapExecErr(err))
		return endFramed(frames, stdinEnded, *linger, startErrorCode(err))
	}
	outP.Started()
	errP.Started()
	code := superviseExec(cmd, *timeout, *id, sigs)
	outpipe.Finish(*grace, outP, errP)
	return endFramed(frames, stdinEnded, *linger, code)
}

// endFramed ends a framed exec (frames not nil) with the exit frame, then
// waits up to linger for the caller to close stdin, which it does once it
// read that frame: exiting earlier could cut off output still on its way.
// It returns code.
func endFramed(frames *execframe.Writer, stdinEnded <-chan struct{}, linger time.Duration, code int) int {
	if frames == nil {
		return code
	}
	if frames.Exit(code) != nil {
		return code // the caller is gone
	}
	t := time.NewTimer(linger)
	defer t.Stop()
	select {
	case <-stdinEnded:
	case <-t.C:
	}
	return code
}

// superviseExec waits for the started cmd, passing sigs on to its process
// group, and returns sbxd exec's exit code: cmd's own, or 124 after timeout
// (if > 0) killed its process tree (and every process marked with id, when
// set). When cmd exits by itself, background children (servers started
// with &) keep running.
func superviseExec(cmd *exec.Cmd, timeout time.Duration, id string, sigs <-chan os.Signal) int {
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	for {
		select {
		case <-done:
			return exitCodeOf(cmd.ProcessState)
		case <-timer:
			// The tree first (see procfs.KillTree), then the group.
			key := ""
			if id != "" {
				key = EnvExecID
			}
			procfs.KillTree(pgid, key, id)
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
			return exitTimeout
		case sig := <-sigs:
			_ = syscall.Kill(-pgid, sig.(syscall.Signal))
		}
	}
}

func exitCodeOf(ps *os.ProcessState) int {
	if ps == nil {
		return exitCannotRun
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return statusCode(ws)
	}
	return ps.ExitCode()
}

// unwrapExecErr drops exec's "exec: " prefix from the error for a message in
// the style of a shell's.
func unwrapExecErr(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		if errors.Is(ee.Err, exec.ErrNotFound) {
			return errors.New("command not found")
		}
		return ee.Err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// dialMain is `sbxd dial HOST:PORT TIMEOUT`: exit 0 when a TCP connection
// to HOST:PORT opens within TIMEOUT, 1 when it does not. Backends use it
// to check from inside a sandbox that its network is really cut off.
func dialMain(addr, timeout string) int {
	d, err := time.ParseDuration(timeout)
	if err != nil {
		usage("sbxd dial HOST:PORT TIMEOUT (a duration such as 2s)")
	}
	conn, err := net.DialTimeout("tcp", addr, d)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbxd dial:", err)
		return 1
	}
	conn.Close()
	return 0
}
