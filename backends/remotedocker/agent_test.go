package remotedocker_test

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
)

// The sandbox's own agent is reached through the SSH connection. The far
// side follows links, so a sandbox that swaps its socket for a link to
// another sandbox's agent is caught by the agent's hello, which names the
// sandbox it serves: the client falls back to an agent it starts, and the
// command runs in the sandbox it was meant for.
func TestAgentOverSSH(t *testing.T) {
	h := remotetest.Get(t)
	b := open(t, config(h))
	victim := create(t, b, spec("victim", dockertest.BusyboxImage))
	attacker := create(t, b, spec("attacker", dockertest.BusyboxImage))

	dockertest.CheckAgentSocketSwap(t, h.DockerClient(t), victim, attacker)
}
