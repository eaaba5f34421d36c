package opensandboxtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
)

// sandboxes is the local backend (a folder and host processes per
// sandbox) with the three things an OpenSandbox sandbox has that a local
// one lacks, as far as the opensandbox backend's tests need them:
//   - an egress sidecar: a create's networkPolicy is kept and served by the
//     OpenSandbox API's egress routes, and enforces nothing (host processes
//     have no network of their own);
//   - pause and resume: the sandbox's processes are stopped with SIGSTOP,
//     as docker pause freezes a container;
//   - the entrypoint's exit status, for the Failed state's message: the
//     entry's command runs under sh, which writes it to a file when it
//     ends.
//
// Everything else is local's, found through Unwrap.
type sandboxes struct {
	local *local.Backend
	// exits holds a file per sandbox whose entrypoint ended: its status.
	exits string

	mu     sync.Mutex
	egress map[string]backend.Egress // the policy of each sandbox made with one
	paused map[string]bool
}

var (
	_ backend.Backend          = (*sandboxes)(nil)
	_ backend.BackendWrapper   = (*sandboxes)(nil)
	_ backend.EgressController = (*sandboxes)(nil)
)

func (s *sandboxes) Name() string            { return s.local.Name() }
func (s *sandboxes) Unwrap() backend.Backend { return s.local }
func (s *sandboxes) Close() error            { return s.local.Close() }

func (s *sandboxes) Capabilities() backend.Capabilities {
	c := s.local.Capabilities()
	c.Egress, c.EgressWhy = true, ""
	return c
}

// exitScript runs the entrypoint ("$@") and writes its status to the file
// $0/$SANDBOXKIT_SANDBOX_ID.
const exitScript = `"$@"; c=$?; echo "$c" >"$0/$` + local.EnvSandboxID + `"; exit "$c"`

func (s *sandboxes) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	policy := spec.Egress
	spec.Egress = nil
	if len(spec.Command) > 0 {
		spec.Command = append([]string{"sh", "-c", exitScript, s.exits}, spec.Command...)
	}
	sb, err := s.local.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	if policy != nil {
		s.mu.Lock()
		s.egress[sb.ID()] = clonePolicy(*policy)
		s.mu.Unlock()
	}
	return &sandbox{Sandbox: sb, set: s}, nil
}

func (s *sandboxes) Get(ctx context.Context, id string) (backend.Sandbox, error) {
	sb, err := s.local.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &sandbox{Sandbox: sb, set: s}, nil
}

func (s *sandboxes) List(ctx context.Context, f backend.Filter) ([]backend.Info, error) {
	infos, err := s.local.List(ctx, f)
	for i := range infos {
		infos[i].State = s.state(infos[i])
	}
	return infos, err
}

// state is info's state, Paused while its processes are stopped.
func (s *sandboxes) state(info backend.Info) backend.State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused[info.ID] && info.State == backend.StateRunning {
		return backend.StatePaused
	}
	return info.State
}

// exitStatus is what the sandbox's entrypoint exited with ("" while it
// runs, or when it has none).
func (s *sandboxes) exitStatus(id string) string {
	data, _ := os.ReadFile(filepath.Join(s.exits, id))
	return strings.TrimSpace(string(data))
}

func (s *sandboxes) isPaused(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused[id]
}

func (s *sandboxes) EgressStatus(ctx context.Context, id string) (backend.EgressStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.egress[id]
	if !ok {
		return backend.EgressStatus{}, fmt.Errorf("sandbox %s was made without a policy, so it has no egress sidecar: %w", id, errors.ErrUnsupported)
	}
	return backend.EgressStatus{Policy: clonePolicy(p), Denials: []backend.EgressDenial{}}, nil
}

func (s *sandboxes) SetEgress(ctx context.Context, id string, p backend.Egress) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.egress[id]; !ok {
		return fmt.Errorf("sandbox %s was made without a policy, so it has no egress sidecar: %w", id, errors.ErrUnsupported)
	}
	s.egress[id] = clonePolicy(p)
	return nil
}

// policy is sandbox id's egress policy as a NetworkPolicy.
func (s *sandboxes) policy(id string) (NetworkPolicy, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.egress[id]
	if !ok {
		return NetworkPolicy{}, false
	}
	np := NetworkPolicy{DefaultAction: "deny"}
	if p.Default == "allow" {
		np.DefaultAction = "allow"
	}
	for _, t := range p.Deny {
		np.Egress = append(np.Egress, NetworkRule{Action: "deny", Target: t})
	}
	for _, t := range p.Allow {
		np.Egress = append(np.Egress, NetworkRule{Action: "allow", Target: t})
	}
	return np, true
}

func clonePolicy(p backend.Egress) backend.Egress {
	p.Allow, p.Deny = slices.Clone(p.Allow), slices.Clone(p.Deny)
	return p
}

// sandbox is a local sandbox that pauses.
type sandbox struct {
	backend.Sandbox
	set *sandboxes
}

var _ backend.Pauser = (*sandbox)(nil)

func (sb *sandbox) Unwrap() backend.Sandbox { return sb.Sandbox }

func (sb *sandbox) Info(ctx context.Context) (backend.Info, error) {
	info, err := sb.Sandbox.Info(ctx)
	info.State = sb.set.state(info)
	return info, err
}

func (sb *sandbox) Pause(ctx context.Context) error  { return sb.freeze(true) }
func (sb *sandbox) Resume(ctx context.Context) error { return sb.freeze(false) }

// freeze stops (or continues) every process of the sandbox.
func (sb *sandbox) freeze(stop bool) error {
	if _, err := sb.Sandbox.Info(context.Background()); err != nil {
		return err
	}
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	for _, pid := range procfs.FindByEnv(local.EnvSandboxID, sb.ID()) {
		syscall.Kill(pid, sig)
	}
	sb.set.mu.Lock()
	defer sb.set.mu.Unlock()
	if stop {
		sb.set.paused[sb.ID()] = true
	} else {
		delete(sb.set.paused, sb.ID())
	}
	return nil
}

func (sb *sandbox) Destroy(ctx context.Context) error {
	err := sb.Sandbox.Destroy(ctx)
	if err == nil {
		sb.set.mu.Lock()
		delete(sb.set.paused, sb.ID())
		delete(sb.set.egress, sb.ID())
		sb.set.mu.Unlock()
		os.Remove(filepath.Join(sb.set.exits, sb.ID()))
	}
	return err
}
