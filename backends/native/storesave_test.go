package native_test

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/imagearchive"
)

// An image saved from the engine's files (the layers put together from
// each layer's folder and tar-split record) holds the same config and the
// same layers, byte for byte, as the engine's own save, and loads back:
// a snapshot with a new file, a symlink, a hard link, a file deleted
// from the image and a folder replaced (a whiteout and an opaque folder).
func TestSaveFromEngineFiles(t *testing.T) {
	ctx := t.Context()
	if os.Geteuid() != 0 {
		t.Skip("reading the engine's files needs root")
	}
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	if info, err := cli.Info(ctx); err != nil || info.Driver != "overlay2" {
		t.Skipf("the engine's storage driver is not overlay2 (%v): its saves go through the engine", err)
	}
	sb := create(t, b, spec("storesave", dockertest.BusyboxImage))
	const state = `set -e
mkdir -p /root/d && echo one > /root/d/a && printf '\000\001' > /root/bin
ln -s d/a /root/link && ln /root/d/a /root/hard
rm /etc/group
rm -rf /etc/network && mkdir /etc/network && echo new > /etc/network/only
head -c 3000000 /dev/urandom > /root/big`
	const probe = `cat /root/d/a /root/link /root/hard; od -An -tx1 /root/bin; readlink /root/link
ls /etc/group 2>&1 || true; ls /etc/network; md5sum /root/big; stat -c '%h' /root/hard`
	_, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", state}})
	require.NoError(t, err)
	want, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", probe}})
	require.NoError(t, err)
	snap, err := sb.(backend.Snapshotter).Snapshot(ctx, backend.SnapshotRequest{Ref: "sandboxkit-test/storesave:" + sb.ID()})
	require.NoError(t, err)
	t.Cleanup(func() { cli.ImageRemove(context.Background(), snap.Ref, image.RemoveOptions{Force: true}) })
	refs := []string{snap.Ref}

	require.NoError(t, b.StoreSaveError(ctx, refs), "the save would not read the engine's files")
	var files, engine bytes.Buffer
	require.NoError(t, b.SaveImages(ctx, &files, refs))
	b.SetEngineSave(true)
	require.NoError(t, b.SaveImages(ctx, &engine, refs))
	b.SetEngineSave(false)
	fromFiles, err := imagearchive.Spool(bytes.NewReader(files.Bytes()), t.TempDir())
	require.NoError(t, err)
	fromEngine, err := imagearchive.Spool(bytes.NewReader(engine.Bytes()), t.TempDir())
	require.NoError(t, err)
	require.Len(t, fromFiles, 1)
	require.Len(t, fromEngine, 1)
	assert.Equal(t, snap.Ref, fromFiles[0].Name)
	assert.Equal(t, string(fromEngine[0].Config), string(fromFiles[0].Config), "the config")
	digests := func(img imagearchive.Image) (ds []string) {
		for _, l := range img.Layers {
			ds = append(ds, l.Digest)
		}
		return ds
	}
	// Spool checks each layer's bytes against its digest.
	assert.Equal(t, digests(fromEngine[0]), digests(fromFiles[0]), "the layers")
	assert.Len(t, fromFiles[0].Layers, 2)

	// Loaded into the engine after the image is gone, it runs.
	_, err = cli.ImageRemove(ctx, snap.Ref, image.RemoveOptions{Force: true})
	require.NoError(t, err)
	loaded, err := b.LoadImages(ctx, bytes.NewReader(files.Bytes()))
	require.NoError(t, err)
	require.Contains(t, loaded, snap.Ref)
	again := create(t, b, spec("storesave-loaded", snap.Ref))
	got, err := again.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", probe}})
	require.NoError(t, err)
	assert.Equal(t, string(want.Stdout), string(got.Stdout))
	assert.Contains(t, string(got.Stdout), "No such file", "the deleted /etc/group")

	// An image named without a tag is saved by the engine.
	assert.Error(t, b.StoreSaveError(ctx, []string{"sandboxkit-test/storesave"}))
}
