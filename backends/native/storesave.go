package native

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxkit/sandboxkit/internal/imagearchive"
)

// Image saves from the engine's own files. Docker 20.10's image save
// writes each layer into a folder of its own before it sends a byte (about
// a second per 100 MiB here). On overlay2 the engine keeps a layer as the
// folder of its files (<root>/overlay2/<cache-id>/diff) and the rest of its
// tar, the headers and padding (tar-split.json.gz in
// <root>/image/overlay2/layerdb/sha256/<chain-id>/): the two together give
// the layer's tar byte for byte, which is how the engine's save makes it.
// When this process reaches the engine through a local socket and can read
// those files, SaveImages writes the archive from them at once
// (imagearchive.Write, which checks each layer's digest as it writes it).
// Anything that does not match what the engine says of the image (a
// config whose digest is not the image's ID, a layer record that names
// another diff, a file of another size) leaves the save to the engine.

// storeImages returns refs as images read from the engine's files, or an
// error saying why they cannot be.
func (b *Backend) storeImages(ctx context.Context, refs []string) ([]imagearchive.Image, error) {
	if b.dial != nil || b.tlsFiles != nil {
		return nil, errors.New("the engine is reached through a tunnel or TLS")
	}
	if u, err := url.Parse(b.cli.DaemonHost()); err != nil || u.Scheme != "unix" {
		return nil, fmt.Errorf("the engine at %s is not on a local socket", b.cli.DaemonHost())
	}
	facts, err := b.facts(ctx)
	if err != nil {
		return nil, err
	}
	if facts.driver != "overlay2" || facts.root == "" {
		return nil, fmt.Errorf("the engine's storage driver is %q, not overlay2", facts.driver)
	}
	root := facts.root
	var imgs []imagearchive.Image
	for _, ref := range refs {
		if strings.Contains(ref, "@") || !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
			return nil, fmt.Errorf("image %q: not NAME:TAG", ref)
		}
		img, err := b.cli.ImageInspect(ctx, ref)
		if err != nil {
			return nil, b.translate(err)
		}
		config, err := readDigested(filepath.Join(root, "image", "overlay2", "imagedb", "content", "sha256"), img.ID)
		if err != nil {
			return nil, fmt.Errorf("image %q: %w", ref, err)
		}
		out := imagearchive.Image{Name: ref, Config: config}
		chain := ""
		for _, diff := range img.RootFS.Layers {
			if chain == "" {
				chain = diff
			} else {
				sum := sha256.Sum256([]byte(chain + " " + diff))
				chain = "sha256:" + hex.EncodeToString(sum[:])
			}
			l, err := storeLayer(root, chain, diff)
			if err != nil {
				return nil, fmt.Errorf("image %q: layer %s: %w", ref, diff, err)
			}
			out.Layers = append(out.Layers, l)
		}
		imgs = append(imgs, out)
	}
	return imgs, nil
}

// readDigested reads the file of digest ("sha256:<hex>") in dir and
// checks that its bytes hash to it.
func readDigested(dir, digest string) ([]byte, error) {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexd) != 64 || strings.ContainsAny(hexd, "/.") {
		return nil, fmt.Errorf("digest %q is not sha256:<hex>", digest)
	}
	data, err := os.ReadFile(filepath.Join(dir, hexd))
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexd {
		return nil, fmt.Errorf("%s does not hash to %s", filepath.Join(dir, hexd), digest)
	}
	return data, nil
}

