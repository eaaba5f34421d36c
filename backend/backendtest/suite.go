// Package backendtest is the conformance suite every sandboxkit backend
// passes. A backend's tests call [Run] with a function that opens the
// backend, the way testing/slogtest.Run takes a handler factory:
//
//	func TestConformance(t *testing.T) {
//		dir := t.TempDir()
//		backendtest.Run(t, func(t *testing.T) backend.Backend {
//			b, err := local.New(local.Config{StateDir: dir})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { b.Close() })
//			return b
//		})
//	}
//
// Run checks what package backend promises, on real sandboxes made through
// the backend: exec semantics (output, exit codes, environment, working
// directory, stdin, output caps, streaming, timeouts and cancellation that
// leave no process behind), file access through sbfiles.ReadFile and friends
// (once as the sandbox is, once with its capabilities hidden so the generic
// Exec-based path runs too), reattaching with Get, listing by label, Destroy,
// refusing unsupported options at Create, and the optional capabilities the
// sandboxes implement.
//
// Commands run in the sandboxes need only POSIX sh and coreutils or busybox
// (cat, head, yes, ln, mkdir, mv, cut, id, kill, sleep with fractions of a
// second, and stat and find for the generic file path), so a busybox image
// passes; where orphans are not reaped, /proc tells zombies from live
// processes. The Endpointer and NetworkManager cases serve HTTP with
// busybox's httpd or python3, and the NetworkManager case fetches with
// python3 or nc. The sandbox's working directory must be writable.
//
// Optional capabilities are tested where the sandbox (through [backend.As])
// or the backend (through [backend.AsBackend]) has them: each case checks
// what the capability does, not only that it answers (a file written
// before Reset is gone; a counter stops while paused; a server inside is
// reached through Endpoint; two sandboxes on a session network reach each
// other by name; a volume's files are seen from two sandboxes; a sandbox
// made from a checkpoint has the file written before it; Logs returns what
// the main command printed; the agent dialled through AgentDialer
// answers). The NothingLeftBehind check covers the volumes and networks
// the suite made too.
//
// Subtest names are stable, so a backend that cannot pass one yet can skip
// it with go test -skip while it is fixed.
package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Option configures Run.
type Option func(*config)

type config struct {
	spec         func(name string) backend.Spec
	image        string
	rerunsHidden bool
	removeImage  func(ctx context.Context, ref string) error
	agentCheck   func(ctx context.Context, id string, conn net.Conn) error
	// noTermSignals: why the backend's terminals raise no signals.
	noTermSignals string
	// idleTTL: why the backend's TTL is an idle window.
	idleTTL string
}

// WithSpec sets the base Spec of every sandbox the suite creates. The suite
// then sets Name, adds its own labels, and sets Session and TTL when the base
// leaves them empty. Use it for what a backend needs to make any sandbox at
// all (an image, a runtime, a writable working directory).
func WithSpec(spec func(name string) backend.Spec) Option {
	return func(c *config) { c.spec = spec }
}

// WithImage sets Spec.Image where the base Spec leaves it empty.
func WithImage(image string) Option {
	return func(c *config) { c.image = image }
}

// WithoutCapabilityRerun skips the second run of the file cases on a sandbox
// whose optional capabilities are hidden (see HideCapabilities).
func WithoutCapabilityRerun() Option {
	return func(c *config) { c.rerunsHidden = false }
}

// WithImageRemover gives the suite a way to remove the image its
// Checkpointer case makes (the contract has no call for it). Without one,
// the case logs the image it leaves behind; the image carries the labels
// of the sandbox it was committed from.
func WithImageRemover(remove func(ctx context.Context, ref string) error) Option {
	return func(c *config) { c.removeImage = remove }
}

// WithAgentCheck tells the suite how to check that an agent answers on a
// connection from backend.AgentDialer: the suite dials, check speaks the
// agent's protocol (sbxd's handshake, for instance sbxd.CheckAgent) and
// returns an error if the agent does not answer as the agent of sandbox
// id. A sandbox that is an AgentDialer fails the suite when Run has no
// check.
func WithAgentCheck(check func(ctx context.Context, id string, conn net.Conn) error) Option {
	return func(c *config) { c.agentCheck = check }
}

// WithoutTerminalSignals says why the backend's terminals raise no signals
// for their program: no SIGWINCH when resized, no SIGINT on Ctrl-C (a
// kernel whose ptys do not, such as the gVisor releases before
// google/gvisor#13317 was fixed in 2026). The Terminaler case then checks
// that the program sees the new size and its exit status, and skips the
// signals with that reason.
func WithoutTerminalSignals(why string) Option {
	return func(c *config) { c.noTermSignals = why }
}

// WithIdleTTL says why the backend's TTL is an idle window that each use
// of the sandbox starts again (sbx serve's OpenSandbox API, whose timeout is
// one), not a lifetime from CreatedAt. Info's ExpiresAt is then checked to
// be at least CreatedAt + TTL and at most TTL after the Info call, where a
// lifetime is checked to be CreatedAt + TTL: on a slow machine a minute
// and more passes between a create and an Info, which renews the window.
func WithIdleTTL(why string) Option {
	return func(c *config) { c.idleTTL = why }
}

