package k8s

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

func agentTestBackend(t *testing.T, agent string) *Backend {
	t.Helper()
	c := k8stest.Get(t)
	b, err := New(Config{Kubeconfig: c.Kubeconfig, Namespace: c.Namespace(t), ImagePullPolicy: "IfNotPresent",
		StartTimeoutSec: 120, HelperImage: k8stest.BusyboxImage, Agent: agent})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

func agentTestSandbox(t *testing.T, b *Backend) *Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb, err := b.Create(ctx, backend.Spec{Name: "agent", Image: k8stest.BusyboxImage, TTL: 30 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb.Destroy(dctx)
	})
	return sb.(*Sandbox)
}

// wrapAgent starts sbxd's client on sb and reports whether it reached the
// agent on the pod network, after checking that a command runs.
func wrapAgent(t *testing.T, sb backend.Sandbox) bool {
	t.Helper()
	ctx := t.Context()
	c, err := sbxd.Wrap(ctx, sb)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	info, err := c.Agent(ctx)
	require.NoError(t, err)
	res, err := c.Exec(ctx, backend.ExecRequest{Shell: "echo ok"})
	require.NoError(t, err)
	require.Equal(t, "ok\n", string(res.Stdout))
	return info.Dialled
}

// The process that made a pod reaches its sbxd on the pod's IP (TLS on the
// pod's own certificate, with its token, which only the pod's user can
// read); a sandbox of that pod got through Get (as another process would)
// goes through exec, and so does every pod of a backend set to "exec".
func TestDirectAgent(t *testing.T) {
	t.Parallel()
	b := agentTestBackend(t, "")
	sb := agentTestSandbox(t, b)
	require.NotNil(t, sb.agent, "no credentials for a pod this process made")
	require.NotEmpty(t, sb.podIP)
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Cmd: []string{"stat", "-c", "%a %u", agentFile}})
	require.NoError(t, err)
	assert.Equal(t, "600 0\n", string(res.Stdout), "the credentials' mode and owner")
	// On a loaded machine (CI runs every package at once) a first dial
	// can time out, which marks the pod network down for a while and
	// sends clients through exec, as it should; what this test proves is
	// the direct path, so it waits until the network answers.
	require.Eventually(t, func() bool {
		b.agentFailed.Store(0)
		c, err := sb.DialAgent(t.Context())
		if err != nil {
			t.Logf("dialling the agent on %s: %v", sb.podIP, err)
			return false
		}
		c.Close()
		return true
	}, time.Minute, 200*time.Millisecond, "the agent never answered on the pod network")
	assert.True(t, wrapAgent(t, sb), "the client did not reach the agent on the pod network")

	got, err := b.Get(t.Context(), sb.ID())
	require.NoError(t, err)
	_, err = got.(*Sandbox).DialAgent(t.Context())
	assert.ErrorIs(t, err, errors.ErrUnsupported, "a sandbox without the credentials dialled")
	assert.False(t, wrapAgent(t, got))

	viaExec := agentTestSandbox(t, agentTestBackend(t, "exec"))
	assert.Nil(t, viaExec.agent)
	assert.False(t, wrapAgent(t, viaExec), `agent = "exec" reached the agent on the pod network`)
}

// Where the agent cannot be reached on the pod network the client goes
// through exec: a refusal is tried again for a while and then given up;
// an address that does not answer makes the backend stop trying.
func TestDirectAgentFallsBack(t *testing.T) {
	t.Parallel()
	b := agentTestBackend(t, "")
	sb := agentTestSandbox(t, b)
	pod, err := b.getPod(t.Context(), sb.id)
	require.NoError(t, err)
	elsewhere := func(ip string) *Sandbox {
		s := b.sandboxFor(pod)
		s.agent, s.podIP = sb.agent, ip
		return s
	}

	// Nothing listens there: refused.
	refused := elsewhere("127.0.0.1")
	start := time.Now()
	_, err = refused.DialAgent(t.Context())
	require.Error(t, err)
	assert.NotErrorIs(t, err, errors.ErrUnsupported)
	assert.GreaterOrEqual(t, time.Since(start), agentStartWait, "a refusal was not tried again")
	assert.False(t, b.agentDown(), "a refusal stopped the direct connections")

	// The subnet's own address: no one answers.
	silent := elsewhere("10.248.1.0")
	start = time.Now()
	_, err = silent.DialAgent(t.Context())
	require.Error(t, err)
	assert.GreaterOrEqual(t, time.Since(start), agentDialTries*agentDialTimeout, "an unanswered dial was not tried again")
	var ne net.Error
	t.Logf("an unanswered dial: %v (timeout %v)", err, errors.As(err, &ne) && ne.Timeout())
	require.True(t, b.agentDown(), "an address that did not answer left the direct connections on: %v", err)
	start = time.Now()
	_, err = sb.DialAgent(t.Context())
	assert.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Less(t, time.Since(start), agentDialTimeout, "DialAgent tried while the pod network was known not to answer")
	assert.False(t, wrapAgent(t, sb), "the client did not fall back to exec")
}
