package backend

import (
	"context"
	"io"
	"io/fs"
	"time"
)

// Wrapper is implemented by sandboxes that wrap another one (an sbxd
// client, a logging layer). As walks Unwrap chains to find capabilities.
type Wrapper interface {
	Unwrap() Sandbox
}

// As finds the first sandbox in sb's Unwrap chain that implements T.
func As[T any](sb Sandbox) (T, bool) {
	for sb != nil {
		if t, ok := sb.(T); ok {
			return t, true
		}
		w, ok := sb.(Wrapper)
		if !ok {
			break
		}
		sb = w.Unwrap()
	}
	var zero T
	return zero, false
}

// BackendWrapper is implemented by backends that wrap another one (sbxd's
// WrapBackend, remotedocker over native's engine code). AsBackend walks
// Unwrap chains to find backend-level capabilities such as VolumeManager.
// A wrapper implements an optional interface itself only when it changes
// what the call does; otherwise it leaves it to the wrapped backend, so
// that what AsBackend finds is always the truth.
type BackendWrapper interface {
	Unwrap() Backend
}

// AsBackend finds the first backend in b's Unwrap chain that implements T,
// as As does for sandboxes.
func AsBackend[T any](b Backend) (T, bool) {
	for b != nil {
		if t, ok := b.(T); ok {
			return t, true
		}
		w, ok := b.(BackendWrapper)
		if !ok {
			break
		}
		b = w.Unwrap()
	}
	var zero T
	return zero, false
}

// FileSystem is native file access to a sandbox. Relative names resolve
// against the sandbox's working directory, as they do for Exec. Errors are
// *fs.PathError wrapping fs.ErrNotExist, fs.ErrExist or fs.ErrPermission
// where those apply, syscall.EISDIR when name is a directory where a file is
// needed, and syscall.ENOTDIR when a path component (or ReadDir's name) is
// not a directory.
type FileSystem interface {
	// ReadFile opens name for reading.
	ReadFile(ctx context.Context, name string) (io.ReadCloser, error)
	// WriteFile creates or replaces name with r's bytes and mode perm,
	// creating missing parent directories. A symlink at name is followed:
	// its target receives the bytes, as with a plain write.
	WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error
	// Stat describes name, following symlinks.
	Stat(ctx context.Context, name string) (fs.FileInfo, error)
	// ReadDir lists a directory, sorted by name; symlinks are not followed.
	ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error)
}

// Archiver moves tar streams in and out of a sandbox, as docker cp does.
type Archiver interface {
	// PutArchive extracts a tar stream into dir, which must exist.
	// Parents of entries that do not exist are created.
	PutArchive(ctx context.Context, dir string, tarStream io.Reader) error
	// GetArchive returns a tar stream of path: one entry named by path's
	// base name for a file, that entry and everything under it for a
	// directory.
	GetArchive(ctx context.Context, path string) (io.ReadCloser, error)
}

// Process is a command started with Attacher, with its stdin and stdout
// connected to the caller.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.Reader
	// Wait waits for the process to exit and returns its exit code.
	Wait() (int, error)
	// Kill ends the process and everything it started.
	Kill() error
}

// Attacher starts a long-lived process with a bidirectional stream (how sbxd
// is started). req.Stdin, req.Stdout and req.Timeout are ignored; req.Stderr,
// when set, receives the process's stderr. Cancelling ctx kills the process.
type Attacher interface {
	Attach(ctx context.Context, req ExecRequest) (Process, error)
}

// Endpointer reports where a host program can reach a published sandbox
// port.
type Endpointer interface {
	// Endpoint returns "host:port" for a sandbox port (TCP).
	Endpoint(ctx context.Context, port int) (string, error)
}

// Pauser freezes and thaws a sandbox.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Stopper ends a sandbox's processes and keeps its files; Start runs its
// command again, afresh. sbx move stops the original's sandboxes while the
// moved session starts (their removal afterwards is then short) and
// starts them again when that start fails. A sandbox its platform removes
// once it stops cannot be stopped: an error wrapping errors.ErrUnsupported.
type Stopper interface {
	Stop(ctx context.Context) error
	Start(ctx context.Context) error
}

// Checkpointer saves a sandbox's filesystem as an image.
type Checkpointer interface {
	// Checkpoint commits the sandbox to an image named ref ("" lets the
	// backend choose) and returns the image's reference.
	Checkpoint(ctx context.Context, ref string) (string, error)
}

