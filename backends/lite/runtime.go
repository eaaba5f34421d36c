package lite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/internal/cgwarm"
)

// ociRuntime drives an OCI runtime binary (runc, crun, runsc: they share
// the command line used here).
type ociRuntime struct {
	path string // absolute path of the binary
	name string // "runc", "crun", "runsc", ...
	root string // --root: where it keeps container state
}

// lookRuntime finds a runtime by name or path. Root defaults to
// /run/sandboxkit/lite/<name>.
func lookRuntime(nameOrPath, root string) (*ociRuntime, error) {
	if nameOrPath == "" {
		nameOrPath = "runc"
	}
	p := nameOrPath
	if !strings.Contains(p, "/") {
		var err error
		if p, err = exec.LookPath(nameOrPath); err != nil {
			// PATH of a non-login root shell may lack the sbin folders.
			for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
				if fi, err := os.Stat(filepath.Join(dir, nameOrPath)); err == nil && fi.Mode()&0o111 != 0 {
					p = filepath.Join(dir, nameOrPath)
					break
				}
			}
			if !strings.Contains(p, "/") {
				return nil, fmt.Errorf("OCI runtime %q not found in PATH or the sbin folders (install it, e.g. apt-get install runc, or set [sandbox.lite] runtime to its path)", nameOrPath)
			}
		}
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("OCI runtime %q is not an executable file", abs)
	}
	name := filepath.Base(abs)
	if root == "" {
		root = filepath.Join("/run/sandboxkit/lite", name)
	}
	return &ociRuntime{path: abs, name: name, root: root}, nil
}

// gvisor reports whether the runtime is gVisor's runsc (named runsc, or
// runsc-SOMETHING for a pinned release). Its containers' processes live
// in its sentry, not on the host: the host's /proc does not show them.
func (r *ociRuntime) gvisor() bool {
	return r.name == "runsc" || strings.HasPrefix(r.name, "runsc-")
}

// command returns the runtime invoked with args after its global options.
func (r *ociRuntime) command(ctx context.Context, args ...string) *exec.Cmd {
	return r.commandIn(ctx, nil, args...)
}

