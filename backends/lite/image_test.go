package lite

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

// tarDir returns a tar stream of the folder dir, as a layer holds it.
func tarDir(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tw.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return buf.Bytes()
}

// layerOf makes a layer of tar entries given as name -> content ("" with
// a trailing slash: a folder).
func layerOf(t testing.TB, files map[string]string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, content := range files {
		hdr := &tar.Header{Name: n, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: time.Unix(1e9, 0)}
		if strings.HasSuffix(n, "/") {
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		}
		tw.WriteHeader(hdr)
		tw.Write([]byte(content))
	}
	tw.Close()
	return staticLayer(t, buf.Bytes())
}

func staticLayer(t testing.TB, data []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is the busybox folder as an image with a second layer that
// adds a file and deletes one (a whiteout), and a config with env,
// working folder and command.
func testImage(t testing.TB) v1.Image {
	t.Helper()
	base := staticLayer(t, tarDir(t, busyboxRootfs(t)))
	top := layerOf(t, map[string]string{
		"srv/":              "",
		"srv/from-layer2":   "second layer\n",
		"bin/.wh.nslookup":  "",
		"etc/image-release": "test image\n",
	})
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{
		Env:        []string{"PATH=/bin:/usr/bin", "IMAGE_ENV=from-image"},
		WorkingDir: "/srv",
		Cmd:        []string{"sh", "-c", "echo image command ran; exec sleep 100000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestImages(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	img := testImage(t)
	dir := t.TempDir()

	archive := filepath.Join(dir, "image.tar")
	tag, _ := name.NewTag("sandboxkit.test/lite:1")
	if err := tarball.WriteToFile(archive, tag, img); err != nil {
		t.Fatal(err)
	}
	ociDir := filepath.Join(dir, "oci")
	lp, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "v1"})); err != nil {
		t.Fatal(err)
	}
	ociArchive := filepath.Join(dir, "oci.tar")
	if err := os.WriteFile(ociArchive, tarDir(t, ociDir), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, ref := range []string{
		"docker-archive:" + archive,
		archive, // an absolute path: the kind is detected
		"oci:" + ociDir + ":v1",
		ociDir,
		"oci-archive:" + ociArchive,
	} {
		t.Run(strings.ReplaceAll(ref, "/", "_"), func(t *testing.T) {
			spec := e.spec("image")
			spec.Image = ref
			sb := create(t, b, spec)
			out := mustExec(t, sb, `pwd; echo "$IMAGE_ENV"; cat /srv/from-layer2 /etc/image-release; [ -e /bin/nslookup ] || echo whiteout-applied`)
			want := "/srv\nfrom-image\nsecond layer\ntest image\nwhiteout-applied\n"
			if out != want {
				t.Errorf("in a sandbox of %s: %q, want %q", ref, out, want)
			}
		})
	}
	// Every reference named the same image: one unpacked copy.
	entries, _ := os.ReadDir(e.cfg.ImageDir)
	var unpacked []string
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "sha256-") {
			unpacked = append(unpacked, en.Name())
		}
	}
	if id, _ := img.ConfigName(); len(unpacked) != 1 || unpacked[0] != cacheKey(id.String()) {
		t.Errorf("image cache holds %v, want one folder for %s", unpacked, id)
	}

	t.Run("image command", func(t *testing.T) {
		spec := e.spec("image-command")
		spec.Image = archive
		spec.ImageCommand = true
		sb := create(t, b, spec)
		deadline := time.Now().Add(5 * time.Second)
		for {
			log, _ := os.ReadFile(filepath.Join(sb.dir, "main.log"))
			if strings.Contains(string(log), "image command ran") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("main.log = %q, want the image command's output", log)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if out := mustExec(t, sb, `cat /proc/1/cmdline | tr '\0' ' '`); !strings.HasPrefix(out, "/.sbx/sbxd init --agent /.sbx-run/agent.sock --sandbox "+sb.ID()+" -- sh -c") {
			t.Errorf("PID 1 = %q, want sbxd init running the image's command", out)
		}
	})

	t.Run("config mapping", func(t *testing.T) {
		cfg := e.cfg
		cfg.Images = map[string]string{"ubuntu:20.04": "docker-archive:" + archive}
		b2, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		spec := e.spec("mapped")
		spec.Image = "ubuntu:20.04"
		sb := create(t, b2, spec)
		if out := mustExec(t, sb, "cat /etc/image-release"); out != "test image\n" {
			t.Errorf("mapped image: %q", out)
		}
		info, _ := sb.Info(t.Context())
		if info.Image != "ubuntu:20.04" {
			t.Errorf("Info.Image = %q, want the name the entry used", info.Image)
		}
	})

	t.Run("unpack refuses to escape", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		outside := filepath.Join(t.TempDir(), "outside")
		for _, h := range []*tar.Header{
			{Name: "../../../../" + outside, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
			{Name: "link", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(outside)},
			{Name: "link/outside", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
		} {
			tw.WriteHeader(h)
			tw.Write([]byte("x"))
		}
		tw.Close()
		dst := t.TempDir()
		err := tartree.Extract(&buf, dst, nil)
		if _, serr := os.Lstat(outside); serr == nil {
			t.Fatalf("untar wrote %s outside its folder", outside)
		}
		if err == nil {
			t.Log("untar kept every entry inside the folder")
		}
	})
}
