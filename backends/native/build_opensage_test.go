package native_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// progressStatuses collects a Create's progress statuses.
type progressStatuses struct {
	mu   sync.Mutex
	list []string
}

func (p *progressStatuses) add(e backend.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, e.Step+": "+e.Status)
}

func (p *progressStatuses) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.list, "\n")
}

// An entry with a Dockerfile takes its image as OpenSage does: an image of
// that name on the engine that this backend did not build (OpenSage's, or
// made by hand) is used as it is, without building (the Dockerfile here
// would fail); a missing one is pulled, and when the pull fails (no
// registry here) the Dockerfile builds it.
func TestBuildTakesImagesAsOpenSage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"Dockerfile":       "FROM " + dockertest.BusyboxImage + "\nRUN echo built > /built.txt\n",
		"Dockerfile.fails": "FROM " + dockertest.BusyboxImage + "\nRUN exit 9\n",
	})
	for _, policy := range []string{native.PullMissing, native.PullNever} {
		t.Run("an image on the engine, pull_policy "+policy, func(t *testing.T) {
			b, err := native.New(native.Config{PullPolicy: policy})
			require.NoError(t, err)
			t.Cleanup(func() { b.Close() })
			ref := "sandboxkit-test/opensage-main-" + policy + ":" + testRun
			require.NoError(t, cli.ImageTag(ctx, dockertest.BusyboxImage, ref))
			removeImageAfter(t, cli, ref)
			var progress progressStatuses
			s := spec("existing", ref)
			s.Build = &backend.Build{ContextDir: dir, Dockerfile: "Dockerfile.fails"}
			s.Progress = progress.add
			sb := create(t, b, s)
			res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "test -e /built.txt && echo built || echo as-it-was"})
			require.NoError(t, err)
			assert.Equal(t, "as-it-was\n", string(res.Stdout))
			assert.Contains(t, progress.String(), "build: using "+ref+" from the engine (not built: it exists, as OpenSage uses it)")
		})
	}
	t.Run("missing, the pull fails: built", func(t *testing.T) {
		b, err := native.New(native.Config{PullPolicy: native.PullMissing})
		require.NoError(t, err)
		t.Cleanup(func() { b.Close() })
		ref := "sandboxkit-test/opensage-missing:" + testRun
		removeImageAfter(t, cli, ref)
		var progress progressStatuses
		s := spec("fallback", ref)
		s.Build = &backend.Build{ContextDir: dir}
		s.Progress = progress.add
		sb := create(t, b, s)
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "cat /built.txt"})
		require.NoError(t, err)
		assert.Equal(t, "built\n", string(res.Stdout))
		assert.Contains(t, progress.String(), "build: pulling "+ref+" failed (")
		assert.Contains(t, progress.String(), "building it from the Dockerfile")

		// Built by this backend: the next Create builds again (cache
		// hits), so a changed Dockerfile takes effect.
		first, err := cli.ImageInspect(ctx, ref)
		require.NoError(t, err)
		require.NoError(t, sb.Destroy(ctx))
		removeImageAfter(t, cli, first.ID) // untagged by the rebuild
		writeFiles(t, dir, map[string]string{"Dockerfile": "FROM " + dockertest.BusyboxImage + "\nRUN echo rebuilt > /built.txt\n"})
		s.Name = "rebuilt"
		sb = create(t, b, s)
		res, err = sb.Exec(ctx, backend.ExecRequest{Shell: "cat /built.txt"})
		require.NoError(t, err)
		assert.Equal(t, "rebuilt\n", string(res.Stdout))
	})
}

// A build that fails after some steps leaves none of their images: the
// classic builder would keep them untagged and unlabelled, out of sbx gc's
// sight.
func TestBuildFailureLeavesNoStepImages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	marker := "sbx-step-" + testRun
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"Dockerfile": "FROM " + dockertest.BusyboxImage + "\n" +
			"RUN echo " + marker + " > /one\n" +
			"RUN echo " + marker + " > /two\n" +
			"RUN exit 3\n",
	})
	s := spec("fails-late", "sandboxkit-test/build-steps:"+testRun)
	s.Build = &backend.Build{ContextDir: dir}
	_, err := b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "step 4/4 (RUN exit 3)")

	dangling, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("dangling", "true"))})
	require.NoError(t, err)
	for _, img := range dangling {
		hist, err := cli.ImageHistory(ctx, img.ID)
		if err != nil {
			continue // removed meanwhile
		}
		for _, h := range hist {
			if strings.Contains(h.CreatedBy, marker) {
				t.Errorf("image %s of a failed build's step (%s) is left", img.ID, h.CreatedBy)
				cli.ImageRemove(context.Background(), img.ID, image.RemoveOptions{Force: true})
				break
			}
		}
	}
}
