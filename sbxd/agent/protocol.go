package agent

import (
	"strconv"

	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// staleProtocol, when set at link time (-ldflags -X
// github.com/sandboxkit/sandboxkit/sbxd/agent.staleProtocol=N), is the
// protocol number the agent claims instead of sbxdwire.ProtocolVersion:
// the tests build a stale agent this way.
var staleProtocol string

func advertisedProtocol() int {
	if n, err := strconv.Atoi(staleProtocol); err == nil {
		return n
	}
	return sbxdwire.ProtocolVersion
}

// Markers a backend may have given the agent itself; commands do not
// inherit them, so that killing the agent by its marker does not kill
// background jobs (the local backend uses SANDBOXKIT_EXEC_ID).
var agentMarkers = []string{sbxdwire.EnvExecID, "SANDBOXKIT_EXEC_ID"}
