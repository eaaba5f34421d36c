package native_test

import (
	"context"
	"encoding/json"
	"io"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// Pull policies against a real registry on loopback (Debian's
// docker-registry), holding a copy of the busybox test image.
func TestPullPolicy(t *testing.T) {
	ctx := t.Context()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	ref := dockertest.Registry(t) + "/sandboxkit-test/pull:" + testRun
	require.NoError(t, cli.ImageTag(ctx, dockertest.BusyboxImage, ref))
	rc, err := cli.ImagePush(ctx, ref, image.PushOptions{RegistryAuth: "e30="}) // "{}": no credentials
	require.NoError(t, err)
	requireStreamOK(t, rc)
	removeTag := func() {
		_, err := cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true})
		if err != nil {
			t.Logf("removing %s: %v", ref, err)
		}
	}
	removeTag()
	t.Cleanup(removeTag)

	never, err := native.New(native.Config{PullPolicy: native.PullNever})
	require.NoError(t, err)
	defer never.Close()
	_, err = never.Create(ctx, spec("never", ref))
	require.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "pull_policy")

	var events []native.PullEvent
	missing, err := native.New(native.Config{}, native.WithPullProgress(func(e native.PullEvent) { events = append(events, e) }))
	require.NoError(t, err)
	defer missing.Close()
	sb := create(t, missing, spec("missing", ref))
	res, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"echo", "pulled"}})
	require.NoError(t, err)
	assert.Equal(t, "pulled\n", string(res.Stdout))
	require.NotEmpty(t, events, "a pull reports progress")
	assert.Equal(t, ref, events[0].Image)

	// "missing" does not pull an image that is there; "always" does.
	events = nil
	create(t, missing, spec("missing2", ref))
	assert.Empty(t, events)
	var always []native.PullEvent
	ab, err := native.New(native.Config{PullPolicy: native.PullAlways}, native.WithPullProgress(func(e native.PullEvent) { always = append(always, e) }))
	require.NoError(t, err)
	defer ab.Close()
	create(t, ab, spec("always", ref))
	assert.NotEmpty(t, always)

	// An image the registry does not have is ErrNotFound.
	_, err = missing.Create(ctx, spec("absent", ref+"-absent"))
	assert.ErrorIs(t, err, backend.ErrNotFound)
}

// requireStreamOK reads an engine JSON message stream to the end and fails
// on an error message in it.
func requireStreamOK(t *testing.T, rc io.ReadCloser) {
	t.Helper()
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return
		} else {
			require.NoError(t, err)
		}
		require.Empty(t, m.Error)
	}
}
