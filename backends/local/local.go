package local

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// Name is the backend's registry name.
const Name = "local"

// Environment variables every process of a local sandbox carries.
const (
	EnvSandboxID = "SANDBOXKIT_SANDBOX_ID"
	EnvExecID    = "SANDBOXKIT_EXEC_ID"
)

// Config is the [sandbox.local] table.
type Config struct {
	// StateDir holds one directory per sandbox. Default:
	// $XDG_STATE_HOME/sandboxkit/local, else ~/.local/state/sandboxkit/local.
	StateDir string `toml:"state_dir"`
}

// Option configures a Backend.
type Option func(*Backend)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option {
	return func(b *Backend) {
		if l != nil {
			b.log = l
		}
	}
}

// Backend runs sandboxes as host processes.
type Backend struct {
	dir string
	log *slog.Logger
}

var _ backend.Backend = (*Backend)(nil)

// New opens (creating if needed) the state directory.
func New(cfg Config, opts ...Option) (*Backend, error) {
	b := &Backend{log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(b)
	}
	dir := cfg.StateDir
	if dir == "" {
		var err error
		if dir, err = DefaultStateDir(); err != nil {
			return nil, err
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// 0711: other users (ExecRequest.User) may pass through to their
	// sandbox's working directory but not list the sandboxes.
	if err := os.MkdirAll(abs, 0o711); err != nil {
		return nil, &backend.OpError{Op: "open", Backend: Name, Err: fmt.Errorf("state dir: %w", err)}
	}
	b.dir = abs
	return b, nil
}

// DefaultStateDir is $XDG_STATE_HOME/sandboxkit/local, else
// ~/.local/state/sandboxkit/local.
func DefaultStateDir() (string, error) {
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "sandboxkit", "local"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: local backend: no state dir (set [sandbox.local] state_dir, XDG_STATE_HOME or HOME): %v", backend.ErrInvalidConfig, err)
	}
	return filepath.Join(home, ".local", "state", "sandboxkit", "local"), nil
}

// StateDir is the directory holding the sandboxes.
func (b *Backend) StateDir() string { return b.dir }

func (b *Backend) Name() string { return Name }

func (b *Backend) Close() error { return nil }

func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{
		Isolation:        backend.IsolationNone,
		RuntimeHint:      "its sandboxes are host processes, with no runtime to choose (isolation none); pick an isolating backend (lite, native, k8s) for a runtime",
		EgressWhy:        "host processes have no network of their own to enforce a policy on",
		NetworkModes:     []string{"host"},
		User:             os.Geteuid() == 0,
		PauseKeepsMemory: false,
		Persistent:       true,
	}
}

// meta is what meta.json holds.
type meta struct {
	ID      string            `json:"id"`
	Name    string            `json:"name,omitempty"`
	Session string            `json:"session,omitempty"`
	Image   string            `json:"image,omitempty"`
	Owner   string            `json:"owner,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	User    string            `json:"user,omitempty"`
	// Command is the entry's command (forks start it afresh).
	Command   []string  `json:"command,omitempty"`
	WorkDir   string    `json:"workdir"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// MainPID and MainStart identify the entry's command, if it has one.
	MainPID   int    `json:"main_pid,omitempty"`
	MainStart uint64 `json:"main_start,omitempty"`
	statedir.Lifecycle
}

func (m *meta) info() backend.Info {
	state := m.Lifecycle.State()
	switch {
	case state != "":
	case m.MainPID != 0 && !procfs.Alive(m.MainPID, m.MainStart):
		state = backend.StateExited
	default:
		state = backend.StateRunning
	}
	i := backend.Info{
		ID: m.ID, Backend: Name, Name: m.Name, Session: m.Session, Image: m.Image,
		State: state, Owner: m.Owner,
		CreatedAt: m.CreatedAt, ExpiresAt: m.ExpiresAt, WorkDir: m.WorkDir,
	}
	i.Labels = statedir.Labels(m.Labels, i)
	m.Lifecycle.Label(i.Labels)
	return i
}

