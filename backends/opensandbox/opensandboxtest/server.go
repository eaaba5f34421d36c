// Package opensandboxtest is an OpenSandbox server for tests: sbx serve's
// OpenSandbox API (package server: the lifecycle API, every sandbox's
// execd, its egress API) over the local backend, behind a thin layer that
// adds the real server's quirks a client must cope with, which a good
// server should not copy. It is NOT the real server and gives no
// isolation: a sandbox is a folder on this host and its commands are host
// processes (absolute paths are host paths).
//
// The layer (quirks.go, commands.go) reproduces:
//   - 202 on create, then Pending for Options.PendingFor (with the
//     Kubernetes runtime's reason and message) before Running; a sandbox
//     whose entrypoint exits is Failed with the reason container_exited and
//     the exit status (sandboxes.go records it);
//   - execd answering 503 until Options.ReadyAfter after Running, and not
//     answering while its sandbox is paused (frozen);
//   - GET /sandboxes answering 500 DOCKER::SANDBOX_QUERY_FAILED ("No such
//     container") while a sandbox it lists is being removed, as the Docker
//     runtime does when a container vanishes between its listing and its
//     inspection; Options.RemovalTime widens that window;
//   - renew-expiration answering 409 DOCKER::INVALID_EXPIRATION for a
//     sandbox created without a timeout;
//   - execd's command stream held open a second after its last event; a
//     command going on when its client goes or its timeout passes (execd's
//     timeout reports evalue "-1", "signal: killed", and kills nothing
//     the command started: the client must); with
//     Options.KeepCommandLogs, each command's output kept in
//     /tmp/<id>.stdout and .stderr, never removed;
//   - with Options.RoutedPorts, ports other than execd's published only
//     through execd's /proxy/{port}/ route (host:port/.../proxy/PORT with
//     execd's headers), as a deployment does for ports it cannot map;
//   - with Options.NoTerminalSessions, execd without bash sessions (404);
//   - a cap on the page size of GET /sandboxes (Options.MaxPageSize).
//
// The API itself is sbx serve's, so what it answers is what the real
// server answers as far as sbx serve is faithful: routes at the root and
// under /v1, the OPEN-SANDBOX-API-KEY header and its 401s, the
// {"code","message"} and FastAPI 422 error shapes, execd's event stream
// (output as lines, exit 0 as execution_complete, any other exit only as
// an error event), the execd access token, the endpoint headers execd
// requests must carry, the server proxy that strips the API key, files
// (info not following symlinks, multipart uploads, octal modes, ranged
// downloads), sessions, the egress API. The layer also records what
// clients send (Requests, CreateRequests) and their protocol breaches
// (Violations: the API key sent to a sandbox, endpoint headers left out).
package opensandboxtest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/server"
)

// Options configure a Server. Zero values take the defaults.
type Options struct {
	// APIKey is the key every lifecycle request must carry ("" accepts
	// any request).
	APIKey string
	// PendingFor is how long a new sandbox stays Pending (default 100 ms).
	PendingFor time.Duration
	// ReadyAfter is how long execd answers 503 after the sandbox is
	// Running (default 100 ms).
	ReadyAfter time.Duration
	// ExecdPort is the sandbox port execd listens on (default 44772).
	ExecdPort int
	// Root holds the sandboxes' folders (default: a new temporary folder,
	// removed by Close).
	Root string
	// MaxPageSize caps the page size of GET /sandboxes below the API's
	// 200, to exercise pagination.
	MaxPageSize int
	// Addr is the address to listen on (default 127.0.0.1 and a free
	// port). Keep it on loopback: commands run on this host.
	Addr string
	// RemovalTime is how long removing a sandbox takes beyond the work
	// itself: the window in which GET /sandboxes fails as the real server's
	// does when a container vanishes while it lists them.
	RemovalTime time.Duration
	// RoutedPorts publishes ports other than execd's only through
	// execd's /proxy/{port}/ route: the endpoints API answers
	// EXECD-ENDPOINT/proxy/{port} with execd's headers even in direct
	// mode.
	RoutedPorts bool
	// Intercept, when set, sees every request first (the lifecycle
	// server's, and execd's with execd's own path) and answers it itself
	// by returning true: for failures no real server produces on cue,
	// such as a download failing just after a command timed out.
	Intercept func(w http.ResponseWriter, r *http.Request) bool
	// KeepCommandLogs writes each command's output to /tmp/<id>.stdout
	// and .stderr on this host and never removes them, as a real execd
	// does.
	KeepCommandLogs bool
	// NoTerminalSessions answers as an execd before bash sessions and
	// their WebSocket (POST /session, GET /ws/session/{id}) do: 404.
	NoTerminalSessions bool
	// CredentialVault makes the egress sidecar serve OpenSandbox's
	// credential vault routes (POST, GET, PATCH, DELETE /credential-vault),
	// keeping what it is given (Vault shows it) and enforcing nothing; a
	// deployment without it answers 404 there.
	CredentialVault bool
}

