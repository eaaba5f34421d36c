package native_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/imagearchive"
)

// An image loaded for a restore (transient, made long ago) has no
// container until the restore's create makes one: PruneCaches (sbx gc,
// or another program's on a shared engine) right after the load keeps
// it, and a gc told to keep nothing (backend.WithPruneGrace 0, sbx gc
// --grace 0) removes it.
func TestPruneKeepsJustLoadedTransientImage(t *testing.T) {
	ctx := t.Context()
	b := newBackend(t, dockertest.BusyboxImage)
	cli := dockertest.Client(t)
	sb := create(t, b, spec("transient", dockertest.BusyboxImage))
	ref := "sandboxkit-test/transient:" + sb.ID()
	snap, err := sb.(backend.Snapshotter).Snapshot(ctx, backend.SnapshotRequest{Ref: ref, Labels: map[string]string{backend.LabelTransient: "1"}})
	require.NoError(t, err)
	t.Cleanup(func() { cli.ImageRemove(context.Background(), snap.Ref, image.RemoveOptions{Force: true}) })
	var saved bytes.Buffer
	require.NoError(t, b.SaveImages(ctx, &saved, []string{snap.Ref}))
	_, err = cli.ImageRemove(ctx, snap.Ref, image.RemoveOptions{Force: true})
	require.NoError(t, err)

	// The bundle was made a year ago: its image's creation time says so.
	imgs, err := imagearchive.Spool(bytes.NewReader(saved.Bytes()), t.TempDir())
	require.NoError(t, err)
	require.Len(t, imgs, 1)
	var config map[string]any
	require.NoError(t, json.Unmarshal(imgs[0].Config, &config))
	config["created"] = "2025-11-01T00:00:00Z"
	imgs[0].Config, err = json.Marshal(config)
	require.NoError(t, err)
	var old bytes.Buffer
	tw := tar.NewWriter(&old)
	require.NoError(t, imagearchive.Write(tw, "", imgs))
	require.NoError(t, tw.Close())

	loaded, err := b.LoadImages(ctx, &old)
	require.NoError(t, err)
	require.Contains(t, loaded, snap.Ref)
	ins, err := cli.ImageInspect(ctx, snap.Ref)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(ins.Created, "2025-11-01"), "the loaded image's creation time is %s", ins.Created)

	transientPruned := func(names []string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ins.ID) })
	}
	if ins.Metadata.LastTagTime.IsZero() {
		// Podman's compatible API records no tag time: there a loaded
		// image is kept by its creation time alone.
		t.Logf("the engine records no tag time: the grace after a load is not checked")
	} else {
		names, err := b.PruneCaches(ctx, false)
		require.NoError(t, err)
		require.False(t, transientPruned(names), "PruneCaches right after the load removed the image a restore would start from: %v", names)
		_, err = cli.ImageInspect(ctx, snap.Ref)
		require.NoError(t, err, "the loaded image is gone")
	}

	names, err := b.PruneCaches(backend.WithPruneGrace(ctx, 0), true)
	require.NoError(t, err)
	require.True(t, transientPruned(names), "a dry run with no grace would not remove the unused transient image: %v", names)
	names, err = b.PruneCaches(backend.WithPruneGrace(ctx, 0), false)
	require.NoError(t, err)
	require.True(t, transientPruned(names), "PruneCaches with no grace kept the unused transient image: %v", names)
	_, err = cli.ImageInspect(ctx, snap.Ref)
	require.Error(t, err, "the transient image is left")
}
