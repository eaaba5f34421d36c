package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
)

// Session is a launched (or resumed) set of sandboxes. Its methods are
// safe for concurrent use.
type Session struct {
	// ID names the session; every resource carries it as
	// backend.LabelSession.
	ID string
	// Env is what the members publish, with addresses as seen from inside
	// the session; also in the shared folder's bashrc.
	Env map[string]string
	// Warnings are things the backend could not do (no shared volumes, no
	// session network), for the user to see.
	Warnings []string

	backend     backend.Backend
	ownsBackend bool
	log         *slog.Logger

	// Where the shared folders are inside the sandboxes ("": not mounted).
	shared, bashTools, scripts string
	// volumes are the session volumes, for Checkpoint.
	volumes []sessionVolume

	mu      sync.Mutex
	members map[string]*Member
	closed  bool
}

// Member is one sandbox of a session.
type Member struct {
	Name, Type string
	Sandbox    backend.Sandbox
	// Handle is the initializer's typed handle (*initializers.Neo4j,
	// *initializers.GDBMCP, ...), nil for initializers without one. See
	// HandleOf.
	Handle any
	// Env is what this member publishes to the session.
	Env map[string]string
	// Ports are the TCP ports it publishes to the host (see
	// Session.Endpoint).
	Ports []int
	// MCPServices are the SSE URLs of the entry's mcp_services as the
	// host program dials them (OpenSage's http://host:sse_port/sse, with
	// the sandbox's published address as the host), by service name.
	MCPServices map[string]string
}

func (s *Session) addMember(m *member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members == nil {
		s.members = map[string]*Member{}
	}
	var ports []int
	for _, p := range m.spec.Ports {
		if p.Protocol == "" || p.Protocol == "tcp" {
			ports = append(ports, p.Port)
		}
	}
	slices.Sort(ports)
	s.members[m.name] = &Member{Name: m.name, Type: m.typ, Sandbox: m.sb, Env: m.env, Ports: slices.Compact(ports)}
}

// finish copies the handles of ready members into the session.
func (s *Session) finish(ms []*member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range ms {
		if mm := s.members[m.name]; mm != nil {
			mm.Handle = m.handle
			mm.MCPServices = m.mcpURLs
		}
	}
}

// Backend is the backend the session's sandboxes live on.
func (s *Session) Backend() backend.Backend { return s.backend }

// Members returns the session's sandboxes, sorted by name.
func (s *Session) Members() []*Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.members))
	slices.SortFunc(out, func(a, b *Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Member returns the named sandbox.
func (s *Session) Member(name string) (*Member, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.members[name]; m != nil {
		return m, nil
	}
	return nil, fmt.Errorf("session %s: no sandbox %q (have %s): %w", s.ID, name,
		strings.Join(slices.Sorted(maps.Keys(s.members)), ", "), backend.ErrNotFound)
}

// Sandbox returns the named sandbox's backend.Sandbox.
func (s *Session) Sandbox(name string) (backend.Sandbox, error) {
	m, err := s.Member(name)
	if err != nil {
		return nil, err
	}
	return m.Sandbox, nil
}

// Endpoint returns the "host:port" a host program dials for a published
// port of the named sandbox.
func (s *Session) Endpoint(ctx context.Context, name string, port int) (string, error) {
	m, err := s.Member(name)
	if err != nil {
		return "", err
	}
	ep, ok := backend.As[backend.Endpointer](m.Sandbox)
	if !ok {
		return "", fmt.Errorf("session %s: sandbox %q: the %s backend publishes no ports: %w", s.ID, name, s.backend.Name(), errors.ErrUnsupported)
	}
	return ep.Endpoint(ctx, port)
}

// HandleOf returns the named member's typed handle, e.g.
// HandleOf[*initializers.Neo4j](s, "neo4j").
func HandleOf[T any](s *Session, name string) (T, error) {
	var zero T
	m, err := s.Member(name)
	if err != nil {
		return zero, err
	}
	h, ok := m.Handle.(T)
	if !ok {
		return zero, fmt.Errorf("session %s: sandbox %q (type %s) has a handle of type %T, not %T", s.ID, name, m.Type, m.Handle, zero)
	}
	return h, nil
}

// Close detaches from the session, which keeps running (Resume finds it
// again), and closes the backend if the session opened it.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.ownsBackend {
		s.closed = true
		return nil
	}
	s.closed = true
	return s.backend.Close()
}

