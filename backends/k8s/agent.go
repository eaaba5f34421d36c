package k8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/agenttls"
)

var _ backend.AgentDialer = (*Sandbox)(nil)

const (
	// agentDialTimeout bounds one connection attempt to a pod's agent.
	agentDialTimeout = time.Second
	// agentDialTries is how many attempts an unanswered connection gets
	// before the pod network counts as not answering: a new pod's first
	// packet may wait for its address to resolve (ARP asks again after a
	// second) or on a loaded host (CI saw one attempt time out on a pod
	// it had just made).
	agentDialTries = 2
	// agentStartWait is how long a refused connection is tried again: a
	// new pod's main process becomes sbxd init within a second of sbxd
	// arriving (keepAlive looks once a second).
	agentStartWait = 3 * time.Second
	// agentDownFor is how long after the pod network failed to answer
	// (nothing routes there from this host, or a policy drops it; not a
	// refusal or a failed handshake) this backend goes through exec
	// without trying.
	agentDownFor = 5 * time.Minute
)

// directAgent reports whether a pod made for spec gets an agent this
// process reaches straight (see Config.Agent): the pod runs keepAlive and
// its network is not cut off or policed.
func (b *Backend) directAgent(spec backend.Spec) bool {
	return b.cfg.Agent != "exec" && !spec.ImageCommand && spec.Command == nil &&
		spec.Egress == nil && spec.Network != "none"
}

// agentDown tells whether a direct connection failed lately.
func (b *Backend) agentDown() bool {
	t := b.agentFailed.Load()
	return t != 0 && time.Since(time.Unix(0, t)) < agentDownFor
}

// DialAgent connects to the pod's sbxd on the pod's IP, with TLS on the
// certificate made for this pod and its token (see internal/agenttls). It
// fails with errors.ErrUnsupported, and the client goes through exec, for
// pods this process did not make with such an agent, and for a while after
// the pod network did not answer.
func (s *Sandbox) DialAgent(ctx context.Context) (net.Conn, error) {
	if s.agent == nil || s.podIP == "" {
		return nil, fmt.Errorf("%w: sandbox %s: no agent on the pod network for this process", errors.ErrUnsupported, s.id)
	}
	if s.b.agentDown() {
		return nil, fmt.Errorf("%w: sandbox %s: the pod network did not answer lately", errors.ErrUnsupported, s.id)
	}
	addr := net.JoinHostPort(s.podIP, strconv.Itoa(agenttls.Port))
	start := time.Now()
	for unansweredTries := 0; ; {
		dctx, cancel := context.WithTimeout(ctx, agentDialTimeout)
		conn, err := agenttls.Dial(dctx, addr, s.agent)
		cancel()
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, syscall.ECONNREFUSED) && time.Since(start) < agentStartWait {
			select {
			case <-time.After(20 * time.Millisecond):
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if unanswered(err) {
			if unansweredTries++; unansweredTries < agentDialTries {
				continue
			}
			s.b.agentFailed.Store(time.Now().UnixNano())
			s.b.log.Info("the pod network does not answer; reaching sbxd through the API server's exec", "sandbox", s.id, "addr", addr, "err", err)
		}
		return nil, fmt.Errorf("sandbox %s: the agent at %s: %w", s.id, addr, err)
	}
}

// withAgent gives s, a pod this process just made for spec, the
// credentials of its direct agent, which setUp hands the pod.
func (s *Sandbox) withAgent(spec backend.Spec, podIP string) error {
	if !s.b.directAgent(spec) || podIP == "" {
		return nil
	}
	c, err := agenttls.New()
	if err != nil {
		return err
	}
	s.agent, s.podIP = c, podIP
	return nil
}

// unanswered tells whether err says that nothing answered at an address
// (no route, or no reply in time), rather than that something refused or
// failed the handshake there.
func unanswered(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
