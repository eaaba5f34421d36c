package session_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
	"github.com/sandboxkit/sandboxkit/session"
)

// marking is a stand-in initializer whose provisioning leaves a marker
// file in the sandbox and whose readiness probe records the sandboxes it
// probed.
type marking struct {
	initializers.Generic
	mu     *sync.Mutex
	probed *[]string
}

func (marking) Provision(ctx context.Context, in *initializers.Instance) error {
	res, err := in.Sandbox.Exec(ctx, backend.ExecRequest{Shell: "touch provisioned"})
	if err == nil && res.ExitCode != 0 {
		err = backend.InvalidConfigf("touch: exit %d: %s", res.ExitCode, res.Stderr)
	}
	return err
}

func (m marking) Ready() wait.Strategy {
	return wait.ForFunc("recorded", func(_ context.Context, sb backend.Sandbox) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		*m.probed = append(*m.probed, sb.ID())
		return nil
	})
}

// An entry with using_cached = true runs its initializer's readiness probe
// but not its provisioning (OpenSage: the cached image is provisioned
// already); the same initializer without it is provisioned. Runs on the
// local backend: no Docker needed.
func TestUsingCachedSkipsProvisioning(t *testing.T) {
	ctx := context.Background()
	reg := config.NewRegistry()
	reg.Register(local.Factory)
	cfg, err := reg.ParseConfig([]byte(`
[sandbox]
backend = "local"
[sandbox.local]
state_dir = "state"
[sandbox.sandboxes.fresh]
type = "marking"
[sandbox.sandboxes.cached]
type = "marking"
using_cached = true
`), filepath.Join(t.TempDir(), "sandbox.toml"))
	require.NoError(t, err)

	var (
		mu     sync.Mutex
		probed []string
		steps  []session.Progress
	)
	l := &session.Launcher{
		Config:       cfg,
		Initializers: testRegistry(map[string]initializers.Initializer{"marking": marking{mu: &mu, probed: &probed}}),
		Progress:     func(p session.Progress) { steps = append(steps, p) },
	}
	s, err := l.Launch(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Destroy(context.Background())) })

	marker := func(name string) int {
		sb, err := s.Sandbox(name)
		require.NoError(t, err)
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "test -e provisioned"})
		require.NoError(t, err)
		return res.ExitCode
	}
	assert.Equal(t, 0, marker("fresh"), "the entry without using_cached is provisioned")
	assert.Equal(t, 1, marker("cached"), "using_cached skips provisioning")

	for _, name := range []string{"fresh", "cached"} {
		sb, err := s.Sandbox(name)
		require.NoError(t, err)
		assert.Contains(t, probed, sb.ID(), "%s: readiness runs either way", name)
	}
	assert.True(t, slices.ContainsFunc(steps, func(p session.Progress) bool {
		return p.Sandbox == "cached" && p.Step == session.StepProvisioning && p.Detail == "skipped: using_cached (the image is already provisioned)"
	}), "progress says the provisioning was skipped: %+v", steps)

	// Standalone (sbx serve, pools) skips it the same way.
	_, provision, err := l.Standalone("cached")
	require.NoError(t, err)
	sb, err := s.Sandbox("cached")
	require.NoError(t, err)
	require.NoError(t, provision(ctx, sb))
	assert.Equal(t, 1, marker("cached"), "Standalone's provisioning skips using_cached entries too")
	_, provision, err = l.Standalone("fresh")
	require.NoError(t, err)
	require.NoError(t, provision(ctx, sb))
	assert.Equal(t, 0, marker("cached"), "the same provisioning runs for an entry without using_cached")
}
