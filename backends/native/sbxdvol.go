package native

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/embedbin"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// sbxd reaches sandboxes through one engine volume per sbxd build,
// sandboxkit-sbxd-<hash>, mounted read-only at /.sbx in every sandbox:
// copying the binary into each container before its start costs the
// engine a mount of the container's root file system (~90 ms here), a
// volume mount costs next to nothing, and read-only it cannot be changed
// from inside one sandbox to reach the others. The volume is a cache like
// an image: it carries sandboxkit.backend and labelSbxd, not a sandbox's
// labels, and outlives the sandboxes (remove it with docker volume rm when
// no container uses it). When it cannot be made, Create copies sbxd into
// the container instead.
const labelSbxd = "sandboxkit.native.sbxd"

var errSbxdCopyForced = errors.New("copying sbxd was asked for")

var sbxdLockPath = filepath.Join(os.TempDir(), "sandboxkit-native-sbxd.lock")

// sbxdVolume returns the name of the volume holding bin as "sbxd", making
// and filling it on first use. image is any image present on the engine
// (the sandbox's), used for a container that is created, never started,
// to reach the volume through the archive API.
func (b *Backend) sbxdVolume(ctx context.Context, bin embedbin.Binary, image string) (string, error) {
	hash := sbxdHash(bin)
	name := "sandboxkit-sbxd-" + hash
	if _, ok := b.sbxdVols.Load(name); ok {
		return name, nil
	}
	// A volume filled before, by this process or another, has its mark:
	// one listing instead of a helper container's create and removal
	// (~200 ms on a remote engine), paid by each process's first Create.
	if b.sbxdFilled(ctx, hash, name) {
		b.sbxdVols.Store(name, true)
		return name, nil
	}
	b.sbxdMu.Lock()
	defer b.sbxdMu.Unlock()
	if _, ok := b.sbxdVols.Load(name); ok {
		return name, nil
	}
	// Other processes on this host fill it at the same time otherwise.
	if unlock, err := lockFile(sbxdLockPath); err == nil {
		defer unlock()
	}
	labels := map[string]string{backend.LabelBackend: Name, labelSbxd: hash}
	if _, err := b.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: labels}); err != nil {
		return "", fmt.Errorf("creating volume %s: %w", name, b.translate(err))
	}
	helper, err := b.helperContainer(ctx, image, name, sbxdDir, map[string]string{labelSbxd: hash})
	if err != nil {
		return "", fmt.Errorf("creating a container to fill volume %s: %w", name, err)
	}
	defer b.removeHelper(ctx, helper)
	if st, err := b.cli.ContainerStatPath(ctx, helper, sbxdPath); err != nil || st.Size != bin.Size {
		tr, err := sbxdTar(bin, "")
		if err != nil {
			return "", err
		}
		if err := b.cli.CopyToContainer(ctx, helper, sbxdDir, tr, container.CopyToContainerOptions{}); err != nil {
			return "", fmt.Errorf("filling volume %s: %w", name, b.translate(err))
		}
	}
	// The mark: an empty volume made once the fill is whole.
	if _, err := b.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name + sbxdFilledSuffix, Labels: labels}); err != nil {
		b.log.Debug("marking the sbxd volume filled", "volume", name, "err", err)
	}
	b.sbxdVols.Store(name, true)
	return name, nil
}

// sbxdFilledSuffix names the volume that marks an sbxd volume filled
// (sandboxkit-sbxd-<hash>-filled). It carries the same labels, so
// PruneCaches removes it with the volume of its build.
const sbxdFilledSuffix = "-filled"

// sbxdFilled reports whether the engine has both the sbxd volume name of
// build hash and its mark.
func (b *Backend) sbxdFilled(ctx context.Context, hash, name string) bool {
	args := filters.NewArgs(filters.Arg("label", labelSbxd+"="+hash))
	vols, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return false
	}
	var vol, mark bool
	for _, v := range vols.Volumes {
		vol = vol || v.Name == name
		mark = mark || v.Name == name+sbxdFilledSuffix
	}
	return vol && mark
}

// sbxdHash names a build of sbxd in the names of the volume and image
// that hold it.
func sbxdHash(bin embedbin.Binary) string { return bin.Sum[:12] }

// sbxdTar is a tar stream holding prefix+"sbxd" (and the directory prefix
// names, if any).
func sbxdTar(id embedbin.Binary, prefix string) (io.Reader, error) {
	bin, err := id.Bytes()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if prefix != "" {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: prefix, Mode: 0o755, ModTime: time.Unix(0, 0)})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: prefix + "sbxd", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Unix(0, 0)})
	tw.Write(bin)
	tw.Close()
	return &buf, nil
}

var _ backend.CachePruner = (*Backend)(nil)

// PruneCaches removes the sbxd volumes of other builds of the agent that no
// container uses (each build of sbx makes its own; see sbxdVolume), the
// claim records of pool members that are gone (see claim.go), the making
// tags left on snapshots that have their reference (see snapshot.go), and
// the images of forks that are gone. The sbxd
// volume of this program's build stays: removing it would only make the
// next Create fill it again.
func (b *Backend) PruneCaches(ctx context.Context, dryRun bool) ([]string, error) {
	b.settle(ctx)
	pruned, err := b.pruneClaimRecords(ctx, dryRun)
	if err != nil {
		return pruned, b.opErr("prune caches", "", err)
	}
	vols, err := b.pruneSbxdVolumes(ctx, dryRun)
	pruned = append(pruned, vols...)
	if err != nil {
		return pruned, err
	}
	enforcers, err := b.pruneEnforcers(ctx, dryRun)
	pruned = append(pruned, enforcers...)
	if err != nil {
		return pruned, b.opErr("prune caches", "", err)
	}
	tags, err := b.pruneMakingTags(ctx, dryRun)
	pruned = append(pruned, tags...)
	if err != nil {
		return pruned, b.opErr("prune caches", "", err)
	}
	imgs, err := b.pruneForkImages(ctx, dryRun)
	if err != nil {
		err = b.opErr("prune caches", "", err)
	}
	return append(pruned, imgs...), err
}

// pruneSbxdVolumes removes the sbxd volumes of other builds no container
// uses.
func (b *Backend) pruneSbxdVolumes(ctx context.Context, dryRun bool) ([]string, error) {
	keep := ""
	if facts, err := b.facts(ctx); err == nil {
		if bin, err := sbxdbin.Lookup(b.cfg.SbxdPath, facts.arch); err == nil {
			keep = sbxdHash(bin)
		}
	}
	args := filters.NewArgs(filters.Arg("label", backend.LabelBackend+"="+Name), filters.Arg("label", labelSbxd))
	vols, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return nil, b.opErr("prune caches", "", b.translate(err))
	}
	var pruned []string
	for _, v := range vols.Volumes {
		// Podman ORs the label filters: without this check every unused
		// volume of this backend (shared volumes, claim records) would go.
		if !matchLabels(v.Labels, args) || v.Labels[labelSbxd] == keep {
			continue
		}
		users, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("volume", v.Name))})
		if err != nil {
			return pruned, b.opErr("prune caches", "", b.translate(err))
		}
		if len(users) > 0 {
			continue
		}
		if !dryRun {
			// A container made since the listing makes the engine refuse:
			// the volume is in use, so it stays.
			if err := b.cli.VolumeRemove(ctx, v.Name, false); err != nil {
				if cerrdefs.IsConflict(err) {
					continue
				}
				return pruned, b.opErr("prune caches", "", b.translate(err))
			}
		}
		pruned = append(pruned, v.Name)
	}
	return pruned, nil
}
