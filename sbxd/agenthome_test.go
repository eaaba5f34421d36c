package sbxd_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// On local the agent's copy and its background jobs' output live in the
// sandbox's own state folder, and go with it: nothing is left in the
// host's shared /tmp/.sbxd after Destroy.
func TestLocalAgentLivesInTheSandbox(t *testing.T) {
	b := newLocal(t)
	sb, err := b.Create(t.Context(), backend.Spec{Name: "home"})
	require.NoError(t, err)
	c, err := sbxd.Wrap(t.Context(), sb) // injects the embedded agent
	require.NoError(t, err)
	require.NoError(t, c.Fallback(), "the agent did not start")
	job, err := c.StartJob(t.Context(), backend.ExecRequest{Shell: "echo job output"}, 0)
	require.NoError(t, err)
	_, err = c.WaitJob(t.Context(), job.ID)
	require.NoError(t, err)

	home := sb.(sbxd.AgentHomer).AgentHome()
	jobs, _ := filepath.Glob(filepath.Join(home, "jobs", "*"))
	require.NotEmpty(t, jobs, "the job's output is under the sandbox's agent home %s", home)
	shared := filepath.Join("/tmp/.sbxd", "jobs-"+sb.ID())
	require.NoDirExists(t, shared)

	require.NoError(t, c.Destroy(t.Context()))
	require.NoDirExists(t, home)
	_, err = os.Stat(shared)
	require.True(t, os.IsNotExist(err), "nothing of the sandbox in /tmp/.sbxd: %v", err)
}