// Resetter brings a sandbox back to its image: files written since Create
// are gone and every process is ended; the ID and labels stay.
type Resetter interface {
	Reset(ctx context.Context) error
}

// Settler is a sandbox whose Reset leaves work running after it returns
// (lite makes the container for the next Reset ahead). Settle returns once
// that work is done, or when ctx ends. A warm pool settles a used sandbox
// before it is ready again, so that the work does not run beside the next
// task's first command.
type Settler interface {
	Settle(ctx context.Context) error
}

// Discarder is a sandbox whose platform finishes removing it alone:
// Discard ends it and returns once its removal is certain, not done (the
// Docker backends: a kill of a container made with Spec.AutoRemove, which
// the engine then removes with its anonymous volumes). A caller that only
// needs the sandbox gone, such as sbx run, does not wait for the removal.
// A sandbox made without AutoRemove is destroyed as by Destroy.
type Discarder interface {
	Discard(ctx context.Context) error
}

// OneShotRunner is a backend that runs one command as a new sandbox's
// first process and removes the sandbox when the command ends: what sbx run
// needs, without the agent a sandbox otherwise starts for the commands that
// would follow. The command's streams are the caller's (req.Stdin, Stdout
// and Stderr; a nil writer's output is captured in the result), its
// environment, working directory and user those of spec with req's on top;
// req.Timeout kills every process of the sandbox (exit code 124,
// TimedOut); cancelling ctx does too, and RunOnce then returns ctx's error.
// The exit code is the command's, as Exec's. The sandbox is owned and
// labelled as spec says while it runs, so that gc removes it when the
// caller dies first.
//
// CanRunOnce says, before anything is made, whether spec and req can run
// so (not: a spec with a command of its own or an existing sandbox, a
// sandbox kind the backend cannot run so);
// otherwise the caller creates the sandbox and runs the command in it.
type OneShotRunner interface {
	CanRunOnce(spec Spec, req ExecRequest) bool
	RunOnce(ctx context.Context, spec Spec, req ExecRequest) (ExecResult, error)
}

// Renewer extends a sandbox's time to live.
type Renewer interface {
	// Renew sets the sandbox to expire ttl from now and returns the new
	// expiry.
	Renew(ctx context.Context, ttl time.Duration) (time.Time, error)
}

// VolumeSpec describes a volume several sandboxes of a session can mount
// (the session's /shared, tool and script folders).
type VolumeSpec struct {
	// Name is the volume's name on the backend ("" lets it choose).
	Name    string
	Session string
	// Labels are added to the backend's own (LabelID, LabelSession, ...).
	Labels map[string]string
	// FromPath, when set, is a host folder, or a .tar.gz file, whose
	// contents fill the new volume.
	FromPath string
	// TTL: see Spec.TTL.
	TTL time.Duration
}