// Destroy removes every sandbox, volume and network of the session (also
// ones it no longer knows about, found by label), then closes it.
func (s *Session) Destroy(ctx context.Context) error {
	removed, err := destroy(ctx, s.backend, s.ID)
	for _, m := range s.Members() {
		if removed[m.Sandbox.ID()] {
			continue
		}
		if derr := m.Sandbox.Destroy(ctx); derr != nil {
			err = errors.Join(err, derr)
		}
	}
	return errors.Join(err, s.Close())
}

// Destroy removes everything on b labelled with session id:
// sandboxes first, then the volumes and networks they used. What is gone
// already is not an error.
func Destroy(ctx context.Context, b backend.Backend, id string) error {
	_, err := destroy(ctx, b, id)
	return err
}

// destroy is Destroy; it also returns the IDs of the sandboxes it
// removed. Everything of a kind goes at once: each removal is a round
// trip to the engine, and some (a container's files) take the engine a
// while.
func destroy(ctx context.Context, b backend.Backend, id string) (map[string]bool, error) {
	if id == "" {
		return nil, backend.InvalidConfigf("session.Destroy: empty session ID")
	}
	infos, err := b.List(ctx, backend.Filter{Session: id})
	if err != nil {
		return nil, err
	}
	var (
		errs    []error
		removed = map[string]bool{}
		wg      sync.WaitGroup
		mu      sync.Mutex
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for _, info := range infos {
		wg.Go(func() {
			sb, err := b.Get(ctx, info.ID)
			if err == nil {
				err = sb.Destroy(ctx)
			}
			if err != nil && !errors.Is(err, backend.ErrNotFound) {
				fail(fmt.Errorf("sandbox %s (%s): %w", info.Name, info.ID, err))
				return
			}
			mu.Lock()
			removed[info.ID] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	// Volumes and networks do not depend on each other.
	if vm, ok := backend.AsBackend[backend.VolumeManager](b); ok {
		wg.Go(func() {
			vols, err := vm.ListVolumes(ctx, backend.Filter{Session: id})
			if err := ignoreUnsupported(err); err != nil {
				fail(err)
			}
			var vwg sync.WaitGroup
			for _, v := range vols {
				vwg.Go(func() {
					if err := vm.RemoveVolume(ctx, v.Name); err != nil {
						fail(fmt.Errorf("volume %s: %w", v.Name, err))
					}
				})
			}
			vwg.Wait()
		})
	}
	if nm, ok := backend.AsBackend[backend.NetworkManager](b); ok {
		wg.Go(func() {
			nets, err := nm.ListNetworks(ctx, backend.Filter{Session: id})
			if err := ignoreUnsupported(err); err != nil {
				fail(err)
			}
			for _, n := range nets {
				if err := nm.RemoveNetwork(ctx, n.Name); err != nil {
					fail(fmt.Errorf("network %s: %w", n.Name, err))
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("destroying session %s: %w", id, err)
	}
	return removed, nil
}

// ignoreUnsupported is nil for an error wrapping errors.ErrUnsupported: a
// backend that cannot list volumes or networks has none to remove.
func ignoreUnsupported(err error) error {
	if errors.Is(err, errors.ErrUnsupported) {
		return nil
	}
	return err
}

// createNetwork makes a session network where the backend can: "" when it
// has no NetworkManager, or has one that answers ErrUnsupported.
func createNetwork(ctx context.Context, b backend.Backend, spec backend.NetworkSpec) (string, error) {
	nm, ok := backend.AsBackend[backend.NetworkManager](b)
	if !ok {
		return "", nil
	}
	name, err := nm.CreateNetwork(ctx, spec)
	if errors.Is(err, errors.ErrUnsupported) {
		return "", nil
	}
	return name, err
}

// makeShared creates the session network and the shared volumes, where the
// backend can, and adds them to every member's Spec.
func (l *Launcher) makeShared(ctx context.Context, s *Session, ms []*member) error {
	ttl := time.Duration(0)
	for _, m := range ms {
		ttl = max(ttl, m.spec.TTL)
	}
	if l.forPool != nil {
		ttl = 0 // gc removes them once the session has no sandboxes
	}
	labels := map[string]string{}
	if l.Owner != "" {
		labels[backend.LabelOwner] = l.Owner
	}
	netName, err := createNetwork(ctx, s.backend, backend.NetworkSpec{Session: s.ID, Labels: labels, TTL: ttl})
	if err != nil {
		return fmt.Errorf("session %s: creating the session network: %w", s.ID, err)
	}
	if netName != "" {
		for _, m := range ms {
			if m.spec.Network == "" {
				m.spec.Network = netName
			} else {
				s.Warnings = append(s.Warnings, fmt.Sprintf("sandbox %q sets network = %q, so the others cannot reach it by name", m.name, m.spec.Network))
			}
		}
		applyEnv(s, ms, func(m *member) string { return m.name })
	} else {
		s.Warnings = append(s.Warnings, fmt.Sprintf("the %s backend has no session networks: services publish 127.0.0.1 addresses", s.backend.Name()))
		applyEnv(s, ms, func(*member) string { return "127.0.0.1" })
	}

	vm, ok := backend.AsBackend[backend.VolumeManager](s.backend)
	noVolumes := func() error {
		s.Warnings = append(s.Warnings, fmt.Sprintf("the %s backend has no shared volumes: no %s, %s or %s in the sandboxes",
			s.backend.Name(), l.Config.Sandbox.Paths.Shared, l.Config.Sandbox.Paths.BashTools, l.Config.Sandbox.Paths.SandboxScripts))
		return nil
	}
	if !ok {
		return noVolumes()
	}
	paths := l.Config.Sandbox.Paths
	bashTools, scripts, _ := l.toolFolders()
	for _, v := range []struct {
		role, target, from string
		readOnly           bool
		set                *string
	}{
		{"shared", paths.Shared, l.Config.SharedDataPath(), false, &s.shared},
		{"bash_tools", paths.BashTools, bashTools, false, &s.bashTools},
		{"sandbox_scripts", paths.SandboxScripts, scripts, true, &s.scripts},
	} {
		if v.target == "" {
			continue
		}
		if v.role == "shared" && v.from != "" {
			if w := l.Config.SharedDataWarning(); w != "" {
				// OpenSage copies nothing and goes on.
				s.Warnings = append(s.Warnings, w)
				v.from = ""
			}
			v.from = loneArchive(v.from)
		}
		filled := false
		if !v.readOnly && l.Manifest.hasVolume(v.role) {
			v.from = "" // the checkpoint's archive holds what the seed became
			if l.fillVolumes {
				from, err := l.volumeFill(s, v.role)
				if err != nil {
					return fmt.Errorf("session %s: the %s volume: %w", s.ID, v.role, err)
				}
				v.from, filled = from, true
			}
		}
		name, err := vm.CreateVolume(ctx, backend.VolumeSpec{
			Name: "sbx-" + s.ID + "-" + strings.ReplaceAll(v.role, "_", "-"), Session: s.ID,
			Labels:   withLabels(labels, map[string]string{"sandboxkit.session.volume": v.role}),
			FromPath: v.from, TTL: ttl,
		})
		if errors.Is(err, errors.ErrUnsupported) && v.role == "shared" {
			// It has the interface but cannot serve it (backend/doc.go).
			return noVolumes()
		}
		if err != nil {
			return fmt.Errorf("session %s: creating the %s volume: %w", s.ID, v.role, err)
		}
		*v.set = v.target
		s.volumes = append(s.volumes, sessionVolume{role: v.role, name: name, target: v.target, readOnly: v.readOnly,
			filled: filled, members: volumeMembers(ms, v.target)})
		for _, m := range ms {
			if slices.ContainsFunc(m.spec.Volumes, func(x backend.Volume) bool { return x.Target == v.target }) {
				s.Warnings = append(s.Warnings, fmt.Sprintf("sandbox %q mounts %s itself, so it does not see the session's %s volume", m.name, v.target, v.role))
				continue
			}
			m.spec.Volumes = append(m.spec.Volumes, backend.Volume{Type: backend.VolumeNamed, Source: name, Target: v.target, ReadOnly: v.readOnly})
		}
	}
	return nil
}

// loneArchive returns the .tar.gz (or .tgz) that folder dir holds and
// nothing else, which OpenSage unpacks into /shared as if it were named
// itself; else dir.
func loneArchive(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || !entries[0].Type().IsRegular() {
		return dir
	}
	name := strings.ToLower(entries[0].Name())
	if strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, ".tgz") {
		return filepath.Join(dir, entries[0].Name())
	}
	return dir
}

// applyEnv sets each member's published environment with hostFor's
// addresses, the session's Env, and every member's Spec.Env (the entry's
// own environment wins).
func applyEnv(s *Session, ms []*member, hostFor func(*member) string) {
	env := map[string]string{"SBX_SESSION_ID": s.ID}
	for _, m := range ms {
		m.env = m.init.Publish(hostFor(m))
		maps.Copy(env, m.env)
	}
	s.Env = env
	for _, m := range ms {
		merged := maps.Clone(env)
		maps.Copy(merged, m.spec.Env)
		m.spec.Env = merged
	}
}

// CheckEntries decodes every entry's initializer config and checks
// dependencies, as Launch does before making anything, so `sbx config
// check` can report mistakes without launching. reg nil: initializers.Default().
func CheckEntries(c *config.Config, reg *initializers.Registry) error {
	if len(c.SandboxNames()) == 0 {
		return nil // valid: nothing to launch (see config.Config.NothingToLaunch)
	}
	l := &Launcher{Config: c, Initializers: reg, checkOnly: true}
	_, err := l.plan(nil, "check")
	return err
}

// EntryWarnings returns what a launch of every entry would warn about
// before making anything: the [extra] keys that neither the selected
// backend nor the entry's initializer reads (config.Config.ExtraWarnings),
// by entry, then the sandbox scripts initializers would lack
// (Launcher.ScriptWarnings). Entries whose initializer settings are
// invalid are left to CheckEntries. reg nil: initializers.Default().
func EntryWarnings(c *config.Config, reg *initializers.Registry) []string {
	l := &Launcher{Config: c, Initializers: reg, checkOnly: true}
	var out []string
	var ms []*member
	for _, name := range c.SandboxNames() {
		if m, err := l.planMember(name); err == nil {
			out = append(out, m.warnings...)
			ms = append(ms, m)
		}
	}
	return append(out, l.scriptWarnings(ms)...)
}

// toolFolders returns the host folders that fill the session's bash_tools
// and sandbox_scripts volumes (BashToolsDir and SandboxScriptsDir, else
// config.Config.ToolFolders), and where the scripts come from.
func (l *Launcher) toolFolders() (bashTools, scripts, scriptsFrom string) {
	bashTools, _, scripts, scriptsFrom = l.Config.ToolFolders()
	if l.BashToolsDir != "" {
		bashTools = l.BashToolsDir
	}
	if l.SandboxScriptsDir != "" {
		scripts, scriptsFrom = l.SandboxScriptsDir, "the launch's sandbox scripts folder"
	}
	return bashTools, scripts, scriptsFrom
}

// scriptWarnings says, before a launch, which members' initializers will
// lack the OpenSage scripts they run (initializers.ScriptsUser): all of
// them when nothing fills sandbox_scripts (their images may still hold
// /sandbox_scripts), else those the folder lacks.
func (l *Launcher) scriptWarnings(ms []*member) []string {
	_, dir, from := l.toolFolders()
	var lacking []string
	var out []string
	for _, m := range ms {
		su, ok := m.init.(initializers.ScriptsUser)
		if !ok || m.cached {
			continue
		}
		for _, rel := range su.SandboxScripts() {
			switch {
			case dir == "":
				lacking = append(lacking, fmt.Sprintf("%s (%s)", m.name, rel))
			default:
				if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel))); err != nil {
					out = append(out, fmt.Sprintf("sandbox %q (type %s) runs %s from sandbox_scripts, which %s (from %s) does not have",
						m.name, m.typ, rel, dir, from))
				}
			}
		}
	}
	if len(lacking) > 0 {
		out = append(out, fmt.Sprintf("the session's sandbox_scripts folder starts empty (the project root %s is no OpenSage checkout with %s, "+
			"and neither [sandbox] sandbox_scripts_path nor sbx up --sandbox-scripts names one), so these lack their OpenSage scripts "+
			"unless their images hold them in /sandbox_scripts: %s",
			l.Config.ProjectRoot, config.OpenSageSandboxScripts, strings.Join(lacking, ", ")))
	}
	return out
}

// Standalone is for programs that make single sandboxes of an entry, not
// sessions (sbx serve): it returns the entry's Spec as its initializer
// makes it (no shared volumes, no session network) and a function that
// provisions a sandbox made from that Spec (main: the pip packages), bounded
// by the entry's initializer timeout. Dependencies and readiness probes,
// which need a session, are not run; an entry with using_cached is not
// provisioned either (its image already is).
func (l *Launcher) Standalone(name string) (backend.Spec, func(context.Context, backend.Sandbox) error, error) {
	m, err := l.planMember(name)
	if err != nil {
		return backend.Spec{}, nil, err
	}
	provision := func(ctx context.Context, sb backend.Sandbox) error {
		if m.cached {
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, m.timeout)
		defer cancel()
		in := &initializers.Instance{Name: name, Type: m.typ, Sandbox: sb,
			Logger: l.logger().With("sandbox", name), Status: func(string) {}}
		if err := m.init.Provision(ctx, in); err != nil {
			return fmt.Errorf("provisioning %s sandbox %s: %w", name, sb.ID(), err)
		}
		return nil
	}
	return m.spec, provision, nil
}
