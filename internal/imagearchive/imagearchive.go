// Package imagearchive writes and reads image archives: the tars that
// backend.ImageArchiver moves images in.
//
// Write makes what Docker's image save writes since version 25: an OCI
// image layout (oci-layout, index.json, blobs/sha256/<hex>) with
// uncompressed layers, which also holds Docker's manifest.json:
//
//	blobs/sha256/<layer diff ID>     a layer: an uncompressed tar
//	blobs/sha256/<config digest>     the image config (rootfs.diff_ids)
//	blobs/sha256/<manifest digest>   an OCI image manifest
//	oci-layout                       {"imageLayoutVersion": "1.0.0"}
//	index.json                       a descriptor per image name
//	manifest.json                    [{"Config": ..., "RepoTags": [...], "Layers": [...]}]
//
// Every Docker engine loads it: older ones (20.10) read only manifest.json,
// whose paths name files of the tar, and newer ones and OCI tools read the
// layout.
//
// Spool reads that, any OCI layout, and what older Docker engines' image
// save writes (<id>/layer.tar, <config hex>.json, manifest.json, often
// last in the stream), into a folder, so that entries may come in any
// order.
package imagearchive

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Layer is one layer of an image.
type Layer struct {
	// Digest is "sha256:<hex>" of the uncompressed tar: the layer's diff
	// ID, which the config's rootfs.diff_ids lists.
	Digest string
	// Size is the uncompressed tar's size in bytes.
	Size int64
	// Open returns the uncompressed tar.
	Open func() (io.ReadCloser, error)
}

// Image is a named image.
type Image struct {
	// Name is the image's reference, NAME:TAG.
	Name string
	// Config is the image config JSON; its rootfs.diff_ids are the
	// Digests of Layers, in order.
	Config []byte
	Layers []Layer
}

// Media types and annotations that Write writes (and Docker 25 does).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"

	annotationRefName   = "org.opencontainers.image.ref.name" // the tag
	annotationImageName = "io.containerd.image.name"          // NAME:TAG
)

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType,omitempty"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
}

type ociIndex struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type ociManifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// dockerManifest is one image of Docker's manifest.json; paths are
// relative to the archive's top.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// Write writes imgs to tw as an image archive (see the package doc), every
// entry's name prefixed with prefix ("" or a folder such as "images/").
// Blobs that images share are written once. Each layer's bytes are checked
// against its Digest and Size as they are written; a mismatch is an error
// naming the image, and leaves tw with a partial archive. The order of
// entries depends only on imgs. Write does not close tw.
func Write(tw *tar.Writer, prefix string, imgs []Image) error {
	// Check everything that needs no layer's bytes before writing.
	seen := map[string]bool{}
	for _, img := range imgs {
		if tagOf(img.Name) == "" {
			return fmt.Errorf("image %q: an image archive names images NAME:TAG", img.Name)
		}
		if seen[img.Name] {
			return fmt.Errorf("image %q: named twice", img.Name)
		}
		seen[img.Name] = true
		if err := checkDiffIDs(img); err != nil {
			return err
		}
	}
	w := &writer{tw: tw, prefix: prefix, written: map[string]bool{}}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: prefix + dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	index := ociIndex{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{}}
	manifests := []dockerManifest{}
	for _, img := range imgs {
		m := ociManifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Layers: []descriptor{}}
		dm := dockerManifest{RepoTags: []string{img.Name}, Layers: []string{}}
		for _, l := range img.Layers {
			if err := w.layer(img.Name, l); err != nil {
				return err
			}
			m.Layers = append(m.Layers, descriptor{MediaType: mediaTypeLayer, Digest: l.Digest, Size: l.Size})
			dm.Layers = append(dm.Layers, blobPath(l.Digest))
		}
		var err error
		if m.Config, err = w.blob(mediaTypeConfig, img.Config); err != nil {
			return err
		}
		dm.Config = blobPath(m.Config.Digest)
		data, _ := json.Marshal(m)
		d, err := w.blob(mediaTypeManifest, data)
		if err != nil {
			return err
		}
		d.Annotations = map[string]string{annotationImageName: img.Name, annotationRefName: tagOf(img.Name)}
		index.Manifests = append(index.Manifests, d)
		manifests = append(manifests, dm)
	}
	data, _ := json.Marshal(index)
	if err := w.file("index.json", data); err != nil {
		return err
	}
	data, _ = json.Marshal(manifests)
	if err := w.file("manifest.json", data); err != nil {
		return err
	}
	return w.file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
}

