// Package cli is sbx: make and use sandboxes from a sandboxkit config: run
// a command in a fresh sandbox (sbx run), keep sandboxes up, exec in them,
// copy files, use the agent tools, and reap what was left behind (sbx gc).
// cmd/sbx and cmd/sbx-full are its two builds (see Features).
package cli

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// stopSignals end sbx's work the way Ctrl-C does: the running command is
// killed and its sandbox removed. SIGHUP is a closed terminal.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// Main runs sbx with the build's features and exits.
func Main(f Features) {
	features = f
	keepHandOverMark(f)
	// The first stop signal cancels the context. Handling then stops, so a
	// second SIGINT or SIGTERM ends sbx at once (sbx gc reaps what that
	// leaves).
	ctx, cancel := context.WithCancelCause(context.Background())
	if stops := handledStopSignals(); len(stops) > 0 {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, stops...)
		go func() {
			s := <-sigs
			signal.Reset(stops...)
			cancel(interrupted{s})
		}()
	}
	// SIGPIPE is caught and dropped: a write to a broken pipe or socket then
	// fails with EPIPE instead of killing sbx. It is no stop signal: it comes
	// from a write to any closed pipe or socket (a backend's stream, an
	// agent that went away), not only stdout's. A reader of stdout that
	// went away stops sbx through the failed write (stopOnWriteError) or
	// watchStdout. (Caught, not ignored: an ignored signal would stay
	// ignored in the commands sbx starts.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	go watchStdout(func() { cancel(outputGone{errors.New("its reader went away")}) })
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// handledStopSignals are the stop signals sbx handles: those it was not
// started with ignored. A signal ignored from the start stays ignored, as
// in a program that does not handle it: nohup's SIGHUP, a background
// job's SIGINT (signal.Notify would install a handler and end that). A
// hangup that came before the handler was installed was otherwise lost
// (ignored then, handled after): a nohup'd `sbx pool keep` sent SIGHUP at
// its start ran on, while one sent it later stopped.
func handledStopSignals() []os.Signal {
	var stops []os.Signal
	for _, s := range stopSignals {
		if !signal.Ignored(s) {
			stops = append(stops, s)
		}
	}
	return stops
}

// watchStdout calls gone when stdout is a pipe or socket whose reader went
// away: a command that writes nothing for a while (sleep) is stopped as
// soon as `| head -1` is done with it, not at its next write. The kernel
// reports POLLERR (pipe) or POLLHUP (socket) on the writer's end.
func watchStdout(gone func()) {
	var st unix.Stat_t
	if unix.Fstat(1, &st) != nil {
		return
	}
	if mode := st.Mode & unix.S_IFMT; mode != unix.S_IFIFO && mode != unix.S_IFSOCK {
		return
	}
	fds := []unix.PollFd{{Fd: 1}}
	for {
		n, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			gone()
			return
		}
	}
}

// interrupted is the cancel cause when a signal arrived.
type interrupted struct{ sig os.Signal }

func (e interrupted) Error() string { return e.sig.String() + " received" }

// exitStatus is 128 + the signal's number, as shells report a command a
// signal ended.
func (e interrupted) exitStatus() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return exitInterrupted
}
