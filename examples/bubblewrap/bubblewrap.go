// Package bubblewrap is a sandboxkit backend from outside the module, with
// public packages only: a sandbox is a folder with a record (backendkit),
// and each command runs in a fresh bwrap container over it (new IPC, UTS,
// network and mount namespaces; the host's /usr and /etc read-only; the
// sandbox's own /tmp and /work). No main process (Capabilities.NoCommand),
// no other users, and the host's PID namespace (see command).
package bubblewrap

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
)

// Name is the backend's name in configs.
const Name = "bubblewrap"

// Every process of a sandbox carries sandboxKey=ID, and of one command
// execKey=a fresh ID (backendkit.Marker), so that Destroy and a timeout
// find every process, whatever group or session it moved to.
const (
	sandboxKey = "BWRAP_SANDBOX_ID"
	execKey    = "BWRAP_EXEC_ID"
)

// Backend keeps its sandboxes under a state folder.
type Backend struct {
	dir   string
	bwrap string
}

// New opens a backend on state folder dir; bwrap must be on PATH.
func New(dir string) (*Backend, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: fmt.Errorf("%w: %v (Debian: apt install bubblewrap)", backend.ErrUnavailable, err)}
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: err}
	}
	return &Backend{dir: dir, bwrap: bwrap}, nil
}

func (b *Backend) Name() string { return Name }
func (b *Backend) Close() error { return nil }

func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Isolation:  backend.IsolationContainer,
		EgressWhy:  "its sandboxes have no network at all",
		NoCommand:  true,
		Persistent: true,
	}
}

// record is a sandbox's meta.json.
type record struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Session   string            `json:"session,omitempty"`
	Owner     string            `json:"owner,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	WorkDir   string            `json:"workdir"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	backendkit.Lifecycle
}

func (r *record) info() backend.Info {
	state := r.State()
	if state == "" {
		state = backend.StateRunning
	}
	i := backend.Info{ID: r.ID, Backend: Name, Name: r.Name, Session: r.Session, Owner: r.Owner, State: state,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, WorkDir: r.WorkDir}
	i.Labels = backendkit.Labels(r.Labels, i)
	r.Label(i.Labels)
	return i
}

func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	createErr := func(err error) error { return &backend.OpError{Op: "create", Backend: Name, Err: err} }
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return nil, createErr(err)
	}
	wd := path.Join("/work", spec.WorkingDir)
	if path.IsAbs(spec.WorkingDir) {
		wd = path.Clean(spec.WorkingDir)
	}
	if wd != "/work" && !strings.HasPrefix(wd, "/work/") && !strings.HasPrefix(wd, "/tmp/") {
		return nil, createErr(fmt.Errorf("%w: working_dir %q: want a folder under /work or /tmp", backend.ErrInvalidConfig, spec.WorkingDir))
	}
	id, err := backendkit.NewID()
	if err != nil {
		return nil, createErr(err)
	}
	r := &record{ID: id, Name: spec.Name, Session: spec.Session, Owner: spec.Owner, Labels: maps.Clone(spec.Labels),
		Env: maps.Clone(spec.Env), WorkDir: wd, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if spec.TTL > 0 {
		r.ExpiresAt = r.CreatedAt.Add(spec.TTL)
	}
	r.Creator = backendkit.Self() // until complete: sbx gc reaps a half-made one
	sb := &Sandbox{b: b, id: id, dir: filepath.Join(b.dir, id)}
	for _, d := range []string{sb.dir, sb.host("/work"), sb.host("/tmp"), sb.host(wd)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			backendkit.RemoveFolder(sb.dir)
			return nil, createErr(err)
		}
	}
	os.Chmod(sb.host("/tmp"), 0o1777)
	if err = backendkit.WriteRecord(sb.dir, r); err == nil {
		err = backendkit.UpdateRecord(b.dir, id, func(r *record) error { r.Creator = ""; return nil })
	}
	if err != nil {
		backendkit.RemoveFolder(sb.dir)
		return nil, createErr(err)
	}
	return sb, nil
}

