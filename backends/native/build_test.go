package native_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// writeFiles creates files (relative name -> content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// removeImageAfter removes ref (and the untagged layers under it) when t
// ends.
func removeImageAfter(t *testing.T, cli *client.Client, ref string) {
	t.Cleanup(func() {
		_, err := cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("removing image %s: %v", ref, err)
		}
	})
}

// A Dockerfile FROM a local image, with an ARG, a COPY and a RUN, builds
// without a registry; the sandbox runs the result; progress is reported.
func TestBuild(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"Dockerfile": "FROM " + dockertest.BusyboxImage + "\n" +
			"ARG GREETING=unset\n" +
			"COPY . /ctx/\n" +
			"RUN echo \"built with $GREETING\" > /greeting.txt\n",
		"hello.txt":        "hello from the context\n",
		"sub/nested.txt":   "nested\n",
		"secret.txt":       "must not be sent\n",
		"logs/a.log":       "ignored\n",
		"logs/keep.log":    "re-included\n",
		".dockerignore":    "# comments are fine\nsecret.txt\nlogs\n!logs/keep.log\n",
		"other/Dockerfile": "FROM " + dockertest.BusyboxImage + "\nRUN echo other > /which.txt\n",
	})
	ref := "sandboxkit-test/build:" + testRun
	removeImageAfter(t, cli, ref)

	s := spec("built", ref)
	s.Build = &backend.Build{ContextDir: dir, Args: map[string]string{"GREETING": "an argument"}}
	var events []backend.Progress
	s.Progress = func(p backend.Progress) { events = append(events, p) }
	sb := create(t, b, s)

	run := func(sb backend.Sandbox, shell string) string {
		t.Helper()
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: shell})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "%s: %s", shell, res.Stderr)
		return string(res.Stdout)
	}
	assert.Equal(t, "built with an argument\n", run(sb, "cat /greeting.txt"))
	assert.Equal(t, "hello from the context\n", run(sb, "cat /ctx/hello.txt"))
	assert.Equal(t, "nested\n", run(sb, "cat /ctx/sub/nested.txt"))
	assert.Equal(t, "re-included\n", run(sb, "cat /ctx/logs/keep.log"))
	assert.Equal(t, "absent absent \n", run(sb, "for f in /ctx/secret.txt /ctx/logs/a.log; do test -e $f && printf 'present ' || printf 'absent '; done; echo"))

	// The image is labelled.
	img, err := cli.ImageInspect(ctx, ref)
	require.NoError(t, err)
	assert.Equal(t, native.Name, img.Config.Labels[backend.LabelBackend])
	assert.Equal(t, filepath.Join(dir, "Dockerfile"), img.Config.Labels["sandboxkit.native.dockerfile"])
	assert.Equal(t, testRun, img.Config.Labels[labelTestRun])
	// ... but the sandbox does not take the image's Dockerfile label as its
	// own.
	info, err := sb.Info(ctx)
	require.NoError(t, err)
	assert.NotContains(t, info.Labels, "sandboxkit.native.dockerfile")

	// Progress: every step, numbered, then one Done report.
	var steps []string
	for _, e := range events {
		assert.Equal(t, "built", e.Sandbox)
		if e.Step == "build" && !e.Done {
			steps = append(steps, e.Status)
			assert.Equal(t, int64(4), e.Total, e.Status)
		}
	}
	require.Len(t, steps, 4, "%+v", events)
	assert.True(t, strings.HasPrefix(steps[0], "Step 1/4 : FROM "), steps[0])
	assert.True(t, strings.HasPrefix(steps[3], "Step 4/4 : RUN "), steps[3])
	last := events[len(events)-1]
	assert.True(t, last.Done && last.Step == "build" && last.Current == 4, "%+v", last)

	// A Dockerfile elsewhere than in the context.
	ref2 := "sandboxkit-test/build-other:" + testRun
	removeImageAfter(t, cli, ref2)
	s2 := spec("other", ref2)
	s2.Build = &backend.Build{ContextDir: filepath.Join(dir, "sub"), Dockerfile: filepath.Join(dir, "other", "Dockerfile")}
	sb2 := create(t, b, s2)
	assert.Equal(t, "other\n", run(sb2, "cat /which.txt"))

	// The tag is the caller's to choose.
	s3 := spec("untagged", "")
	s3.Build = &backend.Build{ContextDir: dir}
	_, err = b.Create(ctx, s3)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
}

// A failing step's error names the Dockerfile, the step and the end of
// what it printed; nothing is left behind.
func TestBuildFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"Dockerfile": "FROM " + dockertest.BusyboxImage + "\n" +
			"RUN echo first line of output; echo the reason it fails >&2; exit 3\n",
	})
	ref := "sandboxkit-test/build-fail:" + testRun
	removeImageAfter(t, cli, ref)
	s := spec("fails", ref)
	s.Build = &backend.Build{ContextDir: dir}
	_, err := b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	msg := err.Error()
	for _, want := range []string{
		filepath.Join(dir, "Dockerfile"),
		"step 2/2 (RUN echo first line",
		"\noutput of the step (last lines):\n",
	} {
		assert.Contains(t, msg, want)
	}
	// The builder's own words: Docker's, or Podman's (buildah).
	assert.True(t, strings.Contains(msg, "returned a non-zero code: 3") || strings.Contains(msg, "exit status 3"), msg)
	// The step's stdout and stderr, in either order, without the builder's
	// colours.
	lines := strings.Split(msg, "\n")
	assert.Contains(t, lines, "  first line of output")
	assert.Contains(t, lines, "  the reason it fails")
	_, err = cli.ImageInspect(ctx, ref)
	assert.Error(t, err, "a failed build left its tag")

	// A syntax error.
	writeFiles(t, dir, map[string]string{"Dockerfile.bad": "FROM " + dockertest.BusyboxImage + "\nNOTANINSTRUCTION x\n"})
	s.Build.Dockerfile = "Dockerfile.bad"
	_, err = b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), filepath.Join(dir, "Dockerfile.bad"))
	assert.Contains(t, strings.ToLower(err.Error()), "unknown instruction")

	// No Dockerfile at all.
	s.Build.Dockerfile = "nope/Dockerfile"
	_, err = b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), filepath.Join(dir, "nope/Dockerfile"))

	// pull_policy "never" refuses a build whose base image is missing,
	// before sending anything.
	writeFiles(t, dir, map[string]string{"Dockerfile.missing": "FROM sandboxkit-test/no-such-base:1 AS base\nFROM base\n"})
	s.Build.Dockerfile = "Dockerfile.missing"
	_, err = b.Create(ctx, s)
	require.ErrorIs(t, err, backend.ErrNotFound)
	assert.Contains(t, err.Error(), "sandboxkit-test/no-such-base:1")
	assert.Contains(t, err.Error(), "pull_policy")
}
