package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/pipeterm"
)

// Terminal runs req on a terminal of the exec subresource (TTY with
// resize, as kubectl exec -it). sbxd's terminals come first where the
// caller wraps the sandbox with sbxd; these end with their client, and
// Kill and Close kill the program by its marker where the pod has sbxd.
// The environment and working directory need /bin/sh in the image (the
// exec API sets neither), and another user is refused (it needs sbxd).
func (s *Sandbox) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	switch {
	case s.destroyed.Load():
		return nil, s.opErr("terminal", s.gone())
	case req.Check() != nil:
		return nil, s.opErr("terminal", req.Check())
	case req.User != "":
		return nil, s.opErr("terminal", fmt.Errorf("%w: a terminal as another user needs sbxd (the exec API runs as the container's user)", errors.ErrUnsupported))
	}
	execID := randomHex(8)
	env := req.EnvWithTerm()
	env[envExecID] = execID
	dir := ""
	if req.WorkDir != "" {
		dir = s.resolve(req.WorkDir)
	}
	argv := withSize(withEnv(req.Cmd, env, dir), req.Size)
	var q *pipeterm.SizeQueue
	done := make(chan struct{})
	run := func(ctx context.Context, stdin io.Reader, stdout io.Writer) (int, error) {
		defer close(done)
		return s.b.execStream(ctx, s.pod, s.container, argv, remotecommand.StreamOptions{
			Stdin: stdin, Stdout: stdout, Tty: true, TerminalSizeQueue: sizeQueue{q, s.b.holdSizes},
		})
	}
	q = pipeterm.NewSizeQueue(req.Size, done)
	t := pipeterm.Start(execID, run, pipeterm.Ops{
		Resize: func(_ context.Context, size backend.TermSize) error {
			if size.Rows <= 0 || size.Cols <= 0 {
				return s.opErr("terminal", fmt.Errorf("%w: size %dx%d", backend.ErrInvalidConfig, size.Cols, size.Rows))
			}
			q.Push(size)
			return nil
		},
		Kill: func(context.Context) error { s.kill(execID); return nil },
	})
	return t, nil
}

// sizeScript gives a terminal its first size, then runs "$@" (sh -c
// sizeScript sh ROWS COLS ARGV...). The exec API has no size at the
// start: sizes go on a stream of their own, and the kubelet may apply the
// first one after the program first asked (a shell's first command then
// saw 0x0 under load, as kubectl exec -it does). stty sets it unless a
// size already arrived; an image without stty keeps the race.
const sizeScript = `case $(stty size 2>/dev/null) in ""|"0 0") stty rows "$1" cols "$2" 2>/dev/null;; esac
shift 2; exec "$@"`

// withSize wraps argv in sizeScript when size is set.
func withSize(argv []string, size backend.TermSize) []string {
	if size.Rows <= 0 || size.Cols <= 0 {
		return argv
	}
	return append([]string{"/bin/sh", "-c", sizeScript, "sh", strconv.Itoa(size.Rows), strconv.Itoa(size.Cols)}, argv...)
}

// sizeQueue is client-go's view of a pipeterm.SizeQueue. Sizes wait for
// held to close when it is set (tests: a kubelet that applies them late).
type sizeQueue struct {
	q    *pipeterm.SizeQueue
	held <-chan struct{}
}

func (s sizeQueue) Next() *remotecommand.TerminalSize {
	if s.held != nil {
		<-s.held
	}
	size, ok := s.q.Next()
	if !ok {
		return nil
	}
	return &remotecommand.TerminalSize{Width: uint16(size.Cols), Height: uint16(size.Rows)}
}

var _ backend.Terminaler = (*Sandbox)(nil)