func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	dir, err := backendkit.FindRecord[record](b.dir, Name, id)
	if err != nil {
		return nil, err
	}
	return &Sandbox{b: b, id: id, dir: dir}, nil
}

func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	return backendkit.ListRecords(b.dir, Name, filter, (*record).info)
}

// Sandbox is one sandbox: a folder with its record, /tmp and /work.
type Sandbox struct {
	b       *Backend
	id, dir string
}

func (s *Sandbox) ID() string { return s.id }

// host is the host path of the sandbox's p (/work/..., /tmp/...).
func (s *Sandbox) host(p string) string { return filepath.Join(s.dir, "root", p) }

func (s *Sandbox) opErr(op string, err error) error { return backend.WrapOp(op, Name, s.id, err) }

func (s *Sandbox) Info(ctx context.Context) (backend.Info, error) {
	r, err := backendkit.ReadRecord[record](s.dir)
	if errors.Is(err, backend.ErrNotFound) {
		if i, half := backendkit.HalfInfo(s.dir, Name); half {
			return i, nil
		}
	}
	if err != nil {
		return backend.Info{}, s.opErr("info", err)
	}
	return r.info(), nil
}

// command is argv in a bwrap container over the sandbox's folders.
func (s *Sandbox) command(req backend.ExecRequest, m backendkit.Marker) (*exec.Cmd, error) {
	argv, err := req.Argv()
	if err != nil {
		return nil, err
	}
	if req.User != "" {
		return nil, fmt.Errorf("%w: user %q: the %s backend runs commands as its caller", errors.ErrUnsupported, req.User, Name)
	}
	r, err := backendkit.ReadRecord[record](s.dir)
	if err != nil {
		return nil, err
	}
	wd := r.WorkDir
	if req.WorkDir != "" {
		wd = path.Join(wd, req.WorkDir)
		if path.IsAbs(req.WorkDir) {
			wd = path.Clean(req.WorkDir)
		}
	}
	// Every command of a sandbox sees the others' processes (the contract
	// asks it: a command may end one an earlier one started), so there is
	// no PID namespace per command.
	args := []string{"--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/sbin", "/sbin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--dev", "/dev", "--proc", "/proc",
		"--bind", s.host("/work"), "/work", "--bind", s.host("/tmp"), "/tmp",
		"--hostname", s.id, "--chdir", wd, "--"}
	cmd := exec.Command(s.b.bwrap, append(args, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "HOSTNAME=" + s.id, sandboxKey + "=" + s.id, m.Env()}
	for _, env := range []map[string]string{r.Env, req.Env} {
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	return cmd, nil
}

// prepare is req's command with a fresh marker.
func (s *Sandbox) prepare(req backend.ExecRequest) (*exec.Cmd, backendkit.Marker, error) {
	id, err := backendkit.NewID()
	m := backendkit.Marker{Key: execKey, Value: id}
	if err != nil {
		return nil, m, err
	}
	cmd, err := s.command(req, m)
	return cmd, m, err
}

func (s *Sandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	cmd, m, err := s.prepare(req)
	if err != nil {
		return backend.ExecResult{}, s.opErr("exec", err)
	}
	res, err := backendkit.Exec(ctx, cmd, req, m)
	return res, s.opErr("exec", err)
}

// Attach starts a long-lived process wired to the caller (sbxd's agent).
func (s *Sandbox) Attach(ctx context.Context, req backend.ExecRequest) (backend.Process, error) {
	cmd, m, err := s.prepare(req)
	if err != nil {
		return nil, s.opErr("attach", err)
	}
	p, err := backendkit.Attach(ctx, cmd, req.Stderr, m)
	return p, s.opErr("attach", err)
}

func (s *Sandbox) Destroy(ctx context.Context) error {
	if _, err := os.Stat(s.dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := backendkit.MarkRemoving(s.dir); err != nil {
		return s.opErr("destroy", err)
	}
	backendkit.KillMarked(sandboxKey, s.id)
	return s.opErr("destroy", backendkit.RemoveFolder(s.dir))
}
