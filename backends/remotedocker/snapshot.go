package remotedocker

import (
	"context"
	"io"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Snapshots and forks are native's, on the remote engine: a snapshot is
// an image committed there, and forks are containers started there from
// one commit. The remote engine keeps them; PruneCaches removes the fork
// images no container uses any more.

var (
	_ backend.Snapshotter     = (*Sandbox)(nil)
	_ backend.Forker          = (*Sandbox)(nil)
	_ backend.SnapshotManager = (*Backend)(nil)
)

// Snapshot commits the container to an image on the remote engine; see
// native.Sandbox.Snapshot.
func (s *Sandbox) Snapshot(ctx context.Context, req backend.SnapshotRequest) (backend.Snapshot, error) {
	var sn backend.Snapshot
	err := s.call(ctx, "snapshot", func() error {
		sr, err := capability[backend.Snapshotter](s, "snapshot")
		if err != nil {
			return err
		}
		sn, err = sr.Snapshot(ctx, req)
		return err
	})
	return sn, err
}

// Fork starts req.N containers on the remote engine from one commit of
// this one; see native.Sandbox.Fork. The forks are remotedocker's
// sandboxes, with its endpoints and errors.
func (s *Sandbox) Fork(ctx context.Context, req backend.ForkRequest) ([]backend.Sandbox, error) {
	var forks []backend.Sandbox
	err := s.call(ctx, "fork", func() error {
		f, err := capability[backend.Forker](s, "fork")
		if err != nil {
			return err
		}
		forks, err = f.Fork(ctx, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, f := range forks {
		forks[i] = s.b.wrap(f)
	}
	return forks, nil
}

// ListSnapshots lists the snapshot images on the remote engine.
func (b *Backend) ListSnapshots(ctx context.Context, filter backend.Filter) ([]backend.Snapshot, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("list snapshots", "", err)
	}
	sns, err := b.nat.ListSnapshots(ctx, filter)
	if err != nil {
		return nil, b.opErr("list snapshots", "", err)
	}
	return sns, nil
}

// RemoveSnapshot removes a snapshot image from the remote engine.
func (b *Backend) RemoveSnapshot(ctx context.Context, ref string) error {
	if err := b.ready(ctx); err != nil {
		return b.opErr("remove snapshot", "", err)
	}
	return b.opErr("remove snapshot", "", b.nat.RemoveSnapshot(ctx, ref))
}

var _ backend.ImageArchiver = (*Backend)(nil)

// SaveImages streams the remote engine's image save of refs to w, through
// the SSH connection; see native.Backend.SaveImages.
func (b *Backend) SaveImages(ctx context.Context, w io.Writer, refs []string) error {
	if err := b.ready(ctx); err != nil {
		return b.opErr("save images", "", err)
	}
	return b.opErr("save images", "", b.nat.SaveImages(ctx, w, refs))
}

// LoadImages streams an image archive to the remote engine's image load
// through the SSH connection (no registry, no copy on the remote host's
// disk but the engine's own); see native.Backend.LoadImages.
func (b *Backend) LoadImages(ctx context.Context, r io.Reader) (map[string]string, error) {
	if err := b.ready(ctx); err != nil {
		return nil, b.opErr("load images", "", err)
	}
	loaded, err := b.nat.LoadImages(ctx, r)
	if err != nil {
		return nil, b.opErr("load images", "", err)
	}
	return loaded, nil
}
