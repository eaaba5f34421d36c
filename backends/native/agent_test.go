package native_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// A sandbox's own agent is reached through its socket, and a sandbox that
// swaps its socket for a link to another sandbox's agent gets its own
// commands run in itself still: the link is not followed, the client falls
// back to an agent it starts.
func TestAgentSocketSwapIsRefused(t *testing.T) {
	b := newBackend(t, dockertest.BusyboxImage)
	victim := create(t, b, spec("victim", dockertest.BusyboxImage))
	attacker := create(t, b, spec("attacker", dockertest.BusyboxImage))

	dockertest.CheckAgentSocketSwap(t, dockertest.Client(t), victim, attacker)
}

// A sandbox whose user is not root has no agent of its own: the socket
// would hand root to its user.
func TestNoAgentForOtherUsers(t *testing.T) {
	b := newBackend(t, dockertest.BusyboxImage)
	s := spec("nobody", dockertest.BusyboxImage)
	s.User = "65534"
	sb := create(t, b, s)
	d, ok := backend.As[backend.AgentDialer](sb)
	require.True(t, ok)
	_, err := d.DialAgent(t.Context())
	require.ErrorIs(t, err, errors.ErrUnsupported)
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: "test -e /.sbx-run && echo present || echo absent"})
	require.NoError(t, err)
	require.Equal(t, "absent\n", string(res.Stdout))
}

// Discard of a sandbox made with AutoRemove returns after a kill; the
// engine removes the container and everything of it. Without AutoRemove
// it is Destroy: gone when Discard returns.
func TestDiscard(t *testing.T) {
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	// The entry's command ignores SIGTERM: Discard must still end it.
	for _, tc := range []struct {
		auto bool
		cmd  []string
	}{{true, nil}, {true, []string{"sh", "-c", "trap '' TERM; while :; do sleep 1; done"}}, {false, nil}} {
		auto := tc.auto
		s := spec("discard", dockertest.BusyboxImage)
		s.AutoRemove, s.Command = auto, tc.cmd
		sb, err := b.Create(t.Context(), s)
		require.NoError(t, err)
		cid := sb.(interface{ ContainerID() string }).ContainerID()
		require.NoError(t, sb.(backend.Discarder).Discard(t.Context()))
		if !auto {
			_, err := cli.ContainerInspect(t.Context(), cid)
			require.Error(t, err, "Discard without AutoRemove left the container")
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := cli.ContainerInspect(t.Context(), cid); err != nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "the engine did not remove the discarded container in 30 s")
			time.Sleep(20 * time.Millisecond) // polls a condition
		}
		_, err = b.Get(t.Context(), sb.ID())
		require.ErrorIs(t, err, backend.ErrNotFound)
	}
}
