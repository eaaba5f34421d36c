package imagearchive

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/harness"
)

// TestDocker spools what the engine's image save writes (Docker 20.10's
// legacy format, or Docker 25's), adds a layer, writes the image under a
// new name, loads that with the engine and runs it: the engine reads the
// new layer from the archive Write made.
func TestDocker(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	if _, err := exec.LookPath("docker"); err != nil {
		harness.Unavailable(t, dockertest.EnvRequire, "the docker command is missing: %v", err)
	}
	suffix := strings.ToLower(rand.Text()[:10])
	// An image holding a layer twice: Docker 20.10's save writes the
	// second copy as a symlink to the first.
	twice := "sandboxkit-test/imagearchive-twice:" + suffix
	const dockerfile = "FROM " + dockertest.BusyboxImage + "\nRUN echo a > /x && touch -d @0 /x\nRUN echo a > /x && touch -d @0 /x\n"
	docker(t, strings.NewReader(dockerfile), "build", "-q", "-t", twice, "-")
	t.Cleanup(func() { docker(t, nil, "rmi", twice) })

	for i, ref := range []string{dockertest.BusyboxImage, twice} {
		t.Run(ref, func(t *testing.T) {
			rc, err := cli.ImageSave(t.Context(), []string{ref})
			if err != nil {
				t.Fatal(err)
			}
			imgs, err := Spool(rc, t.TempDir())
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(imgs) != 1 || imgs[0].Name != ref {
				t.Fatalf("Spool of docker save %s: %d images %+v", ref, len(imgs), imgs)
			}
			if ls := imgs[0].Layers; ref == twice && (len(ls) < 2 || ls[len(ls)-1].Digest != ls[len(ls)-2].Digest) {
				t.Errorf("%s: the last two of %d layers differ", ref, len(ls))
			}
			marker := suffix + "-" + string(rune('0'+i))
			img := addLayer(t, imgs[0], "marker", marker+"\n")
			img.Name = "sandboxkit-test/imagearchive:" + marker

			archive := filepath.Join(t.TempDir(), "archive.tar")
			f, err := os.Create(archive)
			if err != nil {
				t.Fatal(err)
			}
			tw := tar.NewWriter(f)
			if err := Write(tw, "", []Image{img}); err != nil {
				t.Fatal(err)
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			docker(t, nil, "load", "-q", "-i", archive)
			t.Cleanup(func() { docker(t, nil, "rmi", img.Name) })
			if out := docker(t, nil, "run", "--rm", img.Name, "cat", "/marker"); out != marker+"\n" {
				t.Errorf("/marker in the loaded image holds %q, want %q", out, marker+"\n")
			}
		})
	}
}

// addLayer returns img with a layer on top holding the file name.
func addLayer(t *testing.T, img Image, name, content string) Image {
	t.Helper()
	l := memLayer(layerTar(t, map[string]string{name: content}))
	var config map[string]any
	if err := json.Unmarshal(img.Config, &config); err != nil {
		t.Fatal(err)
	}
	rootfs := config["rootfs"].(map[string]any)
	rootfs["diff_ids"] = append(rootfs["diff_ids"].([]any), l.Digest)
	img.Config, _ = json.Marshal(config)
	img.Layers = append(img.Layers[:len(img.Layers):len(img.Layers)], l)
	return img
}

// docker runs the docker command and returns its output, failing t when it
// fails.
func docker(t *testing.T, stdin io.Reader, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("docker", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String()
}
