package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers"
)

// Resume reattaches to the running session id after the host program
// restarted: it finds the session's sandboxes by label, checks that every
// member the session was launched with is still there and running, and
// rebuilds the handles from the config's entries. A member that stopped
// (an sbx move cut short stops the original's; an engine restart) is
// started again where the backend can (backend.Stopper): its command
// afresh, its files as they were. A member removed behind the session's
// back is an error wrapping backend.ErrNotFound that names it; Destroy
// (or sbx down) cleans up what is left.
func (l *Launcher) Resume(ctx context.Context, id string) (*Session, error) {
	if l.Config == nil {
		return nil, backend.InvalidConfigf("session: Launcher without Config")
	}
	if id == "" {
		return nil, backend.InvalidConfigf("Resume: empty session ID")
	}
	b, owned, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	s := &Session{ID: id, backend: b, ownsBackend: owned, log: l.logger()}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	infos, err := b.List(ctx, backend.Filter{Session: id})
	if err != nil {
		return nil, err
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("session %s: no sandboxes carry this session ID on the %s backend (see sbx status): %w", id, b.Name(), backend.ErrNotFound)
	}
	var names []string
	byName := map[string]backend.Info{}
	for _, info := range infos {
		byName[info.Name] = info
		if v := info.Labels[LabelMembers]; v != "" && names == nil {
			names = strings.Split(v, ",")
		}
	}
	if names == nil {
		for _, info := range infos {
			names = append(names, info.Name)
		}
	}
	var ms []*member
	for _, name := range names {
		info, ok := byName[name]
		if !ok {
			return nil, fmt.Errorf("session %s: sandbox %q is gone (removed outside sandboxkit?); end the session with sbx down %s and launch it again: %w",
				id, name, id, backend.ErrNotFound)
		}
		sb, err := b.Get(ctx, info.ID)
		if err != nil {
			return nil, fmt.Errorf("session %s: sandbox %q: %w", id, name, err)
		}
		if info.State == backend.StateExited {
			// Stopped (by an sbx move cut short, an engine restart): its
			// files are there, and its command starts afresh.
			if st, ok := backend.As[backend.Stopper](sb); ok {
				if err := st.Start(ctx); err != nil {
					return nil, fmt.Errorf("session %s: sandbox %q (%s) had stopped and does not start again: %w", id, name, info.ID, err)
				}
				s.log.Warn("a sandbox of the session had stopped; started it again (its command afresh, its files as they were)", "session", id, "sandbox", name)
				info.State = backend.StateRunning
			}
		}
		if info.State != backend.StateRunning {
			return nil, fmt.Errorf("session %s: sandbox %q (%s) is %s, not running; end the session with sbx down %s and launch it again",
				id, name, info.ID, info.State, id)
		}
		m, err := l.resumeMember(name, info)
		if err != nil {
			return nil, err
		}
		m.sb = sb
		ms = append(ms, m)
	}
	// Shared folders and the network, as Launch made them.
	hostFor := func(*member) string { return "127.0.0.1" }
	if nm, ok := backend.AsBackend[backend.NetworkManager](b); ok {
		if nets, err := nm.ListNetworks(ctx, backend.Filter{Session: id}); err == nil && len(nets) > 0 {
			hostFor = func(m *member) string { return m.name }
		}
	}
	applyEnv(s, ms, hostFor)
	if vm, ok := backend.AsBackend[backend.VolumeManager](b); ok {
		if vols, err := vm.ListVolumes(ctx, backend.Filter{Session: id}); err == nil {
			paths := l.Config.Sandbox.Paths
			for _, v := range vols {
				role := v.Labels["sandboxkit.session.volume"]
				switch role {
				case "shared":
					s.shared = paths.Shared
				case "bash_tools":
					s.bashTools = paths.BashTools
				case "sandbox_scripts":
					s.scripts = paths.SandboxScripts
				default:
					continue
				}
				target := map[string]string{"shared": s.shared, "bash_tools": s.bashTools, "sandbox_scripts": s.scripts}[role]
				s.volumes = append(s.volumes, sessionVolume{role: role, name: v.Name, target: target,
					readOnly: role == "sandbox_scripts", members: volumeMembers(ms, target)})
			}
			slices.SortFunc(s.volumes, func(a, b sessionVolume) int { return strings.Compare(a.role, b.role) })
		}
	}
	for _, m := range ms {
		s.addMember(m)
		if h, ok := m.init.(initializers.Handler); ok {
			in := &initializers.Instance{Name: m.name, Type: m.typ, Session: id, Sandbox: m.sb,
				Shared: s.shared, BashTools: s.bashTools, SandboxScripts: s.scripts, Env: s.Env,
				Logger: s.log, Status: func(string) {}}
			if m.handle, err = h.Handle(ctx, in); err != nil {
				return nil, fmt.Errorf("session %s: sandbox %q: %w", id, m.name, err)
			}
		}
	}
	s.finish(ms)
	ok = true
	return s, nil
}

// resumeMember rebuilds a member's initializer from the config's entry of
// the same name and type, else the generic one (no handle).
func (l *Launcher) resumeMember(name string, info backend.Info) (*member, error) {
	typ := info.Labels[LabelType]
	if e, ok := l.Config.Sandbox.Sandboxes[name]; ok && e != nil && (typ == "" || e.Type == typ || (e.Type == "" && name == typ)) {
		return l.planMember(name)
	}
	f, _, err := l.registry().Lookup(initializers.GenericType)
	if err != nil {
		return nil, err
	}
	init, err := f.New(f.NewConfig())
	if err != nil {
		return nil, err
	}
	return &member{name: name, typ: typ, init: init, ready: make(chan struct{})}, nil
}