// Limits on how long the suite waits for the backend. They are generous
// ceilings so that a hang fails with a message instead of the test binary's
// timeout, not performance requirements.
const (
	createTimeout  = 5 * time.Minute // may include pulling an image
	opTimeout      = 2 * time.Minute
	destroyTimeout = 2 * time.Minute
	// defaultTTL bounds how long a sandbox leaked by a crashed test run
	// lives before a reaper may remove it.
	defaultTTL = 30 * time.Minute
)

// labelRun marks every sandbox one Run makes, so the suite can list them
// and check at the end that none is left.
const labelRun = "backendtest.run"

// Run runs the conformance suite against the backend newBackend opens.
//
// newBackend is called once for the suite and, when the backend's
// Capabilities say it is Persistent, again to check that a second instance
// sees the sandboxes the first made (as a restarted program would): every
// backend it returns must manage the same sandboxes. It should register the
// backend's Close with t.Cleanup.
//
// Run returns when every subtest has finished and every sandbox it made is
// destroyed.
func Run(t *testing.T, newBackend func(t *testing.T) backend.Backend, opts ...Option) {
	t.Helper()
	cfg := config{rerunsHidden: true}
	for _, o := range opts {
		o(&cfg)
	}
	b := newBackend(t)
	s := &suite{
		cfg:        cfg,
		newBackend: newBackend,
		b:          b,
		caps:       b.Capabilities(),
		runID:      "bt-" + randomHex(6),
	}
	// The groups run in parallel with each other (making sandboxes is slow
	// on real backends); t.Run of the enclosing group returns when all of
	// them are done, so the leak check runs last.
	t.Run(b.Name(), func(t *testing.T) {
		for _, g := range []struct {
			name string
			fn   func(*testing.T)
		}{
			{"Exec", s.testExec},
			{"Files", s.testFiles},
			{"Get", s.testGet},
			{"List", s.testList},
			{"Destroy", s.testDestroy},
			{"Capabilities", s.testCapabilities},
			{"Optional", s.testOptional},
		} {
			t.Run(g.name, func(t *testing.T) {
				t.Parallel()
				g.fn(t)
			})
		}
	})
	t.Run("NothingLeftBehind", s.testNothingLeftBehind)
}

type suite struct {
	cfg        config
	newBackend func(t *testing.T) backend.Backend
	b          backend.Backend
	caps       backend.Capabilities
	runID      string // value of labelRun on everything this Run makes
}

// needCommand skips a case that needs a main process of its own choosing
// (Spec.Command) on a backend that cannot run one.
func (s *suite) needCommand(t *testing.T) {
	t.Helper()
	if s.caps.NoCommand {
		t.Skip("the backend cannot run Spec.Command (Capabilities.NoCommand)")
	}
}

// spec returns the Spec for a sandbox named name.
func (s *suite) spec(name string) backend.Spec {
	var spec backend.Spec
	if s.cfg.spec != nil {
		spec = s.cfg.spec(name)
	}
	if spec.Image == "" {
		spec.Image = s.cfg.image
	}
	spec.Name = name
	if spec.Session == "" {
		spec.Session = s.runID
	}
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[labelRun] = s.runID
	if spec.TTL == 0 {
		spec.TTL = defaultTTL
	}
	return spec
}

// create makes a sandbox from spec and destroys it when t ends.
func (s *suite) create(t *testing.T, spec backend.Spec) backend.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), createTimeout)
	defer cancel()
	sb, err := s.b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(%q): %v", spec.Name, err)
	}
	destroyAtCleanup(t, sb)
	return sb
}

// destroyAtCleanup destroys sb when t ends, whatever the test's context.
func destroyAtCleanup(t *testing.T, sb backend.Sandbox) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), destroyTimeout)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("cleanup: Destroy(%s): %v", sb.ID(), err)
		}
	})
}

// testCtx returns a context for one subtest's calls, cancelled when t ends.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// testNothingLeftBehind checks that every sandbox, volume and network the
// suite made is gone.
func (s *suite) testNothingLeftBehind(t *testing.T) {
	mine := backend.Filter{Labels: map[string]string{labelRun: s.runID}}
	infos, err := s.b.List(testCtx(t), mine)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	for _, info := range infos {
		t.Errorf("sandbox %s (name %q, state %s) is left behind", info.ID, info.Name, info.State)
	}
	if vm, ok := backend.AsBackend[backend.VolumeManager](s.b); ok {
		vols, err := vm.ListVolumes(testCtx(t), mine)
		if err != nil {
			t.Errorf("ListVolumes: %v", err)
		}
		for _, v := range vols {
			t.Errorf("volume %s is left behind", v.Name)
		}
	}
	if nm, ok := backend.AsBackend[backend.NetworkManager](s.b); ok {
		nets, err := nm.ListNetworks(testCtx(t), mine)
		if err != nil {
			t.Errorf("ListNetworks: %v", err)
		}
		for _, n := range nets {
			t.Errorf("network %s is left behind", n.Name)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
