package imagearchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// Spool reads an image archive from r: one Write wrote or Docker's image
// save wrote (any version), or an OCI layout with no manifest.json. It
// writes the files it needs into the folder dir (made if missing; the
// caller removes it), so the archive's entries may come in any order, and
// returns the archive's images, one per name, with layers read from dir.
// Gzipped layers are stored uncompressed. Layer digests and sizes are
// computed from the bytes and checked against the configs' diff IDs, and
// OCI blobs against their descriptors.
//
// An archive is refused when an entry's name leaves the archive (".." or
// absolute), an entry is neither a file, a folder, nor a symlink to
// another entry (Docker's save links a layer that an image holds twice),
// an image has no NAME:TAG name, or the same name comes twice.
func Spool(r io.Reader, dir string) ([]Image, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	s := &spool{dir: dir, files: map[string]*spooled{}, links: map[string]string{}, layers: map[*spooled]Layer{}}
	imgs, err := s.images(r)
	if err != nil {
		return nil, fmt.Errorf("image archive: %w", err)
	}
	return imgs, nil
}

// spooled is a file of the archive, copied to a file of the folder.
type spooled struct {
	file   string
	size   int64
	digest string
}

type spool struct {
	dir    string
	n      int                 // files made in dir
	files  map[string]*spooled // by clean archive name
	links  map[string]string   // symlink name -> clean target name
	layers map[*spooled]Layer  // layers seen, by their file
}

func (s *spool) images(r io.Reader) ([]Image, error) {
	if err := s.read(r); err != nil {
		return nil, err
	}
	var imgs []Image
	var err error
	switch {
	case s.has("manifest.json"):
		imgs, err = s.fromManifestJSON()
	case s.has("index.json"):
		imgs, err = s.fromIndex()
	default:
		return nil, errors.New("no manifest.json or index.json at its top (want what docker save writes, or an OCI image layout)")
	}
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, img := range imgs {
		if seen[img.Name] {
			return nil, fmt.Errorf("two images are named %q", img.Name)
		}
		seen[img.Name] = true
	}
	return imgs, nil
}

// read copies the archive's files into the folder.
func (s *spool) read(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a readable tar: %w", err)
		}
		name, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir, tar.TypeXGlobalHeader:
		case tar.TypeReg:
			f, err := s.store(tr)
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			s.remove(name)
			s.files[name] = f
		case tar.TypeSymlink:
			if path.IsAbs(hdr.Linkname) {
				return fmt.Errorf("symlink %s points to an absolute path, %s", hdr.Name, hdr.Linkname)
			}
			target, err := cleanName(path.Join(path.Dir(name), hdr.Linkname))
			if err != nil || target == "." {
				return fmt.Errorf("symlink %s points out of the archive, to %s", hdr.Name, hdr.Linkname)
			}
			s.remove(name)
			s.links[name] = target
		default:
			kind, ok := entryKinds[hdr.Typeflag]
			if !ok {
				kind = fmt.Sprintf("a tar entry of type %q", hdr.Typeflag)
			}
			return fmt.Errorf("%s is %s; an image archive holds only files, folders and symlinks to its files", hdr.Name, kind)
		}
	}
}

var entryKinds = map[byte]string{
	tar.TypeLink: "a hard link", tar.TypeChar: "a device", tar.TypeBlock: "a device", tar.TypeFifo: "a FIFO",
}

// cleanName returns an entry's name cleaned, refusing one that leaves the
// archive.
func cleanName(name string) (string, error) {
	if path.IsAbs(name) || slices.Contains(strings.Split(name, "/"), "..") {
		return "", fmt.Errorf("unsafe entry name %q (absolute, or with ..)", name)
	}
	return path.Clean(name), nil
}