// ManifestVersion is the manifest format Checkpoint writes: 1 (no
// "version" key) held only images; 2 adds the session volumes.
const ManifestVersion = 2

// Manifest records a session's checkpoint: the image each sandbox was
// committed to and, since version 2, the contents of the session's
// read-write volumes (/shared, /bash_tools) as tar files next to it.
// Launcher.Manifest starts a later launch from it.
type Manifest struct {
	// Version is the format (see ManifestVersion); 0 reads as 1.
	Version   int                        `json:"version,omitempty"`
	Session   string                     `json:"session"`
	Backend   string                     `json:"backend"`
	CreatedAt time.Time                  `json:"created_at"`
	Sandboxes map[string]ManifestSandbox `json:"sandboxes"`
	// Volumes are the saved session volumes by role ("shared",
	// "bash_tools"); a launch from the manifest restores them.
	Volumes map[string]ManifestVolume `json:"volumes,omitempty"`
	// ImageFolder is, in a bundle's manifest, the bundle's folder holding the
	// image archive; each sandbox's Image is then an image's name in it
	// (see Session.WriteBundle).
	ImageFolder string `json:"images,omitempty"`

	// dir is the manifest's folder, against which Volumes' archives
	// resolve ("": the working directory).
	dir string
	// volumesChecked: Restore checked the archives (files of its own
	// temporary folder) before it loaded the images; Launch need not
	// read them again.
	volumesChecked bool
}

// ManifestSandbox is one sandbox of a Manifest.
type ManifestSandbox struct {
	Type  string `json:"type"`
	Image string `json:"image"`
}

// LoadManifest reads a manifest Checkpoint wrote (any version up to
// ManifestVersion).
func LoadManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	if m.Version > ManifestVersion {
		return nil, fmt.Errorf("manifest %s: format version %d is newer than this sandboxkit reads (%d): %w", path, m.Version, ManifestVersion, backend.ErrInvalidConfig)
	}
	if m.dir, err = filepath.Abs(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return &m, nil
}

var notRepoChar = regexp.MustCompile(`[^a-z0-9]+`)

// Checkpoint commits every sandbox of the session to an image (where the
// backend can: backend.Checkpointer) and, when path is not "", saves the
// session's read-write volumes as tar files next to it (path's name
// without its extension, then ".shared.tar", ".bash-tools.tar") and writes
// the manifest there as JSON. A sandbox whose backend cannot checkpoint is
// an error wrapping errors.ErrUnsupported; nothing is written then. The
// files are written under temporary names and renamed once all of them
// are complete, the manifest last, so a checkpoint cut short leaves no
// manifest naming a partial archive (the images committed before the
// failure stay).
func (s *Session) Checkpoint(ctx context.Context, path string) (*Manifest, error) {
	m := &Manifest{Version: ManifestVersion, Session: s.ID, Backend: s.backend.Name(), CreatedAt: time.Now().UTC(),
		Sandboxes: map[string]ManifestSandbox{}, Volumes: map[string]ManifestVolume{}}
	stamp := strconv.FormatInt(time.Now().Unix(), 10)
	for _, mem := range s.Members() {
		cp, ok := backend.As[backend.Checkpointer](mem.Sandbox)
		if !ok {
			return nil, fmt.Errorf("session %s: sandbox %q: the %s backend cannot checkpoint: %w", s.ID, mem.Name, s.backend.Name(), errors.ErrUnsupported)
		}
		repo := strings.Trim(notRepoChar.ReplaceAllString(strings.ToLower(mem.Name), "-"), "-")
		ref, err := cp.Checkpoint(ctx, "sandboxkit-checkpoint/"+s.ID+"-"+repo+":"+stamp)
		if err != nil {
			return nil, fmt.Errorf("session %s: sandbox %q: %w", s.ID, mem.Name, err)
		}
		m.Sandboxes[mem.Name] = ManifestSandbox{Type: mem.Type, Image: ref}
	}
	if path == "" {
		m.Volumes = nil // nowhere to put them
		return m, nil
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("session %s: manifest %s: %w", s.ID, path, err)
	}
	m.dir = dir
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	staged, err := s.saveVolumes(ctx, m, dir, base)
	if err != nil {
		return nil, err
	}
	data, _ := json.MarshalIndent(m, "", "  ")
	mf, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err == nil {
		staged = append(staged, stagedFile{tmp: mf.Name(), final: filepath.Join(dir, filepath.Base(path))})
		_, err = mf.Write(append(data, '\n'))
		if cerr := mf.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(mf.Name(), 0o644)
		}
	}
	if err != nil {
		removeStaged(staged)
		return nil, fmt.Errorf("session %s: writing the manifest: %w", s.ID, err)
	}
	// The archives first, the manifest (which names them) last.
	for i, f := range staged {
		if err := os.Rename(f.tmp, f.final); err != nil {
			removeStaged(staged[i:])
			return nil, fmt.Errorf("session %s: writing the checkpoint: %w", s.ID, err)
		}
	}
	return m, nil
}

// Images returns the manifest's images, sorted.
func (m *Manifest) Images() []string {
	var out []string
	for _, s := range m.Sandboxes {
		out = append(out, s.Image)
	}
	slices.Sort(out)
	return out
}
