package backend

import (
	"context"
	"net"
)

// AgentDialer is a sandbox whose in-sandbox agent (sbxd) was started with
// it and can be reached without starting another one through Attacher: a
// client dials it and speaks the agent's protocol over the connection. The
// lite backend offers it (a Unix socket shared with the host).
type AgentDialer interface {
	// DialAgent connects to the agent, waiting within ctx for a sandbox
	// that is still starting. An error wrapping errors.ErrUnsupported
	// means this sandbox has no such agent.
	DialAgent(ctx context.Context) (net.Conn, error)
}