// epoch is every entry's modification time, as in Docker's own archives.
var epoch = time.Unix(0, 0)

type writer struct {
	tw      *tar.Writer
	prefix  string
	written map[string]bool // blob digests
}

func (w *writer) file(name string, data []byte) error {
	hdr := &tar.Header{Name: w.prefix + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := w.tw.Write(data)
	return err
}

// blob writes data as a blob, once, and returns its descriptor.
func (w *writer) blob(mediaType string, data []byte) (descriptor, error) {
	d := descriptor{MediaType: mediaType, Digest: digestOf(data), Size: int64(len(data))}
	if w.written[d.Digest] {
		return d, nil
	}
	w.written[d.Digest] = true
	return d, w.file(blobPath(d.Digest), data)
}

// layer writes layer l of image img as a blob, once, checking its bytes.
func (w *writer) layer(img string, l Layer) error {
	if w.written[l.Digest] {
		return nil
	}
	w.written[l.Digest] = true
	rc, err := l.Open()
	if err != nil {
		return fmt.Errorf("image %q: layer %s: %w", img, l.Digest, err)
	}
	defer rc.Close()
	hdr := &tar.Header{Name: w.prefix + blobPath(l.Digest), Typeflag: tar.TypeReg, Mode: 0o644, Size: l.Size, ModTime: epoch}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w.tw, h), io.LimitReader(rc, l.Size))
	if err != nil {
		return fmt.Errorf("image %q: layer %s: %w", img, l.Digest, err)
	}
	var more [1]byte
	if m, _ := io.ReadFull(rc, more[:]); n != l.Size || m > 0 {
		return fmt.Errorf("image %q: layer %s is not the %d bytes its Size says (read %d and more: %t)", img, l.Digest, l.Size, n, m > 0)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != l.Digest {
		return fmt.Errorf("image %q: layer %s: its bytes hash to %s", img, l.Digest, got)
	}
	return nil
}

// checkDiffIDs checks that img's config lists its layers' digests.
func checkDiffIDs(img Image) error {
	diffIDs, err := configDiffIDs(img.Config)
	if err != nil {
		return fmt.Errorf("image %q: %w", img.Name, err)
	}
	if len(diffIDs) != len(img.Layers) {
		return fmt.Errorf("image %q: the config's rootfs.diff_ids lists %d layers, and the image has %d", img.Name, len(diffIDs), len(img.Layers))
	}
	for i, l := range img.Layers {
		if !validDigest(l.Digest) {
			return fmt.Errorf("image %q: layer %d: digest %q is not sha256:<64 hex digits>", img.Name, i, l.Digest)
		}
		if l.Digest != diffIDs[i] {
			return fmt.Errorf("image %q: layer %d is %s, and the config's rootfs.diff_ids says %s", img.Name, i, l.Digest, diffIDs[i])
		}
	}
	return nil
}

// configDiffIDs returns an image config's rootfs.diff_ids.
func configDiffIDs(config []byte) ([]string, error) {
	var c struct {
		RootFS *struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	if c.RootFS == nil {
		return nil, fmt.Errorf("image config: no rootfs")
	}
	return c.RootFS.DiffIDs, nil
}

func digestOf(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// validDigest reports whether d is "sha256:" and 64 lowercase hex digits.
func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// blobPath is the archive path of the blob with digest d.
func blobPath(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }

// tagOf returns the tag of reference NAME:TAG, "" when it has none.
func tagOf(ref string) string {
	i := strings.LastIndexByte(ref, ':')
	if i <= 0 || strings.ContainsAny(ref[i+1:], "/@") || strings.Contains(ref, "@") {
		return ""
	}
	return ref[i+1:]
}
