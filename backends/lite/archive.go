package lite

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/ctxio"
	"github.com/sandboxkit/sandboxkit/internal/imagearchive"
)

// Image archives (backend.ImageArchiver).
//
// SaveImages writes each image as one layer: its unpacked root file system
// (a snapshot's, with its layer applied) as writeLayer writes a folder, with
// owners, modes, symlinks, hard links and extended attributes. LoadImages
// unpacks each image of an archive into a snapshot folder, as a snapshot's
// rootfs, and names it with a snapshot record:
//
//	<images>/snapshot-<config hex>/rootfs/, config.json   the loaded image
//	<images>/snapshots/<hash of name>.json                its name's record
//
// so that "snapshot:NAME" starts sandboxes from it, ListSnapshots lists it
// and RemoveSnapshot and PruneCaches remove it as they remove snapshots.
// The folder is named by the image's config digest, so loading an image
// twice, under any names, unpacks it once.

var _ backend.ImageArchiver = (*Backend)(nil)

// SaveImages writes the images refs name (as Spec.Image does) to w as one
// image archive, each named by its ref less "snapshot:", which must be a
// NAME:TAG reference. A snapshot's labels are its image's config labels.
func (b *Backend) SaveImages(ctx context.Context, w io.Writer, refs []string) error {
	if err := b.saveImages(ctx, w, refs); err != nil {
		return &backend.OpError{Op: "save images", Backend: Name, Err: err}
	}
	return nil
}

func (b *Backend) saveImages(ctx context.Context, w io.Writer, refs []string) error {
	tmp, err := os.MkdirTemp(b.images.dir, ".save-")
	if err != nil {
		return err
	}
	defer removeTree(tmp)
	var imgs []imagearchive.Image
	seen := map[string]bool{}
	for _, ref := range refs {
		if seen[ref] {
			continue
		}
		seen[ref] = true
		img, err := b.archiveImage(ctx, ref, filepath.Join(tmp, strconv.Itoa(len(imgs))+".tar"))
		if err != nil {
			return err
		}
		imgs = append(imgs, img)
	}
	tw := tar.NewWriter(w)
	if err := imagearchive.Write(tw, "", imgs); err != nil {
		return err
	}
	return tw.Close()
}

// archiveImage writes image ref's root file system to file as one layer
// and returns the image for the archive.
func (b *Backend) archiveImage(ctx context.Context, ref, file string) (imagearchive.Image, error) {
	out := imagearchive.Image{Name: backendkit.SnapshotName(ref)}
	if tag, err := name.NewTag(out.Name, name.WithDefaultTag("")); err != nil || tag.TagStr() == "" {
		return out, fmt.Errorf("%w: image %q: an image archive names images by reference, NAME:TAG (e.g. snapshot:work/task-1:v1 or busybox:1.36), and %q is not one", backend.ErrInvalidConfig, ref, out.Name)
	}
	img, err := b.images.resolve(ctx, ref, "")
	if err != nil {
		return out, err
	}
	created := time.Now().UTC()
	var labels map[string]string
	if strings.HasPrefix(ref, srcSnapshot) {
		rec, err := b.images.names().Read(out.Name)
		if err != nil {
			return out, err
		}
		created, labels = rec.CreatedAt, maps.Clone(rec.Labels)
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	f, err := os.Create(file)
	if err != nil {
		return out, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	// Rootless, the files belong to this user on the host and to root in
	// the sandbox, and so in the layer.
	err = writeLayer(cw, img.rootfs, b.userns != nil)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return out, fmt.Errorf("image %q: writing its files: %w", ref, err)
	}
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	c := img.config
	cf := v1.ConfigFile{
		Created: v1.Time{Time: created}, OS: "linux", Architecture: runtime.GOARCH,
		Config:  v1.Config{Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir, User: c.User, Labels: labels},
		RootFS:  v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{diffID}},
		History: []v1.History{{Created: v1.Time{Time: created}, CreatedBy: "sandboxkit lite: the files of " + ref}},
	}
	out.Config, _ = json.Marshal(cf)
	out.Layers = []imagearchive.Layer{{Digest: diffID.String(), Size: cw.n, Open: func() (io.ReadCloser, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		return readCloser{ctxio.Reader(ctx, f), f}, nil
	}}}
	return out, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// LoadImages loads the images of an image archive (what SaveImages or
// any Docker engine's image save writes, or an OCI layout) as snapshots
// named by their names in it, and returns name -> "snapshot:"+name. A
// snapshot of the same name is replaced. The snapshots' labels are the
// images' config labels; one labelled backend.LabelTransient goes when no
// sandbox uses it (PruneCaches). Nothing of a bad archive is kept.
func (b *Backend) LoadImages(ctx context.Context, r io.Reader) (map[string]string, error) {
	refs, err := b.loadImages(ctx, r)
	if err != nil {
		return nil, &backend.OpError{Op: "load images", Backend: Name, Err: err}
	}
	return refs, nil
}

func (b *Backend) loadImages(ctx context.Context, r io.Reader) (map[string]string, error) {
	store := b.images
	tmp, err := os.MkdirTemp(store.dir, ".load-")
	if err != nil {
		return nil, err
	}
	defer removeTree(tmp)
	imgs, err := imagearchive.Spool(ctxio.Reader(ctx, r), tmp)
	if err != nil {
		return nil, err
	}
	// Every image is unpacked before any name changes: a bad layer
	// fails the load with no record written.
	var made []string // folders this load made
	done := false
	defer func() {
		if !done {
			for _, key := range made {
				b.dropSnapshotDir(key) // unless a name (another load's) uses it now
			}
		}
	}()
	now := time.Now().UTC().Truncate(time.Millisecond)
	recs := make([]*backendkit.SnapshotRecord, len(imgs))
	for i, img := range imgs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var isNew bool
		if recs[i], isNew, err = b.unpackArchiveImage(img, now); err != nil {
			return nil, err
		}
		if isNew {
			made = append(made, recs[i].Key)
		}
	}
	olds := make([]*backendkit.SnapshotRecord, len(recs))
	for i, rec := range recs {
		olds[i], _ = store.names().Read(rec.Name)
		if err := store.names().Write(rec); err != nil {
			// Put back the names this load changed.
			for j := range i {
				if olds[j] != nil {
					store.names().Write(olds[j])
				} else {
					store.names().Remove(recs[j].Name)
				}
			}
			return nil, err
		}
	}
	done = true
	refs := map[string]string{}
	for i, rec := range recs {
		if old := olds[i]; old != nil && old.Key != rec.Key {
			b.dropSnapshotDir(old.Key)
		}
		refs[rec.Name] = srcSnapshot + rec.Name
	}
	b.log.Debug("loaded images", "images", len(refs))
	return refs, nil
}

