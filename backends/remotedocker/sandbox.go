package remotedocker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Sandbox is one container on the remote engine: native's sandbox, with
// remotedocker's endpoints and errors. It is safe for concurrent use.
type Sandbox struct {
	// Its own terminals end with their client (see Terminal).
	backend.TerminalsEndWithClient

	b   *Backend
	in  backend.Sandbox // native's
	cid string
}

var (
	_ backend.Sandbox      = (*Sandbox)(nil)
	_ backend.Archiver     = (*Sandbox)(nil)
	_ backend.FileSystem   = (*Sandbox)(nil)
	_ backend.Attacher     = (*Sandbox)(nil)
	_ backend.Endpointer   = (*Sandbox)(nil)
	_ backend.Pauser       = (*Sandbox)(nil)
	_ backend.Checkpointer = (*Sandbox)(nil)
	_ backend.AgentDialer  = (*Sandbox)(nil)
	_ backend.Discarder    = (*Sandbox)(nil)
	_ backend.Stopper      = (*Sandbox)(nil)
	_ backend.Terminaler   = (*Sandbox)(nil)
)

// Discard is native's: a kill the remote engine's auto-remove follows.
func (s *Sandbox) Discard(ctx context.Context) error {
	return s.call(ctx, "discard", func() error {
		d, err := capability[backend.Discarder](s, "discard")
		if err != nil {
			return err
		}
		return d.Discard(ctx)
	})
}

// Stop and Start are native's (see backend.Stopper).
func (s *Sandbox) Stop(ctx context.Context) error {
	return s.stopper(ctx, "stop", backend.Stopper.Stop)
}
func (s *Sandbox) Start(ctx context.Context) error {
	return s.stopper(ctx, "start", backend.Stopper.Start)
}

func (s *Sandbox) stopper(ctx context.Context, op string, fn func(backend.Stopper, context.Context) error) error {
	return s.call(ctx, op, func() error {
		st, err := capability[backend.Stopper](s, op)
		if err != nil {
			return err
		}
		return fn(st, ctx)
	})
}

// DialAgent connects to the agent the sandbox's init serves, through the
// SSH connection (native's DialAgent with remotedocker's dialer).
func (s *Sandbox) DialAgent(ctx context.Context) (net.Conn, error) {
	var conn net.Conn
	err := s.call(ctx, "dial agent", func() error {
		d, err := capability[backend.AgentDialer](s, "dial agent")
		if err != nil {
			return err
		}
		conn, err = d.DialAgent(ctx)
		return err
	})
	return conn, err
}

func (s *Sandbox) ID() string { return s.in.ID() }

// ContainerID is the remote engine's ID of the sandbox's container.
func (s *Sandbox) ContainerID() string { return s.cid }

func (s *Sandbox) opErr(op string, err error) error { return s.b.opErr(op, s.ID(), err) }

// call runs fn after making sure the connection is up.
func (s *Sandbox) call(ctx context.Context, op string, fn func() error) error {
	if err := s.b.ready(ctx); err != nil {
		return s.opErr(op, err)
	}
	return s.opErr(op, fn())
}

// capability returns native's implementation of T, or an error wrapping
// errors.ErrUnsupported.
func capability[T any](s *Sandbox, what string) (T, error) {
	t, ok := s.in.(T)
	if !ok {
		return t, fmt.Errorf("%w: %s", errors.ErrUnsupported, what)
	}
	return t, nil
}

func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	var info backend.Info
	err := s.call(ctx, "info", func() (err error) {
		info, err = s.in.Info(ctx)
		return err
	})
	if err == nil {
		info.Backend = Name
	}
	return info, err
}

// Exec runs a command in the container through sbxd, as native does. If
// the SSH connection drops while it runs, Exec returns an error wrapping
// backend.ErrUnavailable (a *DroppedError): the command's output is
// incomplete and it may still be running on the remote.
func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	var res backend.ExecResult
	err := s.call(ctx, "exec", func() (err error) {
		res, err = s.in.Exec(ctx, req)
		return err
	})
	return res, err
}

