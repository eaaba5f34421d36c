package k8s_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// CreateVolume with FromPath fills the claim from a host folder or a
// .tar.gz through a filler pod, which is gone afterwards; a sandbox
// mounting the volume sees the files.
func TestVolumeFromPath(t *testing.T) {
	t.Parallel()
	c := k8stest.Get(t)
	ns := c.Namespace(t)
	b, err := k8s.New(k8s.Config{Kubeconfig: c.Kubeconfig, Namespace: ns, ImagePullPolicy: "IfNotPresent",
		HelperImage: k8stest.BusyboxImage})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	ctx := t.Context()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("from the host\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "b.bin"), []byte{0, 1, 2}, 0o600))
	require.NoError(t, os.Symlink("a.txt", filepath.Join(dir, "link")))
	tgz := filepath.Join(t.TempDir(), "data.tar.gz")
	writeTgz(t, tgz, "from-tgz.txt", "packed\n")

	var names []string
	for _, from := range []string{dir, tgz} {
		name, err := b.CreateVolume(ctx, backend.VolumeSpec{Session: "fill-test", FromPath: from})
		require.NoError(t, err, from)
		names = append(names, name)
		t.Cleanup(func() { assert.NoError(t, b.RemoveVolume(context.Background(), name)) })
		fillers, err := b.List(ctx, backend.Filter{Name: "volume-filler"})
		require.NoError(t, err)
		assert.Empty(t, fillers, "the filler pod is still there")
	}

	s := spec("reader", k8stest.BusyboxImage)
	s.Volumes = []backend.Volume{
		{Type: backend.VolumeNamed, Source: names[0], Target: "/shared"},
		{Type: backend.VolumeNamed, Source: names[1], Target: "/packed", ReadOnly: true},
	}
	sb := create(t, b, s)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "cat /shared/a.txt; stat -c '%s %a' /shared/sub/b.bin; readlink /shared/link; cat /packed/from-tgz.txt"})
	require.NoError(t, err)
	assert.Equal(t, "from the host\n3 600\na.txt\npacked\n", string(res.Stdout), string(res.Stderr))

	// A bad path is refused before anything is made.
	_, err = b.CreateVolume(ctx, backend.VolumeSpec{Session: "fill-test", FromPath: filepath.Join(dir, "missing")})
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "missing")
	vols, err := b.ListVolumes(ctx, backend.Filter{Session: "fill-test"})
	require.NoError(t, err)
	assert.Len(t, vols, 2)
}

func writeTgz(t *testing.T, file, name, content string) {
	t.Helper()
	f, err := os.Create(file)
	require.NoError(t, err)
	defer f.Close()
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Now(), Typeflag: tar.TypeReg}))
	_, err = tw.Write([]byte(content))
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
}
