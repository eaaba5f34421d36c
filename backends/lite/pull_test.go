package lite

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
)

// TestPull pushes the test image to Debian's docker-registry on loopback
// and makes sandboxes from it by reference.
func TestPull(t *testing.T) {
	e := newTestEnv(t)
	addr := dockertest.Registry(t)
	ref := addr + "/sandboxkit-test/lite:1"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img := testImage(t)
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	e.cfg.InsecureRegistries = []string{addr}
	b := e.open(t)

	spec := e.spec("pulled")
	spec.Image = ref
	sb := create(t, b, spec)
	if out := mustExec(t, sb, "cat /etc/image-release; pwd"); out != "test image\n/srv\n" {
		t.Errorf("in the pulled image: %q", out)
	}
	id, _ := img.ConfigName()
	if _, err := os.Stat(filepath.Join(e.cfg.ImageDir, cacheKey(id.String()), "rootfs", "srv", "from-layer2")); err != nil {
		t.Errorf("the pulled image is not unpacked in the cache under its ID: %v", err)
	}

	t.Run("cached tag needs no registry", func(t *testing.T) {
		cfg := e.cfg
		cfg.PullPolicy = PullNever
		b2, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sb := create(t, b2, spec)
		mustExec(t, sb, "true")
		spec2 := spec
		spec2.Image = addr + "/sandboxkit-test/lite:never-pushed"
		if _, err := b2.Create(t.Context(), spec2); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("Create of an uncached image with pull_policy never: %v, want ErrNotFound", err)
		}
	})
	t.Run("missing tag", func(t *testing.T) {
		spec2 := spec
		spec2.Image = addr + "/sandboxkit-test/lite:never-pushed"
		if _, err := b.Create(t.Context(), spec2); !errors.Is(err, backend.ErrNotFound) {
			t.Errorf("Create of a tag the registry lacks: %v, want ErrNotFound", err)
		}
	})
}