// unpackArchiveImage unpacks img into its snapshot folder, named by its
// config digest, and returns its record (to write), and whether it made
// the folder.
func (b *Backend) unpackArchiveImage(img imagearchive.Image, now time.Time) (*backendkit.SnapshotRecord, bool, error) {
	cf, err := v1.ParseConfigFile(bytes.NewReader(img.Config))
	if err != nil {
		return nil, false, fmt.Errorf("image %q: config: %w", img.Name, err)
	}
	sum := sha256.Sum256(img.Config)
	rec := &backendkit.SnapshotRecord{Name: img.Name, Key: "snapshot-" + hex.EncodeToString(sum[:]), Labels: cf.Config.Labels, CreatedAt: now}
	for _, l := range img.Layers {
		rec.Size += l.Size
	}
	_, err = b.images.cached(rec.Key)
	had := err == nil
	vimg, _ := partial.UncompressedToImage(archiveImage{img})
	// The image ID "snapshot:<hex>", as a snapshot's, finds the folder
	// (cacheKey) when a sandbox made from it is snapshotted.
	if _, err := b.images.unpackAs(img.Name, vimg, rec.Key, strings.Replace(rec.Key, "-", ":", 1)); err != nil {
		return nil, false, err
	}
	return rec, !had, nil
}

// archiveImage is an image of an archive as a go-containerregistry image,
// for imageStore.unpack.
type archiveImage struct{ img imagearchive.Image }

func (a archiveImage) RawConfigFile() ([]byte, error)      { return a.img.Config, nil }
func (a archiveImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

func (a archiveImage) LayerByDiffID(h v1.Hash) (partial.UncompressedLayer, error) {
	for _, l := range a.img.Layers {
		if l.Digest == h.String() {
			return archiveLayer{l}, nil
		}
	}
	return nil, fmt.Errorf("image %q: no layer %s", a.img.Name, h)
}

type archiveLayer struct{ l imagearchive.Layer }

func (a archiveLayer) DiffID() (v1.Hash, error)             { return v1.NewHash(a.l.Digest) }
func (a archiveLayer) Uncompressed() (io.ReadCloser, error) { return a.l.Open() }
func (a archiveLayer) MediaType() (types.MediaType, error) {
	return types.OCIUncompressedLayer, nil
}
