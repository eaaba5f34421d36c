// Package agentsock dials the Unix socket on which a sandbox's own agent
// (sbxd init --agent) listens, from the host, in a folder the sandbox can
// write: lite's agent folder, a container's volume on a local engine.
package agentsock

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DialNoFollow connects to the socket at p without following a link at p:
// the sandbox owns the folder and could put a link to any socket of the
// host there. Opening p with O_PATH|O_NOFOLLOW pins what is there; the
// connect goes through /proc/self/fd, which also lifts the 108-byte limit
// on socket paths.
func DialNoFollow(ctx context.Context, p string) (net.Conn, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s is not a socket: the sandbox replaced its agent's socket", p)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}

// Wait calls dial until it connects, while its error says the agent is not
// listening yet (the socket is missing, or refuses while it is replaced),
// for at most limit or until ctx ends. retry decides which errors mean
// "not yet"; nil means DialNoFollow's.
func Wait(ctx context.Context, limit time.Duration, dial func(context.Context) (net.Conn, error), retry func(error) bool) (net.Conn, error) {
	if retry == nil {
		retry = NotYet
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for delay := 200 * time.Microsecond; ; delay = min(2*delay, 2*time.Millisecond) {
		conn, err := dial(ctx)
		if err == nil {
			return conn, nil
		}
		if !retry(err) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the agent did not listen: %w (last: %v)", context.Cause(ctx), err)
		case <-time.After(delay):
		}
	}
}

// NotYet reports whether a local dial failed because the agent does not
// listen yet.
func NotYet(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)
}
