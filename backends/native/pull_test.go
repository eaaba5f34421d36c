package native_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// Pull policies against a real registry on loopback (Debian's
// docker-registry), holding the busybox test image with a layer of its own.
func TestPullPolicy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	ref := dockertest.PushUnique(t, cli, dockertest.Registry(t), dockertest.BusyboxImage)

	never, err := native.New(native.Config{PullPolicy: native.PullNever})
	require.NoError(t, err)
	defer never.Close()
	_, err = never.Create(ctx, spec("never", ref))
	require.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "pull_policy")

	// Progress is reported through Spec.Progress: layer lines, then one
	// Done report for the pull.
	var events []backend.Progress
	record := func(s backend.Spec, into *[]backend.Progress) backend.Spec {
		s.Progress = func(p backend.Progress) { *into = append(*into, p) }
		return s
	}
	missing, err := native.New(native.Config{})
	require.NoError(t, err)
	defer missing.Close()
	sb := create(t, missing, record(spec("missing", ref), &events))
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "pulled"}})
	require.NoError(t, err)
	assert.Equal(t, "pulled\n", string(res.Stdout))
	require.NotEmpty(t, events, "a pull reports progress")
	var sized, layers int
	for _, e := range events {
		assert.Equal(t, "missing", e.Sandbox)
		assert.Equal(t, "pull", e.Step)
		if e.Total > 0 {
			sized++
		}
		if e.ID != "" {
			layers++
		}
	}
	assert.NotZero(t, layers, "no layer progress in %+v", events)
	assert.NotZero(t, sized, "no byte counts in %+v", events)
	last := events[len(events)-1]
	assert.True(t, last.Done, "last report %+v", last)
	assert.Contains(t, last.Status, ref)

	// "missing" does not pull an image that is there; "always" does (the
	// layers are there: it reports them).
	events = nil
	create(t, missing, record(spec("missing2", ref), &events))
	assert.Empty(t, events)
	var always []backend.Progress
	ab, err := native.New(native.Config{PullPolicy: native.PullAlways})
	require.NoError(t, err)
	defer ab.Close()
	create(t, ab, record(spec("always", ref), &always))
	assert.NotEmpty(t, always)

	// An image the registry does not have is ErrNotFound.
	_, err = missing.Create(ctx, spec("absent", ref+"-absent"))
	assert.ErrorIs(t, err, backend.ErrNotFound)
}
