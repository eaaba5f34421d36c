package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"

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
	argv := withEnv(req.Cmd, env, dir)
	var q *pipeterm.SizeQueue
	done := make(chan struct{})
	run := func(ctx context.Context, stdin io.Reader, stdout io.Writer) (int, error) {
		defer close(done)
		return s.b.execStream(ctx, s.pod, s.container, argv, remotecommand.StreamOptions{
			Stdin: stdin, Stdout: stdout, Tty: true, TerminalSizeQueue: sizeQueue{q},
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

// sizeQueue is client-go's view of a pipeterm.SizeQueue.
type sizeQueue struct{ q *pipeterm.SizeQueue }

func (s sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := s.q.Next()
	if !ok {
		return nil
	}
	return &remotecommand.TerminalSize{Width: uint16(size.Cols), Height: uint16(size.Rows)}
}

var _ backend.Terminaler = (*Sandbox)(nil)