// VolumeInfo describes a volume a VolumeManager made.
type VolumeInfo struct {
	Name      string
	Session   string
	Labels    map[string]string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// VolumeManager is implemented by backends (not sandboxes) that make
// volumes of their own. A Spec mounts one with a Volume of type VolumeNamed
// whose Source is the name CreateVolume returned.
type VolumeManager interface {
	CreateVolume(ctx context.Context, spec VolumeSpec) (string, error)
	// RemoveVolume removes a volume; removing one that is gone returns nil.
	RemoveVolume(ctx context.Context, name string) error
	// ListVolumes lists the volumes this backend made that match filter
	// (Filter.Name is ignored).
	ListVolumes(ctx context.Context, filter Filter) ([]VolumeInfo, error)
}

// LogReader returns what a sandbox's main process (its command, or the
// image's) wrote to stdout and stderr: how readiness probes wait for a log
// line and how failures show the last lines of a service.
type LogReader interface {
	// Logs returns the output, interleaved as written; at most the last
	// tail lines when tail > 0.
	Logs(ctx context.Context, tail int) ([]byte, error)
}

// NetworkSpec describes a network the sandboxes of a session share, on
// which each sandbox is reachable by its Spec.Name.
type NetworkSpec struct {
	// Name is the network's name on the backend ("" lets it choose).
	Name    string
	Session string
	// Labels are added to the backend's own (LabelID, LabelSession, ...).
	Labels map[string]string
	// TTL: see Spec.TTL.
	TTL time.Duration
}

// NetworkInfo describes a network a NetworkManager made.
type NetworkInfo struct {
	Name      string
	Session   string
	Labels    map[string]string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// NetworkManager is implemented by backends (not sandboxes) that make
// networks. A Spec joins one by naming it in Network; on such a network
// the sandbox is reachable by other members under its Spec.Name.
type NetworkManager interface {
	CreateNetwork(ctx context.Context, spec NetworkSpec) (string, error)
	// RemoveNetwork removes a network; removing one that is gone returns
	// nil.
	RemoveNetwork(ctx context.Context, name string) error
	// ListNetworks lists the networks this backend made that match filter
	// (Filter.Name is ignored).
	ListNetworks(ctx context.Context, filter Filter) ([]NetworkInfo, error)
}

// CachePruner is implemented by backends that keep caches which outlive
// sandboxes (native's sbxd volume, one per build of the agent).
// PruneCaches removes the ones no sandbox uses and this program does not
// need, and names them; with dryRun it only names them. sbx gc calls it.
//
// Images loaded for a restore (backend.LabelTransient) have no sandbox
// until the restore's create makes one; PruneCaches leaves those younger
// than PruneGrace so that a gc does not take the image a restore is about
// to start from.
type CachePruner interface {
	PruneCaches(ctx context.Context, dryRun bool) ([]string, error)
}

// TransientGrace is how long PruneCaches keeps an unused transient image
// (backend.LabelTransient) after it was made or loaded, unless ctx asks
// for less (WithPruneGrace). LoadImages returns such an image for a
// sandbox to start from next, and until that Create has made the sandbox
// nothing uses the image: a minute leaves it time to finish.
const TransientGrace = time.Minute

type pruneGraceKey struct{}

// WithPruneGrace returns ctx carrying a bound on how long PruneCaches
// spares an unused transient image: sbx gc --grace passes its grace (0
// removes them at once, as a test that kills restores wants).
func WithPruneGrace(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, pruneGraceKey{}, d)
}

// PruneGrace is how long PruneCaches spares an unused transient image:
// TransientGrace, or less when ctx carries a shorter grace
// (WithPruneGrace).
func PruneGrace(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(pruneGraceKey{}).(time.Duration); ok && d < TransientGrace {
		return max(d, 0)
	}
	return TransientGrace
}

// Labeler is implemented by backends whose sandboxes' labels can change
// after Create (local and lite keep them in a record file, k8s in pod
// labels; Docker's are fixed). A session records that its launch completed
// this way where the backend has no VolumeManager.
type Labeler interface {
	// SetLabels sets labels on sandbox id; an empty value removes the
	// label. Labels under LabelPrefix that the backend itself manages
	// (LabelID, LabelBackend) cannot be changed.
	SetLabels(ctx context.Context, id string, labels map[string]string) error
}

// RemovalWaiter is implemented by backends whose Destroy returns before the
// sandbox's resources are released: a k8s pod being deleted is no longer
// found by Get or List, but its containers and network are torn down by
// the kubelet after that. WaitRemoved returns once sandbox id holds nothing
// any more (at once when it never existed), or ctx's error.
type RemovalWaiter interface {
	WaitRemoved(ctx context.Context, id string) error
}

// Readlinker is implemented by sandboxes that read symbolic links
// natively; sbfiles.Readlink (backendkit/sbfiles) uses it
// when it can.
type Readlinker interface {
	// Readlink returns the target of the symbolic link name as it is
	// stored. Errors are *fs.PathError, wrapping syscall.EINVAL when name
	// is not a symbolic link and fs.ErrNotExist when it does not exist.
	Readlink(ctx context.Context, name string) (string, error)
}

// SpecChecker is implemented by backends whose Create refuses a Spec for
// more than Capabilities.Check does (a runtime the engine lacks, an egress
// policy it cannot enforce with the Spec's network, ...): CheckSpec runs
// every check Create runs on a Spec before it makes anything, and makes
// nothing. sbx config check asks it for every entry, so that what it
// passes Create accepts.
type SpecChecker interface {
	CheckSpec(ctx context.Context, spec Spec) error
}

// CheckSpec is what Create of b would refuse spec for before making
// anything: b's SpecChecker when it has one, else its Capabilities'
// Check.
func CheckSpec(ctx context.Context, b Backend, spec Spec) error {
	if c, ok := AsBackend[SpecChecker](b); ok {
		return c.CheckSpec(ctx, spec)
	}
	return b.Capabilities().Check(b.Name(), spec)
}
