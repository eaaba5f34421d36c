package native

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Terminal runs req on the engine's own pseudo-terminal (a tty exec, as
// docker exec -it does). sbxd's terminals (sbxd.Client) come first where
// the sandbox has the agent; this is the fallback, and its terminals end
// with their client: closing the stream hangs the terminal up, and the
// program is killed by its marker where the container has sbxd.
func (s *Sandbox) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	if err := req.Check(); err != nil {
		return nil, s.opErr("terminal", err)
	}
	execID := newID()
	var env []string
	for k, v := range maps.All(req.EnvWithTerm()) {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	// The marker, not sbxd exec: a wrapper would put the program in a
	// process group of its own, outside the terminal's foreground group.
	env = append(env, envExecID+"="+execID)
	opts := container.ExecOptions{Cmd: req.Cmd, Env: env, User: req.User, Tty: true,
		AttachStdin: true, AttachStdout: true, AttachStderr: true}
	var size *[2]uint
	if req.Size.Rows > 0 && req.Size.Cols > 0 {
		size = &[2]uint{uint(req.Size.Rows), uint(req.Size.Cols)}
	}
	opts.ConsoleSize = size
	if req.WorkDir != "" {
		opts.WorkingDir = s.resolve(req.WorkDir)
	}
	created, err := s.b.cli.ContainerExecCreate(ctx, s.cid, opts)
	if err != nil {
		return nil, s.opErr("terminal", s.b.translate(err))
	}
	hr, err := s.b.cli.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{Tty: true, ConsoleSize: size})
	if err != nil {
		return nil, s.opErr("terminal", s.b.translate(err))
	}
	t := &engineTerminal{s: s, execID: execID, engineID: created.ID, hr: hr}
	if size != nil {
		// Engines before API 1.42 ignore ConsoleSize; and a resize right
		// after the start may come before the exec runs: a few tries, as
		// docker exec -it makes.
		delay := 5 * time.Millisecond
		for i := 0; ; i++ {
			err := t.Resize(ctx, req.Size)
			if err == nil || i == 8 || ctx.Err() != nil {
				if err != nil {
					s.b.log.Debug("sizing a terminal failed", "sandbox", s.id, "err", err)
				}
				break
			}
			time.Sleep(delay)
			delay *= 2
		}
	}
	return t, nil
}

// engineTerminal is a tty exec's stream.
type engineTerminal struct {
	s        *Sandbox
	execID   string
	engineID string
	hr       types.HijackedResponse

	mu     sync.Mutex
	code   int
	exited bool
	closed bool
}

func (t *engineTerminal) ID() string { return t.execID }

// Read returns the program's output; at its end, the exit code is read
// from the engine before io.EOF is returned.
func (t *engineTerminal) Read(p []byte) (int, error) {
	n, err := t.hr.Reader.Read(p)
	if err == io.EOF {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		code, cerr := t.s.b.exitCode(ctx, t.engineID)
		t.mu.Lock()
		closed := t.closed
		if cerr == nil {
			t.code, t.exited = code, true
		}
		t.mu.Unlock()
		if cerr != nil && !closed {
			return n, t.s.opErr("terminal", cerr)
		}
	} else if err != nil && t.isClosed() {
		err = io.EOF
	}
	return n, err
}

func (t *engineTerminal) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func (t *engineTerminal) Write(p []byte) (int, error) {
	n, err := t.hr.Conn.Write(p)
	if err != nil {
		return n, t.s.opErr("terminal", err)
	}
	return n, nil
}

func (t *engineTerminal) Resize(ctx context.Context, size backend.TermSize) error {
	if size.Rows <= 0 || size.Cols <= 0 {
		return t.s.opErr("terminal", fmt.Errorf("%w: size %dx%d", backend.ErrInvalidConfig, size.Cols, size.Rows))
	}
	err := t.s.b.cli.ContainerExecResize(ctx, t.engineID, container.ResizeOptions{Height: uint(size.Rows), Width: uint(size.Cols)})
	if err != nil {
		return t.s.opErr("terminal", t.s.b.translate(err))
	}
	return nil
}

func (t *engineTerminal) ExitCode() (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.code, t.exited
}

// Kill kills the program's tree by its marker (where the container has
// sbxd), then hangs the terminal up.
func (t *engineTerminal) Kill(ctx context.Context) error {
	t.s.kill(t.execID)
	if t.s.plain {
		t.hr.Close() // a hang-up is all there is
	}
	return nil
}

// Close hangs the terminal up and kills what is left of the program: the
// engine's terminals cannot be attached to again.
func (t *engineTerminal) Close() error {
	t.mu.Lock()
	already, exited := t.closed, t.exited
	t.closed = true
	t.mu.Unlock()
	if already {
		return nil
	}
	t.hr.Close()
	if !exited {
		t.s.kill(t.execID)
	}
	return nil
}

var _ backend.Terminaler = (*Sandbox)(nil)
