package sbxd_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// The conformance suite and the fileops table through the sbxd client on
// the local backend; the native ones are in native_test.go.
func TestConformanceLocal(t *testing.T) {
	b := newLocal(t)
	log := noWarnings(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return sbxd.WrapBackend(b, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(log))
	})
}

func TestFileopsLocal(t *testing.T) {
	c, _ := createLocal(t)
	fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return c })
}

// WrapBackend claims exactly the backend-level capabilities of the backend
// it wraps: AsBackend finds local's (none) through it, and finds a wrapped
// backend's VolumeManager and NetworkManager.
func TestWrapBackendCapabilitiesTruthful(t *testing.T) {
	local := newLocal(t)
	w := sbxd.WrapBackend(local)
	_, innerVols := any(local).(backend.VolumeManager)
	_, vols := backend.AsBackend[backend.VolumeManager](w)
	require.Equal(t, innerVols, vols, "volumes through the wrapper")
	_, innerNets := any(local).(backend.NetworkManager)
	_, nets := backend.AsBackend[backend.NetworkManager](w)
	require.Equal(t, innerNets, nets, "networks through the wrapper")

	m := managerBackend{Backend: local}
	w = sbxd.WrapBackend(m)
	vm, ok := backend.AsBackend[backend.VolumeManager](w)
	require.True(t, ok, "a wrapped VolumeManager is found")
	require.Equal(t, backend.VolumeManager(m), vm)
	_, ok = backend.AsBackend[backend.NetworkManager](w)
	require.True(t, ok, "a wrapped NetworkManager is found")
}

// managerBackend adds (inert) volume and network managers to a backend.
type managerBackend struct{ backend.Backend }

func (managerBackend) CreateVolume(context.Context, backend.VolumeSpec) (string, error) {
	return "", nil
}
func (managerBackend) RemoveVolume(context.Context, string) error { return nil }
func (managerBackend) ListVolumes(context.Context, backend.Filter) ([]backend.VolumeInfo, error) {
	return nil, nil
}
func (managerBackend) CreateNetwork(context.Context, backend.NetworkSpec) (string, error) {
	return "", nil
}
func (managerBackend) RemoveNetwork(context.Context, string) error { return nil }
func (managerBackend) ListNetworks(context.Context, backend.Filter) ([]backend.NetworkInfo, error) {
	return nil, nil
}

// Every file whole through the wrapped sandbox's own file access (the bulk
// path), with the agent resolving and moving: the suite's file cases must
// hold there too.
func TestConformanceLocalBulk(t *testing.T) {
	b := newLocal(t)
	log := noWarnings(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		return sbxd.WrapBackend(b, sbxd.WithAgentPath(agentBin), sbxd.WithLogger(log), sbxd.WithBulkThreshold(1))
	}, backendtest.WithoutCapabilityRerun())
}

// Through WrapBackend, the agent runs a command as another user only when
// the wrapped backend's Capabilities offer users: for one that does not,
// the wrapped sandbox's own Exec gets the request (and refuses it here),
// as it would without the agent; a job is refused naming the capability.
func TestWrapBackendHonoursUserCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the agent switches users only as root")
	}
	ctx := t.Context()
	for _, users := range []bool{true, false} {
		w := sbxd.WrapBackend(userCaps{Backend: newLocal(t), users: users}, sbxd.WithAgentPath(agentBin))
		sb, err := w.Create(ctx, backend.Spec{Name: "users", TTL: 30 * time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"id", "-u"}, User: "nobody"})
		if users {
			require.NoError(t, err)
			require.Equal(t, "65534\n", string(res.Stdout), "with users offered, the agent runs the command as nobody")
			continue
		}
		require.ErrorIs(t, err, errRefusedUser, "without users offered, the backend's own Exec decides")
		_, err = sb.(*sbxd.Client).StartJob(ctx, backend.ExecRequest{Cmd: []string{"true"}, User: "nobody"}, 0)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "Capabilities.User")
		// Commands as the sandbox's own user still go through the agent.
		res, err = sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"true"}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode)
	}
}

var errRefusedUser = errors.New("userCaps: another user refused")

// userCaps is a backend whose Capabilities offer users or not, and whose
// sandboxes' own Exec refuses another user (to tell it from the agent's).
type userCaps struct {
	backend.Backend
	users bool
}

func (u userCaps) Capabilities() backend.Capabilities {
	c := u.Backend.Capabilities()
	c.User = u.users
	return c
}

func (u userCaps) Create(ctx context.Context, spec backend.Spec) (backend.Sandbox, error) {
	sb, err := u.Backend.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return refuseUsers{sb}, nil
}

type refuseUsers struct{ backend.Sandbox }

func (r refuseUsers) Unwrap() backend.Sandbox { return r.Sandbox }

func (r refuseUsers) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if req.User != "" {
		return backend.ExecResult{}, errRefusedUser
	}
	return r.Sandbox.Exec(ctx, req)
}