// commandIn is command run by the command line prefix (nil: none), e.g.
// one that enters a user namespace first.
func (r *ociRuntime) commandIn(ctx context.Context, prefix []string, args ...string) *exec.Cmd {
	argv := append(append(slices.Clone(prefix), r.path, "--root", r.root), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs the runtime and returns its output; a failure carries its
// stderr.
func (r *ociRuntime) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := r.command(ctx, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return out, &runtimeError{runtime: r.name, args: args, msg: msg}
	}
	return out, nil
}

type runtimeError struct {
	runtime string
	args    []string
	msg     string
}

func (e *runtimeError) Error() string {
	verb := ""
	if len(e.args) > 0 {
		verb = e.args[0]
	}
	return fmt.Sprintf("%s %s: %s", e.runtime, verb, e.msg)
}

// notExist reports whether err says the container does not exist (runc:
// `container "x" does not exist`; crun: `... No such file or directory`).
func notExist(err error) bool {
	var re *runtimeError
	if !errors.As(err, &re) {
		return false
	}
	m := strings.ToLower(re.msg)
	return strings.Contains(m, "does not exist") || strings.Contains(m, "no such file or directory") || strings.Contains(m, "not found")
}

// launch makes container id from bundle with verb "run" (created and
// started, detached) or "create" (created; the runtime's start runs it),
// with its stdout and stderr appended to logPath, and returns the host PID
// of its first process. prefix runs the runtime (see commandIn).
func (r *ociRuntime) launch(ctx context.Context, prefix []string, verb, id, bundle, logPath string) (int, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	pidFile := filepath.Join(bundle, "init.pid")
	os.Remove(pidFile)
	args := []string{verb, "--bundle", bundle, "--pid-file", pidFile, id}
	if verb == "run" {
		args = slices.Insert(args, 1, "--detach")
	}
	if r.gvisor() {
		flags, p, err := runscLaunch(bundle, prefix)
		if err != nil {
			return 0, err
		}
		args, prefix = append(flags, args...), p
	}
	cmd := r.commandIn(ctx, prefix, args...)
	// The container's first process keeps these: a file, never a pipe we
	// would have to drain.
	cmd.Stdout, cmd.Stderr = logf, logf
	startOff, _ := logf.Seek(0, 2)
	// The runtime moves the container's first process into its cgroup
	// (lite does, for runsc): that move's lock is made warm beside it
	// (see package cgwarm).
	stopWarm := cgwarm.Start(nil)
	err = cmd.Run()
	stopWarm()
	if err != nil {
		msg := tail(logPath, startOff)
		if msg == "" {
			msg = err.Error()
		}
		return 0, &runtimeError{runtime: r.name, args: []string{verb}, msg: msg}
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("%s %s: no pid file: %w", r.name, verb, err)
	}
	var pid int
	if _, err := fmt.Sscan(string(data), &pid); err != nil {
		return 0, fmt.Errorf("%s %s: pid file %q: %w", r.name, verb, data, err)
	}
	return pid, nil
}

// runscFlags are gVisor's options for a container of the bundle, given to
// its create or run and again to its start (this runsc keeps no options
// of its own between its commands): its network from the config's
// namespaces (none: a namespace of its own with no path, lite's network
// "none", where gVisor's stack has loopback only; host: no network
// namespace, or the one lite made for an egress policy, which the sandbox
// joins and reaches through the kernel's stack there), unix sockets the
// host may dial (the agent's, in a bind-mounted folder), no overlay of its
// own over lite's (whose upper layer snapshots and forks read), and a root
// file system shared with the host: lite reads and writes the sandbox's
// files from the host (its FileSystem, snapshots, forks), which the
// sentry's caches, were it told it has the root to itself (gVisor's
// default, exclusive), would not notice.
//
// gVisor's own stack in lite's namespace ("--network=sandbox") would keep
// more of the kernel away, but Debian's runsc (2022-12) takes every network
// namespace for the host's on kernels that show
// /proc/sys/net/core/rmem_default in each (5.x and later), and refuses to
// run its stack there. The egress enforcer holds the namespace either way.
func runscFlags(bundle string) []string {
	s, err := readConfig(bundle)
	if err != nil {
		s = &specs.Spec{}
	}
	return runscFlagsOf(s, ownsCgroup(s))
}

// runscFlagsOf is runscFlags of a bundle's config s; with --ignore-cgroups
// where lite makes the container's cgroup (own: ownsCgroup(s)).
func runscFlagsOf(s *specs.Spec, own bool) []string {
	network := "host"
	if s.Linux != nil {
		for _, ns := range s.Linux.Namespaces {
			if ns.Type == "network" && ns.Path == "" {
				network = "none"
			}
		}
	}
	flags := []string{"--network=" + network, "--host-uds=all", "--overlay2=none", "--file-access=shared"}
	if own {
		flags = append(flags, "--ignore-cgroups")
	}
	return flags
}

// runscLaunch readies bundle for a gVisor create or run: its config
// (runscBundle), runsc's options for it, and where lite makes the
// container's cgroup (ownsCgroup), the cgroup and the command line prefix
// that starts runsc in it. prefix is the launch's own (a rootless one's,
// whose config has no cgroup): it is kept.
func runscLaunch(bundle string, prefix []string) (flags, launchPrefix []string, err error) {
	s, err := runscBundle(bundle)
	if err != nil {
		return nil, nil, err
	}
	own := ownsCgroup(s)
	flags = runscFlagsOf(s, own)
	if prefix != nil || !own {
		return flags, prefix, nil
	}
	if launchPrefix, err = makeCgroup(s); err != nil {
		return nil, nil, err
	}
	return flags, launchPrefix, nil
}

// runscBundle adapts a bundle's config to gVisor before each launch (see
// runscTmp) and returns it.
func runscBundle(bundle string) (*specs.Spec, error) {
	s, err := readConfig(bundle)
	if err != nil {
		return nil, err
	}
	if !runscTmp(s, bundle) {
		return s, nil
	}
	return s, writeConfig(bundle, s)
}

// runscTmp gives gVisor's container of the bundle an explicit /tmp: a bind
// mount of the root file system's own /tmp folder. Without a mount there,
// runsc puts a tmpfs in the sentry's memory over an empty /tmp, whose files
// the host never sees: lite's FileSystem, snapshots, forks and Reset would
// miss them. The mount is made again for each bundle (a standby's or a
// fork's config is a copy of another generation's), and left out when the
// spec mounts /tmp itself (a volume) or the image's /tmp is not a folder
// (the host would follow a symlink). It reports whether s changed.
func runscTmp(s *specs.Spec, bundle string) bool {
	root := "rootfs"
	if s.Root != nil && s.Root.Path != "" {
		root = s.Root.Path
	}
	if !filepath.IsAbs(root) {
		root = filepath.Join(bundle, root)
	}
	own := filepath.Join(root, "tmp")
	// Lite's /tmp mounts of any generation of this sandbox.
	ours := filepath.Join(filepath.Dir(bundle), "bundle*", "*", "tmp")
	changed := false
	mounts := make([]specs.Mount, 0, len(s.Mounts)+1)
	for _, m := range s.Mounts {
		if path.Clean(m.Destination) == "/tmp" {
			if ok, _ := filepath.Match(ours, m.Source); !ok || m.Type != "bind" {
				return changed // the spec's own
			}
			if m.Source == own {
				return false // made for this bundle already
			}
			changed = true
			continue
		}
		mounts = append(mounts, m)
	}
	if fi, err := os.Lstat(own); err == nil && fi.IsDir() {
		opts := []string{"bind", "rw"}
		if s.Root != nil && s.Root.Readonly {
			opts[1] = "ro"
		}
		// Before the mounts inside /tmp, which it would hide.
		at := slices.IndexFunc(mounts, func(m specs.Mount) bool { return strings.HasPrefix(path.Clean(m.Destination), "/tmp/") })
		if at < 0 {
			at = len(mounts)
		}
		mounts = slices.Insert(mounts, at, specs.Mount{Destination: "/tmp", Type: "bind", Source: own, Options: opts})
		changed = true
	}
	s.Mounts = mounts
	return changed
}

// tail returns what was appended to the file at p after offset off.
func tail(p string, off int64) string {
	data, err := os.ReadFile(p)
	if err != nil || int64(len(data)) < off {
		return ""
	}
	return strings.TrimSpace(string(data[off:]))
}

// startCreated starts container id of bundle, made with launch's "create". For runc
// it does what `runc start` does, without starting the runtime's binary
// (about 8 ms of a Reset here): runc's first process waits to open the
// write end of the exec FIFO in the container's state folder, then writes
// a byte and runs the container's process; start opens the read end, reads
// that byte and removes the FIFO, after which runc reports the container
// running. Other runtimes, and a runc state folder without the FIFO, get
// `runtime start`.
func (r *ociRuntime) startCreated(ctx context.Context, id, bundle string) error {
	if r.name == "runc" {
		fifo := filepath.Join(r.root, id, "exec.fifo")
		if fi, err := os.Lstat(fifo); err == nil && fi.Mode()&fs.ModeNamedPipe != 0 {
			return releaseFIFO(ctx, fifo)
		}
	}
	args := []string{"start", id}
	if r.gvisor() {
		args = append(runscFlags(bundle), args...)
	}
	_, err := r.run(ctx, args...)
	return err
}

// releaseFIFO reads runc's exec FIFO at p until its writer closes it, and
// removes it. A FIFO with no writer means the first process is gone.
func releaseFIFO(ctx context.Context, p string) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("starting the container: %w", err)
	}
	defer f.Close()
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	f.SetReadDeadline(deadline)
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("starting the container through %s: %w", p, err)
	}
	if len(data) == 0 {
		return fmt.Errorf("starting the container: its first process is gone (%s has no writer)", p)
	}
	return os.Remove(p)
}

