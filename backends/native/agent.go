package native

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/agentsock"
)

// A sandbox's own agent: sbxd init also serves the agent (sbxd init
// --agent) on a Unix socket in a tmpfs at agentDir, so a client on the
// engine's host (sbx exec, a program using sbxd.Wrap) connects to it, as
// to lite's, instead of paying an exec for every command or for starting
// an agent. The host reaches the socket through the container's init,
// /proc/PID/root/.sbx-run/agent.sock: a short path (an engine's volume
// folders can be too deep for a socket address), only root's (and the
// engine user's), gone with the container. Only sandboxes that run as root
// get one: the agent runs commands as any user, which a sandbox user other
// than root must not reach through the socket (the tmpfs is 0700).
const (
	agentDir  = "/.sbx-run"
	agentSock = agentDir + "/agent.sock"
)

var _ backend.AgentDialer = (*Sandbox)(nil)

// WithAgentDialer makes the backend reach a sandbox's agent socket, a path
// on the engine's host, through dial (remotedocker: a stream over its SSH
// connection). Without it the backend dials only when the engine is on
// this host (a unix:// engine whose containers' processes this process
// can see).
func WithAgentDialer(dial func(ctx context.Context, path string) (net.Conn, error)) Option {
	return func(b *Backend) { b.agentDial = dial }
}

// Under gVisor the sandbox's tmpfs is its own kernel's, which the host
// cannot see: the agent's folder is an anonymous volume instead (removed
// with the container), and the socket the agent makes there is a host
// socket when the engine runs runsc with --host-uds=create (or all), as
// scripts/docker-setup.sh registers it; the host dials it at the volume's
// folder. Without that flag the sandbox gets no agent of its own, and
// commands go through the engine's exec.

// withAgent adds the agent's folder and flags to a new sandbox's config,
// when the sandbox runs as root. runtimeArgs are the engine's flags for
// the sandbox's runtime.
func withAgent(spec backend.Spec, img image.InspectResponse, id string, cfg *container.Config, hc *container.HostConfig, runtimeArgs []string) {
	user := spec.User
	if user == "" && img.Config != nil {
		user = img.Config.User
	}
	if u, _, _ := strings.Cut(user, ":"); u != "" && u != "root" && u != "0" {
		return
	}
	if len(cfg.Entrypoint) < 2 || cfg.Entrypoint[1] != "init" {
		return
	}
	if backend.RuntimeIsolation(hc.Runtime) == backend.IsolationGVisor {
		if !hostUDS(runtimeArgs) {
			return
		}
		cfg.Entrypoint = append([]string{sbxdPath, "init", "--agent", agentSock, "--sandbox", id}, cfg.Entrypoint[2:]...)
		if cfg.Volumes == nil {
			cfg.Volumes = map[string]struct{}{}
		}
		cfg.Volumes[agentDir] = struct{}{}
		return
	}
	cfg.Entrypoint = append([]string{sbxdPath, "init", "--agent", agentSock, "--sandbox", id}, cfg.Entrypoint[2:]...)
	if hc.Tmpfs == nil {
		hc.Tmpfs = map[string]string{}
	}
	hc.Tmpfs[agentDir] = "mode=0700,size=64k,noexec,nosuid,nodev"
}

// agentSocket is the path of the sandbox's agent socket on the engine's
// host, through its init's root; the init's PID comes from the engine.
func (s *Sandbox) agentSocket(ctx context.Context) (string, error) {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	if !s.agentKnown {
		c, err := s.inspect(ctx)
		if err != nil {
			return "", err
		}
		s.setAgent(c)
	}
	if s.agentHost == "" {
		return "", fmt.Errorf("%w: sandbox %s has no agent of its own (it does not run as root, is not running, or was made by an older sandboxkit)", errors.ErrUnsupported, s.id)
	}
	return s.agentHost, nil
}

// setAgent records how c's agent socket is reached from the engine's host.
func (s *Sandbox) setAgent(c container.InspectResponse) {
	s.agentKnown = true
	s.agentHost = ""
	if s.plain || s.adopted || c.HostConfig == nil || c.State == nil || c.State.Pid <= 0 {
		return
	}
	if _, ok := c.HostConfig.Tmpfs[agentDir]; ok {
		s.agentHost = fmt.Sprintf("/proc/%d/root", c.State.Pid) + agentSock
		return
	}
	for _, m := range c.Mounts {
		if m.Destination == agentDir && m.Type == "volume" && m.Source != "" {
			s.agentHost = m.Source + "/" + path.Base(agentSock)
		}
	}
}

// hostUDS reports whether runsc flags args let a sandbox make host Unix
// sockets (--host-uds=create or all).
func hostUDS(args []string) bool {
	for _, a := range args {
		switch strings.TrimLeft(a, "-") {
		case "host-uds=create", "host-uds=all":
			return true
		}
	}
	return false
}

// DialAgent connects to the agent sbxd init serves, waiting (at most 2 s
// here, 0.5 s through WithAgentDialer) for one that is still starting.
// errors.ErrUnsupported: the sandbox has none, or its socket is on
// another host than this one.
func (s *Sandbox) DialAgent(ctx context.Context) (net.Conn, error) {
	conn, err := s.dialAgent(ctx)
	if errors.Is(err, errors.ErrUnsupported) && s.forgetAgent() {
		// What Get learnt may be stale (the container restarted since).
		conn, err = s.dialAgent(ctx)
	}
	return conn, err
}

// forgetAgent drops what is known about the agent's socket, reporting
// whether there was anything.
func (s *Sandbox) forgetAgent() bool {
	s.agentMu.Lock()
	defer s.agentMu.Unlock()
	known := s.agentKnown
	s.agentKnown = false
	return known
}

func (s *Sandbox) dialAgent(ctx context.Context) (net.Conn, error) {
	p, err := s.agentSocket(ctx)
	if err != nil {
		return nil, s.opErr("dial agent", err)
	}
	var dial func(context.Context) (net.Conn, error)
	retry, limit := agentsock.NotYet, 2*time.Second
	switch {
	case s.b.agentDial != nil:
		// The far end's errors do not tell a socket that is not there
		// yet from one that cannot be reached (sshd without stream
		// forwarding): wait briefly, for an agent that is starting.
		dial = func(ctx context.Context) (net.Conn, error) { return s.b.agentDial(ctx, p) }
		retry, limit = func(error) bool { return true }, 500*time.Millisecond
	case !strings.HasPrefix(s.b.cli.DaemonHost(), "unix://") || s.b.dial != nil:
		return nil, s.opErr("dial agent", fmt.Errorf("%w: the engine (%s) is not on this host", errors.ErrUnsupported, s.b.cli.DaemonHost()))
	default:
		// A unix:// engine in a VM or in another PID namespace (Docker
		// Desktop) has PIDs this host does not know, or knows as other
		// processes: the folder is missing then (and a socket found by
		// chance is not this sandbox's agent, which its hello would tell).
		if _, err := os.Stat(path.Dir(p)); err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
				return nil, s.opErr("dial agent", fmt.Errorf("%w: the sandbox's agent folder %s is not reachable here: %v", errors.ErrUnsupported, path.Dir(p), err))
			}
			return nil, s.opErr("dial agent", err)
		}
		dial = func(ctx context.Context) (net.Conn, error) { return agentsock.DialNoFollow(ctx, p) }
	}
	conn, err := agentsock.Wait(ctx, limit, dial, retry)
	if err != nil {
		return nil, s.opErr("dial agent", fmt.Errorf("%s: %w", p, err))
	}
	s.agentUp.Store(true)
	return conn, nil
}
