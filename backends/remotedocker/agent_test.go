package remotedocker_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/remotetest"
	"github.com/sandboxkit/sandboxkit/sbxd"
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

	c, err := sbxd.Wrap(t.Context(), victim)
	require.NoError(t, err)
	info, err := c.Agent(t.Context())
	require.NoError(t, err)
	require.True(t, info.Dialled, "the client should use the agent sbxd init serves, through SSH")
	require.Equal(t, 1, info.PID)
	c.Close()

	victimSock := dockertest.AgentSocket(t, h.DockerClient(t), victim.(interface{ ContainerID() string }))
	res, err := attacker.Exec(t.Context(), backend.ExecRequest{Shell: "rm /.sbx-run/agent.sock && ln -s " + victimSock + " /.sbx-run/agent.sock && hostname"})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "%s", res.Stderr)
	attackerHost := string(res.Stdout)

	ac, err := sbxd.Wrap(t.Context(), attacker)
	require.NoError(t, err)
	defer ac.Close()
	out, err := ac.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"hostname"}})
	require.NoError(t, err)
	require.Equal(t, attackerHost, string(out.Stdout), "the attacker's command ran in another sandbox")
	ai, err := ac.Agent(t.Context())
	require.NoError(t, err)
	require.False(t, ai.Dialled, "the client used the agent behind a link the sandbox put in place of its socket")
}