// Destroy removes the container and its tunnels; a container that is gone
// already is not an error.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.b.tunnels.closeFor(s.cid)
	return s.call(ctx, "destroy", func() error { return s.in.Destroy(ctx) })
}

func (s *Sandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := s.call(ctx, "read", func() error {
		fsys, err := capability[backend.FileSystem](s, "file access")
		if err != nil {
			return err
		}
		rc, err = fsys.ReadFile(ctx, name)
		return err
	})
	return rc, err
}

func (s *Sandbox) WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	return s.call(ctx, "write", func() error {
		fsys, err := capability[backend.FileSystem](s, "file access")
		if err != nil {
			return err
		}
		return fsys.WriteFile(ctx, name, r, perm)
	})
}

func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	var fi fs.FileInfo
	err := s.call(ctx, "stat", func() error {
		fsys, err := capability[backend.FileSystem](s, "file access")
		if err != nil {
			return err
		}
		fi, err = fsys.Stat(ctx, name)
		return err
	})
	return fi, err
}

func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	var fis []fs.FileInfo
	err := s.call(ctx, "readdir", func() error {
		fsys, err := capability[backend.FileSystem](s, "file access")
		if err != nil {
			return err
		}
		fis, err = fsys.ReadDir(ctx, name)
		return err
	})
	return fis, err
}

func (s *Sandbox) PutArchive(ctx context.Context, dir string, tarStream io.Reader) error {
	return s.call(ctx, "put archive", func() error {
		ar, err := capability[backend.Archiver](s, "archive transfer")
		if err != nil {
			return err
		}
		return ar.PutArchive(ctx, dir, tarStream)
	})
}

func (s *Sandbox) GetArchive(ctx context.Context, path string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := s.call(ctx, "get archive", func() error {
		ar, err := capability[backend.Archiver](s, "archive transfer")
		if err != nil {
			return err
		}
		rc, err = ar.GetArchive(ctx, path)
		return err
	})
	return rc, err
}

// Attach starts a long-lived process with its stdin and stdout connected
// over the SSH connection (how sbxd's stream mode starts).
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest) (backend.Process, error) {
	var p backend.Process
	err := s.call(ctx, "attach", func() error {
		at, err := capability[backend.Attacher](s, "attach")
		if err != nil {
			return err
		}
		p, err = at.Attach(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &process{Process: p, s: s}, nil
}

// process renames the errors of native's process.
type process struct {
	backend.Process
	s *Sandbox
}

func (p *process) Wait() (int, error) {
	code, err := p.Process.Wait()
	return code, p.s.opErr("attach", err)
}

func (s *Sandbox) Pause(ctx context.Context) error {
	return s.call(ctx, "pause", func() error {
		p, err := capability[backend.Pauser](s, "pause")
		if err != nil {
			return err
		}
		return p.Pause(ctx)
	})
}

func (s *Sandbox) Resume(ctx context.Context) error {
	return s.call(ctx, "resume", func() error {
		p, err := capability[backend.Pauser](s, "pause")
		if err != nil {
			return err
		}
		return p.Resume(ctx)
	})
}

// Checkpoint commits the container to an image on the remote engine.
func (s *Sandbox) Checkpoint(ctx context.Context, ref string) (string, error) {
	var out string
	err := s.call(ctx, "checkpoint", func() error {
		c, err := capability[backend.Checkpointer](s, "checkpoint")
		if err != nil {
			return err
		}
		out, err = c.Checkpoint(ctx, ref)
		return err
	})
	return out, err
}

// endpointTimeout bounds the inspect behind Endpoint when ctx has no
// deadline.
const endpointTimeout = time.Minute

// Terminal is native's: a tty exec on the remote engine (sbxd's
// terminals, through the agent the init serves, come first where the
// caller wraps the sandbox with sbxd).
func (s *Sandbox) Terminal(ctx context.Context, req backend.TerminalRequest) (backend.Terminal, error) {
	var t backend.Terminal
	err := s.call(ctx, "terminal", func() error {
		tr, err := capability[backend.Terminaler](s, "terminal")
		if err != nil {
			return err
		}
		t, err = tr.Terminal(ctx, req)
		return err
	})
	return t, err
}