// Server is the server. Use NewServer, then Close.
type Server struct {
	opts    Options
	root    string
	ownRoot bool
	set     *sandboxes
	api     *server.Server
	inner   http.Handler // the API's handler, behind the quirks
	srv     *httptest.Server

	mu         sync.Mutex
	violations []string
	requests   map[string]int
	creates    []json.RawMessage
	made       map[string]*made  // the sandboxes created through this server
	removals   int               // removals under way
	vaults     map[string]*Vault // sandbox id -> its sidecar's credential vault

	// commands are the command streams still running after their client
	// got its answer (see commands.go); closing ends their wait.
	commands  sync.WaitGroup
	closing   chan struct{}
	closeOnce sync.Once
}

// made is what the layer knows of a sandbox it saw created.
type made struct {
	at         time.Time
	entrypoint []string
	noTimeout  bool
}

// NewServer starts a server on a loopback port.
func NewServer(opts Options) (*Server, error) {
	opts.PendingFor = cmp.Or(opts.PendingFor, 100*time.Millisecond)
	opts.ReadyAfter = cmp.Or(opts.ReadyAfter, 100*time.Millisecond)
	opts.ExecdPort = cmp.Or(opts.ExecdPort, server.OSBExecdPort)
	s := &Server{opts: opts, root: opts.Root, requests: map[string]int{}, made: map[string]*made{}, closing: make(chan struct{})}
	if s.root == "" {
		dir, err := os.MkdirTemp("", "opensandboxtest-")
		if err != nil {
			return nil, err
		}
		s.root, s.ownRoot = dir, true
	}
	fail := func(err error) (*Server, error) {
		if s.api != nil {
			s.api.Close()
		}
		if s.ownRoot {
			os.RemoveAll(s.root)
		}
		return nil, fmt.Errorf("opensandboxtest: %w", err)
	}
	// Commands may run as other users: they must reach their sandbox,
	// and the entrypoint's wrapper must write its status.
	exits := filepath.Join(s.root, "exits")
	if err := os.MkdirAll(exits, 0o755); err != nil {
		return fail(err)
	}
	if err := errors.Join(os.Chmod(s.root, 0o755), os.Chmod(exits, 0o1777)); err != nil {
		return fail(err)
	}
	lb, err := local.New(local.Config{StateDir: filepath.Join(s.root, "sandboxes")})
	if err != nil {
		return fail(err)
	}
	s.set = &sandboxes{local: lb, exits: exits, egress: map[string]backend.Egress{}, paused: map[string]bool{}}
	s.api, err = server.New(server.Options{
		Backend: s.set,
		// The create request says it all: image, entrypoint, env.
		Spec:             func(string) (backend.Spec, error) { return backend.Spec{}, nil },
		APIKey:           opts.APIKey,
		OSBExecdPort:     opts.ExecdPort,
		NoAgent:          true, // execd runs commands itself
		DeleteOnShutdown: true,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return fail(err)
	}
	s.inner = s.api.Handler()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	if opts.Addr != "" {
		l, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return fail(err)
		}
		s.srv.Listener.Close()
		s.srv.Listener = l
	}
	s.srv.Start()
	return s, nil
}

// Domain is the server's host:port, for Config.Domain.
func (s *Server) Domain() string { return strings.TrimPrefix(s.srv.URL, "http://") }

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Violations lists protocol breaches the server saw from clients: the API
// key sent to a sandbox, a missing endpoint header.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// Requests returns how many requests each route ("GET /v1/sandboxes",
// "execd POST /command", ...) received.
func (s *Server) Requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests)
}

// CreateRequests returns the bodies of the create requests received, in
// order.
func (s *Server) CreateRequests() []json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

// SandboxIDs lists the sandboxes that exist, oldest first.
func (s *Server) SandboxIDs() []string {
	infos, _ := s.set.local.List(context.Background(), backend.Filter{})
	slices.SortFunc(infos, func(a, b backend.Info) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	var ids []string
	for _, info := range infos {
		ids = append(ids, info.ID)
	}
	return ids
}

// SandboxDir returns the host folder of a sandbox, its commands' default
// working directory ("" if unknown).
func (s *Server) SandboxDir(id string) string {
	sb, err := s.set.local.Get(context.Background(), id)
	if err != nil {
		return ""
	}
	info, err := sb.Info(context.Background())
	if err != nil {
		return ""
	}
	return info.WorkDir
}

// NetworkPolicy is a create request's networkPolicy and the policy of a
// sandbox's egress sidecar.
type NetworkPolicy struct {
	DefaultAction string        `json:"defaultAction,omitempty"`
	Egress        []NetworkRule `json:"egress"`
}

// NetworkRule is one rule of a NetworkPolicy.
type NetworkRule struct {
	Action string `json:"action"`
	Target string `json:"target"`
}

// EgressPort is the sandbox port of the egress sidecar's API.
const EgressPort = server.OSBEgressPort

// EgressPolicy returns the policy sandbox id's egress sidecar holds, deny
// rules first, and whether it has one.
func (s *Server) EgressPolicy(id string) (NetworkPolicy, bool) { return s.set.policy(id) }

// Close removes every sandbox (killing its processes) and stops the server.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.api.Close() // DeleteOnShutdown: the sandboxes go, and their commands end
		// Sandboxes the API did not know (a create cut short) go too.
		for _, id := range s.SandboxIDs() {
			if sb, err := s.set.local.Get(context.Background(), id); err == nil {
				sb.Destroy(context.Background())
			}
		}
		s.commands.Wait()
		s.srv.Close()
		if s.ownRoot {
			os.RemoveAll(s.root)
		}
	})
}
