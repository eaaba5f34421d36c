package backend

import (
	"context"
	"io"
)

// LabelTransient marks an image (or a lite or local snapshot) made only
// for sandboxes to start from: a bundle's image taken for export, or one
// loaded from a bundle. sbx gc (CachePruner) removes it once no sandbox
// uses it, as it removes fork images.
const LabelTransient = "sandboxkit.transient"

// ImageArchiver is a backend that writes its images to an image archive
// and loads images from one, so that a sandbox's file system moves to
// another backend (sbx snapshot -o, sbx restore, sbx move).
//
// An image archive is a tar in the format Docker writes since version 25:
// an OCI image layout (oci-layout, index.json, blobs/sha256/...) that also
// holds Docker's manifest.json, with uncompressed layers. LoadImages also
// reads what older Docker engines' image save writes (manifest.json and
// per-layer folders), so a stream from any Docker engine loads without a
// conversion.
type ImageArchiver interface {
	// SaveImages writes the images refs (references Spec.Image takes) to
	// w as one image archive. Each image is named in the archive by its
	// reference, less a backend's own "snapshot:" prefix, which must then
	// be a valid image reference (NAME:TAG).
	SaveImages(ctx context.Context, w io.Writer, refs []string) error
	// LoadImages reads an image archive and returns, for each image name
	// in it, the reference Spec.Image takes to start sandboxes from it on
	// this backend. Images labelled LabelTransient stay while sandboxes
	// use them; sbx gc removes them after. Nothing of a bad archive is
	// kept.
	LoadImages(ctx context.Context, r io.Reader) (map[string]string, error)
}
