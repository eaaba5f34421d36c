package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/docker/docker/client"

	"github.com/sandboxkit/sandboxkit/backend"
)

var _ backend.ImageArchiver = (*Backend)(nil)

// SaveImages streams the engine's image save of refs to w (docker save:
// the OCI layout with manifest.json on Docker 25 and later, the older
// folder-per-layer format before; LoadImages of every backend reads
// both). From a local engine on overlay2 whose files this process can
// read, it writes the same layers and configs from those files, in the
// OCI layout, without the engine's copy of each layer (see
// storesave.go).
func (b *Backend) SaveImages(ctx context.Context, w io.Writer, refs []string) error {
	if len(refs) == 0 {
		return b.opErr("save images", "", fmt.Errorf("%w: no images to save", backend.ErrInvalidConfig))
	}
	b.settle(ctx)
	if !b.engineSave {
		if ok, err := b.saveFromStore(ctx, w, refs); ok {
			return b.opErr("save images", "", err)
		}
	}
	rc, err := b.cli.ImageSave(ctx, refs)
	if err != nil {
		return b.opErr("save images", "", b.translate(err))
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return b.opErr("save images", "", b.translate(err))
	}
	return nil
}

// loadMessage is one message of the engine's image load stream.
type loadMessage struct {
	Stream      string `json:"stream"`
	Error       string `json:"error"`
	ErrorDetail struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// LoadImages streams r to the engine's image load and returns the tags it
// loaded, each mapped to itself (an image ID for an untagged image).
// The engine reads the whole archive before it keeps anything, so a bad
// archive leaves nothing behind.
func (b *Backend) LoadImages(ctx context.Context, r io.Reader) (map[string]string, error) {
	b.settle(ctx)
	resp, err := b.cli.ImageLoad(ctx, r, client.ImageLoadWithQuiet(true))
	if err != nil {
		return nil, b.opErr("load images", "", b.translate(err))
	}
	defer resp.Body.Close()
	loaded := map[string]string{}
	dec := json.NewDecoder(resp.Body)
	for {
		var m loadMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, b.opErr("load images", "", fmt.Errorf("reading the engine's answer: %w", err))
		}
		if msg := cmp(m.ErrorDetail.Message, m.Error); msg != "" {
			return nil, b.opErr("load images", "", fmt.Errorf("the engine refused the archive: %s", msg))
		}
		for _, line := range strings.Split(m.Stream, "\n") {
			for _, prefix := range []string{"Loaded image: ", "Loaded image ID: "} {
				if ref, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
					ref = shortTag(ref)
					loaded[ref] = ref
				}
			}
		}
	}
	if len(loaded) == 0 {
		return nil, b.opErr("load images", "", errors.New("the engine loaded no image from the archive"))
	}
	// Tag each loaded image again (the same name): Docker then records
	// when (its LastTagTime; a load alone does not set it), which
	// PruneCaches reads to spare an image a restore is about to create
	// from, though its creation time is the bundle's. An image loaded
	// without a name has no tag to renew: its creation time alone counts.
	for ref := range loaded {
		if !strings.HasPrefix(ref, "sha256:") {
			b.cli.ImageTag(ctx, ref, ref) // best effort: the load stands without it
		}
	}
	return loaded, nil
}