// store copies r to a new file of the folder.
func (s *spool) store(r io.Reader) (*spooled, error) {
	s.n++
	f := &spooled{file: filepath.Join(s.dir, strconv.Itoa(s.n))}
	out, err := os.OpenFile(f.file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	f.size, err = io.Copy(io.MultiWriter(out, h), r)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	f.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return f, err
}

// remove forgets an entry that a later one of the same name replaces.
func (s *spool) remove(name string) {
	if f, ok := s.files[name]; ok {
		os.Remove(f.file)
		delete(s.files, name)
	}
	delete(s.links, name)
}

// lookup returns the file an archive path names, following symlinks.
func (s *spool) lookup(name string) (*spooled, error) {
	orig := name
	name, err := cleanName(name)
	if err != nil {
		return nil, err
	}
	for range 16 {
		if f, ok := s.files[name]; ok {
			return f, nil
		}
		target, ok := s.links[name]
		if !ok {
			return nil, fmt.Errorf("%s is not in the archive", orig)
		}
		name = target
	}
	return nil, fmt.Errorf("%s: too many symlinks", orig)
}

func (s *spool) has(name string) bool {
	_, err := s.lookup(name)
	return err == nil
}

func (s *spool) readAll(name string) ([]byte, error) {
	f, err := s.lookup(name)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(f.file)
}

// fromManifestJSON reads the images Docker's manifest.json lists.
func (s *spool) fromManifestJSON() ([]Image, error) {
	data, err := s.readAll("manifest.json")
	if err != nil {
		return nil, err
	}
	var items []dockerManifest
	if err := json.Unmarshal(data, &items); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(items) == 0 {
		return nil, errors.New("manifest.json lists no image")
	}
	var imgs []Image
	for i, it := range items {
		what := fmt.Sprintf("manifest.json image %d (config %s)", i, it.Config)
		if len(it.RepoTags) == 0 {
			return nil, fmt.Errorf("%s has no name (RepoTags is empty): save images by NAME:TAG, not by ID", what)
		}
		what = fmt.Sprintf("image %q", it.RepoTags[0])
		config, err := s.readAll(it.Config)
		if err != nil {
			return nil, fmt.Errorf("%s: config: %w", what, err)
		}
		files := make([]*spooled, len(it.Layers))
		for j, p := range it.Layers {
			if files[j], err = s.lookup(p); err != nil {
				return nil, fmt.Errorf("%s: layer %d: %w", what, j, err)
			}
		}
		layers, err := s.imageLayers(what, config, files)
		if err != nil {
			return nil, err
		}
		for _, name := range it.RepoTags {
			if tagOf(name) == "" {
				return nil, fmt.Errorf("%s: name %q is not NAME:TAG", what, name)
			}
			imgs = append(imgs, Image{Name: name, Config: config, Layers: layers})
		}
	}
	return imgs, nil
}

// fromIndex reads the images an OCI layout's index.json lists.
func (s *spool) fromIndex() ([]Image, error) {
	data, err := s.readAll("index.json")
	if err != nil {
		return nil, err
	}
	var index struct{ Manifests []descriptor }
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	if len(index.Manifests) == 0 {
		return nil, errors.New("index.json lists no image")
	}
	var imgs []Image
	for i, d := range index.Manifests {
		name := d.Annotations[annotationImageName]
		if ref := d.Annotations[annotationRefName]; name == "" && tagOf(ref) != "" {
			name = ref
		}
		if tagOf(name) == "" {
			return nil, fmt.Errorf("index.json image %d (%s) has no NAME:TAG name (annotations %s %q, %s %q)",
				i, d.Digest, annotationImageName, d.Annotations[annotationImageName], annotationRefName, d.Annotations[annotationRefName])
		}
		img, err := s.ociImage(fmt.Sprintf("image %q", name), d, true)
		if err != nil {
			return nil, err
		}
		img.Name = name
		imgs = append(imgs, img)
	}
	return imgs, nil
}

// ociImage reads the image of manifest d, or, when d is an index and
// nested is set, of its manifest for linux on this machine's architecture.
func (s *spool) ociImage(what string, d descriptor, nested bool) (Image, error) {
	data, err := s.blob(what, d)
	if err != nil {
		return Image{}, err
	}
	var m struct {
		Config    *descriptor
		Layers    []descriptor
		Manifests []descriptor
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return Image{}, fmt.Errorf("%s: manifest %s: %w", what, d.Digest, err)
	}
	if m.Manifests != nil && nested {
		child, err := pickPlatform(what, m.Manifests)
		if err != nil {
			return Image{}, err
		}
		return s.ociImage(what, child, false)
	}
	if m.Config == nil {
		return Image{}, fmt.Errorf("%s: %s is not an image manifest (no config)", what, d.Digest)
	}
	config, err := s.blob(what, *m.Config)
	if err != nil {
		return Image{}, err
	}
	files := make([]*spooled, len(m.Layers))
	for i, l := range m.Layers {
		if files[i], err = s.blobFile(what, l); err != nil {
			return Image{}, err
		}
	}
	layers, err := s.imageLayers(what, config, files)
	return Image{Config: config, Layers: layers}, err
}

// pickPlatform picks an index's manifest for linux on this machine's
// architecture, or its only one.
func pickPlatform(what string, ds []descriptor) (descriptor, error) {
	var plats []string
	for _, d := range ds {
		if p := d.Platform; p != nil {
			if p.OS == "linux" && p.Architecture == runtime.GOARCH {
				return d, nil
			}
			plats = append(plats, p.OS+"/"+p.Architecture)
		}
	}
	if len(ds) == 1 {
		return ds[0], nil
	}
	return descriptor{}, fmt.Errorf("%s: its index has no image for linux/%s (it has %s)", what, runtime.GOARCH, strings.Join(plats, ", "))
}

// blobFile returns the file of the blob d describes, checked against d.
func (s *spool) blobFile(what string, d descriptor) (*spooled, error) {
	if !validDigest(d.Digest) {
		return nil, fmt.Errorf("%s: digest %q is not sha256:<64 hex digits>", what, d.Digest)
	}
	f, err := s.lookup(blobPath(d.Digest))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if f.digest != d.Digest || f.size != d.Size {
		return nil, fmt.Errorf("%s: blob %s is %d bytes hashing to %s, and its descriptor says %d bytes",
			what, d.Digest, f.size, f.digest, d.Size)
	}
	return f, nil
}

func (s *spool) blob(what string, d descriptor) ([]byte, error) {
	f, err := s.blobFile(what, d)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(f.file)
}

// imageLayers returns the layers of files, checked against config's
// rootfs.diff_ids.
func (s *spool) imageLayers(what string, config []byte, files []*spooled) ([]Layer, error) {
	diffIDs, err := configDiffIDs(config)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(diffIDs) != len(files) {
		return nil, fmt.Errorf("%s: the config's rootfs.diff_ids lists %d layers, and the manifest %d", what, len(diffIDs), len(files))
	}
	layers := make([]Layer, len(files))
	for i, f := range files {
		if layers[i], err = s.layer(f); err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", what, i, err)
		}
		if layers[i].Digest != diffIDs[i] {
			return nil, fmt.Errorf("%s: layer %d hashes to %s, and the config's rootfs.diff_ids says %s", what, i, layers[i].Digest, diffIDs[i])
		}
	}
	return layers, nil
}

// layer returns the layer file f holds, first decompressed when gzipped.
func (s *spool) layer(f *spooled) (Layer, error) {
	if l, ok := s.layers[f]; ok {
		return l, nil
	}
	in, err := os.Open(f.file)
	if err != nil {
		return Layer{}, err
	}
	defer in.Close()
	var magic [4]byte
	n, _ := io.ReadFull(in, magic[:])
	u := f
	switch {
	case n >= 2 && bytes.Equal(magic[:2], []byte{0x1f, 0x8b}):
		in.Seek(0, io.SeekStart)
		zr, err := gzip.NewReader(in)
		if err != nil {
			return Layer{}, err
		}
		if u, err = s.store(zr); err != nil {
			return Layer{}, fmt.Errorf("decompressing: %w", err)
		}
		// Only the decompressed file is read from here on.
		os.Remove(f.file)
	case n == 4 && bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return Layer{}, errors.New("zstd-compressed layers are not supported (save it uncompressed or gzipped)")
	}
	file := u.file
	l := Layer{Digest: u.digest, Size: u.size, Open: func() (io.ReadCloser, error) { return os.Open(file) }}
	s.layers[f] = l
	return l, nil
}