func (b *Backend) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	sb, err := b.create(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// create is Create; with a batch (see statedir.HandOver), the sandbox
// stays recorded as being created by this process, for Fork to hand it
// over with the rest of the batch.
func (b *Backend) create(ctx context.Context, spec backend.Spec, batch string) (*Sandbox, error) {
	if err := b.Capabilities().Check(Name, spec); err != nil {
		return nil, &backend.OpError{Op: "create", Backend: Name, Err: err}
	}
	snapshot := strings.HasPrefix(spec.Image, srcSnapshot)
	if snapshot {
		if _, err := b.names().Read(backendkit.SnapshotName(spec.Image)); err != nil {
			return nil, &backend.OpError{Op: "create", Backend: Name, Err: err}
		}
	} else if spec.Image != "" {
		b.log.Warn("local backend runs host processes and ignores the image", "sandbox", spec.Name, "image", spec.Image)
	}
	if spec.User != "" {
		if _, err := lookupCredential(spec.User); err != nil {
			return nil, &backend.OpError{Op: "create", Backend: Name, Err: err}
		}
	}
	id, err := statedir.NewID()
	if err != nil {
		return nil, &backend.OpError{Op: "create", Backend: Name, Err: err}
	}
	dir := filepath.Join(b.dir, id)
	m := &meta{
		ID: id, Name: spec.Name, Session: spec.Session, Image: spec.Image, Owner: spec.Owner,
		Labels: maps.Clone(spec.Labels), Env: maps.Clone(spec.Env), User: spec.User, Command: spec.Command,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond),
	}
	if spec.TTL > 0 {
		m.ExpiresAt = m.CreatedAt.Add(spec.TTL)
	}
	switch wd := spec.WorkingDir; {
	case wd == "":
		m.WorkDir = filepath.Join(dir, "work")
	case filepath.IsAbs(wd):
		fi, err := os.Stat(wd)
		if err != nil || !fi.IsDir() {
			return nil, &backend.OpError{Op: "create", Backend: Name, Err: fmt.Errorf("%w: working_dir %q: not an existing host directory (the local backend uses host paths; use a relative path for a folder inside the sandbox)", backend.ErrInvalidConfig, wd)}
		}
		m.WorkDir = filepath.Clean(wd)
	default:
		m.WorkDir = filepath.Join(dir, "work", wd)
	}
	sb := &Sandbox{b: b, id: id, dir: dir}
	fail := func(err error) (*Sandbox, error) {
		sb.kill()
		statedir.RemoveDir(dir, nil)
		return nil, &backend.OpError{Op: "create", Backend: Name, Err: err}
	}
	// The record comes first, naming this process as its creator, so a
	// Create killed from here on leaves a sandbox that List shows (as
	// creating, and gc reaps once the creator is gone).
	m.Creator, m.Batch = owner.Self(), batch
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &backend.OpError{Op: "create", Backend: Name, Err: err}
	}
	if err := writeMeta(dir, m); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "work"), 0o755); err != nil {
		return fail(err)
	}
	if snapshot {
		if err := b.restoreSnapshot(spec.Image, filepath.Join(dir, "work")); err != nil {
			return fail(err)
		}
	}
	if err := os.MkdirAll(m.WorkDir, 0o755); err != nil {
		return fail(err)
	}
	if spec.Command != nil {
		pid, start, err := sb.startMain(m, spec.Command)
		if err != nil {
			return fail(fmt.Errorf("command %q: %w", spec.Command, err))
		}
		m.MainPID, m.MainStart = pid, start
	}
	// Under the record's lock: the record is visible, so others may
	// write it by now (a claim, a Renew).
	err = statedir.Update(b.dir, id, func(r *meta) error {
		r.MainPID, r.MainStart = m.MainPID, m.MainStart
		if batch == "" {
			r.Creator = ""
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	b.log.Debug("created sandbox", "id", id, "name", spec.Name, "dir", dir)
	return sb, nil
}

func (b *Backend) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	dir, err := statedir.Get[meta](b.dir, Name, id)
	if err != nil {
		return nil, err
	}
	return &Sandbox{b: b, id: id, dir: dir}, nil
}

func (b *Backend) List(ctx context.Context, filter backend.Filter) ([]backend.Info, error) {
	return statedir.List(b.dir, Name, filter, (*meta).info)
}

func readMeta(dir string) (*meta, error) { return statedir.Read[meta](dir) }

func writeMeta(dir string, m *meta) error { return statedir.WriteMeta(dir, m) }

// lookupCredential resolves "name", "uid", "name:group" or "uid:gid".
func lookupCredential(spec string) (cred [2]uint32, err error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	u, err := user.Lookup(userPart)
	if err != nil {
		if u, err = user.LookupId(userPart); err != nil {
			return cred, fmt.Errorf("%w: user %q: no such user on this host", backend.ErrInvalidConfig, spec)
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if hasGroup {
		g, err := user.LookupGroup(groupPart)
		if err != nil {
			if g, err = user.LookupGroupId(groupPart); err != nil {
				return cred, fmt.Errorf("%w: user %q: no such group on this host", backend.ErrInvalidConfig, spec)
			}
		}
		gid, _ = strconv.ParseUint(g.Gid, 10, 32)
	}
	return [2]uint32{uint32(uid), uint32(gid)}, nil
}