// remove kills container id and deletes it; a container that does not
// exist is not an error.
func (r *ociRuntime) remove(ctx context.Context, id string) error {
	_, err := r.run(ctx, "delete", "--force", id)
	if err == nil || notExist(err) {
		return nil
	}
	// delete --force fails on a container stuck between states; kill,
	// wait a moment and try once more.
	r.run(ctx, "kill", id, "KILL")
	time.Sleep(50 * time.Millisecond)
	if _, err2 := r.run(ctx, "delete", "--force", id); err2 != nil && !notExist(err2) {
		return err
	}
	return nil
}

// removeEnded deletes container id whose first process the caller has
// killed and waited for. For runc it does what `runc delete` does for a
// stopped container, without starting the runtime's binary (about 8 ms of
// each Destroy here): runc destroys the container's cgroups, which the
// caller removes itself (removeCgroups), runs poststop hooks, which lite's
// configs have none of, and removes the container's state folder. Other
// runtimes, a runtime at its default root, and a state folder whose first
// process has not ended (a standby waiting to start, a paused container
// the kill has not reached) go to remove.
func (r *ociRuntime) removeEnded(ctx context.Context, id string) error {
	if r.name != "runc" || r.root == "" {
		return r.remove(ctx, id)
	}
	dir := filepath.Join(r.root, id)
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil // already deleted
		}
	}
	var st struct {
		Pid   int    `json:"init_process_pid"`
		Start uint64 `json:"init_process_start"`
	}
	if err != nil || json.Unmarshal(data, &st) != nil || st.Pid <= 0 || !nsEnded(st.Pid, st.Start) {
		return r.remove(ctx, id)
	}
	return os.RemoveAll(dir)
}

// forget removes what runsc keeps of container id, whose processes are
// all gone: its state and lock files under the root (named
// ID_sandbox:SANDBOX.state and .lock by runsc), as its delete does after
// a wait that costs a second, and the control socket a newer runsc (2023
// on) makes there (runsc-SANDBOX.sock: lite's containers are each their
// own sandbox), which would keep a container of the same ID from being
// made again. A root with no state files (another runsc's layout, or a
// container it never made) goes to remove.
func (r *ociRuntime) forget(ctx context.Context, id string) error {
	if found, err := r.forgetFiles(id); err != nil || found {
		return err
	}
	return r.remove(ctx, id)
}

// forgetFiles is forget without the fallback: it removes the state files
// runsc left of container id, if any, and says whether there were.
func (r *ociRuntime) forgetFiles(id string) (found bool, err error) {
	files, err := filepath.Glob(filepath.Join(r.root, id+"_sandbox:*"))
	if err != nil || len(files) == 0 {
		return false, nil
	}
	files = append(files, filepath.Join(r.root, "runsc-"+id+".sock"))
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return true, err
		}
	}
	return true, nil
}

// list returns the IDs of the containers the runtime knows under its root.
func (r *ociRuntime) list(ctx context.Context) ([]string, error) {
	out, err := r.run(ctx, "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