// storeLayer describes the layer of chain ID chain (diff ID diff) from
// the engine's files under root: its size is that of the tar the split
// file and the diff folder make, each file of which is checked to be
// there with its size.
func storeLayer(root, chain, diff string) (imagearchive.Layer, error) {
	rec := filepath.Join(root, "image", "overlay2", "layerdb", "sha256", strings.TrimPrefix(chain, "sha256:"))
	recorded, err := os.ReadFile(filepath.Join(rec, "diff"))
	if err != nil {
		return imagearchive.Layer{}, err
	}
	if strings.TrimSpace(string(recorded)) != diff {
		return imagearchive.Layer{}, fmt.Errorf("the layer record %s names diff %s", rec, recorded)
	}
	cache, err := os.ReadFile(filepath.Join(rec, "cache-id"))
	if err != nil {
		return imagearchive.Layer{}, err
	}
	id := strings.TrimSpace(string(cache))
	if id == "" || strings.ContainsAny(id, "/.") {
		return imagearchive.Layer{}, fmt.Errorf("the layer record %s has cache-id %q", rec, cache)
	}
	dir := filepath.Join(root, "overlay2", id, "diff")
	split := filepath.Join(rec, "tar-split.json.gz")
	files, err := os.OpenRoot(dir)
	if err != nil {
		return imagearchive.Layer{}, err
	}
	defer files.Close()
	var size int64
	err = eachSplitEntry(split, func(e splitEntry) error {
		switch e.Type {
		case splitSegment:
			size += int64(len(e.Payload))
		case splitFile:
			if e.Size == 0 {
				return nil
			}
			fi, err := files.Lstat(e.rel())
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() || fi.Size() != e.Size {
				return fmt.Errorf("%s in %s: %s of %d bytes, the layer's tar says %d", e.rel(), dir, fi.Mode().Type(), fi.Size(), e.Size)
			}
			size += e.Size
		default:
			return fmt.Errorf("%s: an entry of type %d", split, e.Type)
		}
		return nil
	})
	if err != nil {
		return imagearchive.Layer{}, err
	}
	open := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(assembleLayer(pw, split, dir)) }()
		return pr, nil
	}
	return imagearchive.Layer{Digest: diff, Size: size, Open: open}, nil
}

// The entries of a tar-split file (JSON, one per line): a segment is raw
// bytes of the tar (headers, padding, the end); a file entry stands for
// the contents of the file of that name, read from the layer's folder.
const (
	splitFile    = 1
	splitSegment = 2
)

type splitEntry struct {
	Type    int    `json:"type"`
	Name    string `json:"name,omitempty"`
	NameRaw []byte `json:"name_raw,omitempty"`
	Size    int64  `json:"size,omitempty"`
	Payload []byte `json:"payload"`
}

// rel is the entry's file name relative to the layer's folder. Files are
// opened through an os.Root of that folder: neither the name nor a
// symlink in the folder reaches out of it.
func (e splitEntry) rel() string {
	name := e.Name
	if len(e.NameRaw) > 0 {
		name = string(e.NameRaw)
	}
	return strings.TrimPrefix(filepath.Clean("/"+name), "/")
}

// eachSplitEntry calls fn with each entry of the tar-split file.
func eachSplitEntry(file string, fn func(splitEntry) error) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	dec := json.NewDecoder(zr)
	for {
		var e splitEntry
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

// assembleLayer writes the layer's tar to w: the split file's segments,
// and between them the contents of the files they stand for.
func assembleLayer(w io.Writer, split, dir string) error {
	files, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer files.Close()
	return eachSplitEntry(split, func(e splitEntry) error {
		if e.Type == splitSegment {
			_, err := w.Write(e.Payload)
			return err
		}
		if e.Size == 0 {
			return nil
		}
		f, err := files.Open(e.rel())
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(w, io.LimitReader(f, e.Size))
		if err == nil && n != e.Size {
			err = fmt.Errorf("%s in %s: %d bytes, the layer's tar says %d", e.rel(), dir, n, e.Size)
		}
		return err
	})
}

// saveFromStore writes refs as an image archive read from the engine's
// files; false (with nothing written) when they cannot be read so.
func (b *Backend) saveFromStore(ctx context.Context, w io.Writer, refs []string) (bool, error) {
	imgs, err := b.storeImages(ctx, refs)
	if err != nil {
		b.log.Debug("image save through the engine", "why", err)
		return false, nil
	}
	tw := tar.NewWriter(w)
	if err := imagearchive.Write(tw, "", imgs); err != nil {
		return true, err
	}
	return true, tw.Close()
}
