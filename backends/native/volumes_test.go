package native_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// createVolume makes a volume labelled for the leak check and removes it
// when t ends (after the sandboxes registered later are destroyed).
func createVolume(t *testing.T, b *native.Backend, vs backend.VolumeSpec) string {
	t.Helper()
	if vs.Labels == nil {
		vs.Labels = map[string]string{}
	}
	vs.Labels[labelTestRun] = testRun
	name, err := b.CreateVolume(t.Context(), vs)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, b.RemoveVolume(context.Background(), name))
	})
	return name
}

func execOut(t *testing.T, sb backend.Sandbox, shell string) (string, int) {
	t.Helper()
	res, err := sb.Exec(t.Context(), backend.ExecRequest{Shell: shell})
	require.NoError(t, err)
	return string(res.Stdout) + string(res.Stderr), res.ExitCode
}

// A volume filled from a host folder is shared by the sandboxes that mount
// it: each sees the others' writes, and a read-only mount stays read-only.
func TestSharedVolume(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"seed.txt": "seeded\n", "dir/deep/file.txt": "deep\n"})
	require.NoError(t, os.Chmod(filepath.Join(src, "seed.txt"), 0o600))
	require.NoError(t, os.Symlink("dir/deep/file.txt", filepath.Join(src, "link")))
	session := "vol-" + testRun
	name := createVolume(t, b, backend.VolumeSpec{Session: session, FromPath: src, TTL: time.Hour})
	assert.True(t, strings.HasPrefix(name, "sbx-"+session+"-vol-"), name)

	mount := func(entry string, ro bool) backend.Sandbox {
		s := spec(entry, dockertest.BusyboxImage)
		s.Session = session
		s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: name, Target: "/shared", ReadOnly: ro}}
		return create(t, b, s)
	}
	a, c, ro := mount("a", false), mount("c", false), mount("ro", true)

	out, code := execOut(t, a, "cat /shared/seed.txt /shared/dir/deep/file.txt /shared/link; stat -c %a /shared/seed.txt")
	assert.Equal(t, 0, code, out)
	assert.Equal(t, "seeded\ndeep\ndeep\n600\n", out)

	_, code = execOut(t, a, "echo from-a > /shared/a.txt")
	require.Equal(t, 0, code)
	out, _ = execOut(t, c, "cat /shared/a.txt && echo from-c > /shared/c.txt")
	assert.Equal(t, "from-a\n", out)
	out, _ = execOut(t, a, "cat /shared/c.txt")
	assert.Equal(t, "from-c\n", out)
	out, _ = execOut(t, ro, "cat /shared/c.txt")
	assert.Equal(t, "from-c\n", out)
	out, code = execOut(t, ro, "echo no > /shared/ro.txt")
	assert.NotEqual(t, 0, code)
	assert.Contains(t, out, "Read-only file system")

	// Listed by session, with its labels and expiry.
	vols, err := b.ListVolumes(ctx, backend.Filter{Session: session})
	require.NoError(t, err)
	require.Len(t, vols, 1)
	assert.Equal(t, name, vols[0].Name)
	assert.Equal(t, session, vols[0].Session)
	assert.Equal(t, testRun, vols[0].Labels[labelTestRun])
	assert.WithinDuration(t, time.Now().Add(time.Hour), vols[0].ExpiresAt, 5*time.Minute)
	assert.False(t, vols[0].CreatedAt.IsZero())

	// In use: not removed.
	err = b.RemoveVolume(ctx, name)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "in use")
}

// A .tar.gz fills a volume too; bad sources and name clashes are refused
// without leaving a volume.
func TestVolumeFromTarGz(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	archive := filepath.Join(t.TempDir(), "seed.tar.gz")
	f, err := os.Create(archive)
	require.NoError(t, err)
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, body := range map[string]string{"data/a.txt": "from the archive\n", "top.txt": "top\n"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o640, Size: int64(len(body)), ModTime: time.Now()}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())

	name := createVolume(t, b, backend.VolumeSpec{Name: "sbx-test-tgz-" + testRun, FromPath: archive})
	assert.Equal(t, "sbx-test-tgz-"+testRun, name)
	s := spec("tgz", dockertest.BusyboxImage)
	s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: name, Target: "/data-in"}}
	sb := create(t, b, s)
	out, code := execOut(t, sb, "cat /data-in/data/a.txt /data-in/top.txt; stat -c %a /data-in/top.txt")
	assert.Equal(t, 0, code, out)
	assert.Equal(t, "from the archive\ntop\n640\n", out)

	_, err = b.CreateVolume(ctx, backend.VolumeSpec{Name: name, Labels: map[string]string{labelTestRun: testRun}})
	assert.ErrorIs(t, err, backend.ErrAlreadyExists)

	for _, from := range []string{filepath.Join(t.TempDir(), "missing"), writeTemp(t, "notes.txt", "not an archive")} {
		_, err = b.CreateVolume(ctx, backend.VolumeSpec{Session: "bad-" + testRun, FromPath: from, Labels: map[string]string{labelTestRun: testRun}})
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, from)
		assert.Contains(t, err.Error(), from)
	}
	// A corrupt archive fails while filling; the volume is removed again.
	_, err = b.CreateVolume(ctx, backend.VolumeSpec{Session: "bad-" + testRun, FromPath: writeTemp(t, "broken.tar.gz", "\x1f\x8bnot gzip"),
		Labels: map[string]string{labelTestRun: testRun}})
	assert.Error(t, err)
	vols, err := b.ListVolumes(ctx, backend.Filter{Session: "bad-" + testRun})
	require.NoError(t, err)
	assert.Empty(t, vols)

	// Removing twice is fine; a volume sandboxkit did not make is refused.
	cli := dockertest.Client(t)
	foreign, err := cli.VolumeCreate(ctx, volume.CreateOptions{Name: "foreign-" + testRun, Labels: map[string]string{labelTestRun: testRun}})
	require.NoError(t, err)
	t.Cleanup(func() { cli.VolumeRemove(context.Background(), foreign.Name, true) })
	err = b.RemoveVolume(ctx, foreign.Name)
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.NoError(t, b.RemoveVolume(ctx, "sbx-no-such-volume-"+testRun))
}

func writeTemp(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}
