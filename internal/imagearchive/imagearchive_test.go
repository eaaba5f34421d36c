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
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// entry is a tar entry for tarOf: a file, or with typ a symlink (link) or
// anything else.
type entry struct {
	name, body string
	typ        byte
	link       string
}

func tarOf(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Unix(1e9, 0)}
		if e.typ == 0 {
			hdr.Typeflag = tar.TypeReg
		} else {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layerTar makes a layer holding files (name -> content).
func layerTar(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var es []entry
	for _, name := range slices.Sorted(maps.Keys(files)) {
		es = append(es, entry{name: name, body: files[name]})
	}
	return tarOf(t, es...)
}

func memLayer(data []byte) Layer {
	return Layer{Digest: digestOf(data), Size: int64(len(data)),
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }}
}

// memImage makes an image of layers, its config listing their digests.
func memImage(name string, layers ...[]byte) Image {
	img := Image{Name: name}
	var diffIDs []string
	for _, l := range layers {
		img.Layers = append(img.Layers, memLayer(l))
		diffIDs = append(diffIDs, digestOf(l))
	}
	img.Config, _ = json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Cmd": []string{"/bin/sh"}, "Labels": map[string]string{"image": name}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	return img
}

// testImages are two images sharing a layer, the first holding a layer
// twice.
func testImages(t testing.TB) []Image {
	base := layerTar(t, map[string]string{"etc/os-release": "test\n", "bin/sh": "#!"})
	same := layerTar(t, map[string]string{"x": "same"})
	return []Image{
		memImage("example.com/a:1", base, same, same),
		memImage("b:latest", base, layerTar(t, map[string]string{"b": "b"})),
	}
}

func writeArchive(t testing.TB, prefix string, imgs []Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := Write(tw, prefix, imgs); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// legacyArchive writes imgs as Docker 20.10's image save does: a folder
// per layer (a layer an image held before is a symlink to the first
// copy), <config hex>.json, and manifest.json last.
func legacyArchive(t testing.TB, imgs []Image) []byte {
	t.Helper()
	var es []entry
	var items []dockerManifest
	seen := map[string]string{} // layer digest -> path
	for i, img := range imgs {
		it := dockerManifest{Config: hexOf(img.Config) + ".json", RepoTags: []string{img.Name}}
		for j, l := range img.Layers {
			id := hexOf(fmt.Appendf(nil, "%d/%d", i, j))
			p := id + "/layer.tar"
			es = append(es, entry{name: id + "/", typ: tar.TypeDir}, entry{name: id + "/VERSION", body: "1.0"}, entry{name: id + "/json", body: "{}"})
			if first, ok := seen[l.Digest]; ok {
				es = append(es, entry{name: p, typ: tar.TypeSymlink, link: "../" + first})
			} else {
				es = append(es, entry{name: p, body: readLayer(t, l)})
				seen[l.Digest] = p
			}
			it.Layers = append(it.Layers, p)
		}
		es = append(es, entry{name: it.Config, body: string(img.Config)})
		items = append(items, it)
	}
	data, _ := json.Marshal(items)
	es = append(es, entry{name: "repositories", body: "{}"}, entry{name: "manifest.json", body: string(data)})
	return tarOf(t, es...)
}

// ociGzipArchive writes img as an OCI layout without manifest.json, with
// gzipped layers, behind a nested index that also lists a platform whose
// blobs are missing, named only by io.containerd.image.name.
func ociGzipArchive(t testing.TB, img Image) []byte {
	t.Helper()
	es := []entry{{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`}}
	blob := func(mediaType string, data []byte) descriptor {
		es = append(es, entry{name: "blobs/sha256/" + hexOf(data), body: string(data)})
		return descriptor{MediaType: mediaType, Digest: digestOf(data), Size: int64(len(data))}
	}
	m := ociManifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: blob(mediaTypeConfig, img.Config)}
	for _, l := range img.Layers {
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		io.WriteString(zw, readLayer(t, l))
		zw.Close()
		m.Layers = append(m.Layers, blob(mediaTypeLayer+"+gzip", zbuf.Bytes()))
	}
	data, _ := json.Marshal(m)
	md := blob(mediaTypeManifest, data)
	md.Platform = &platform{OS: "linux", Architecture: runtime.GOARCH}
	other := descriptor{MediaType: mediaTypeManifest, Digest: digestOf([]byte("missing")), Size: 7, Platform: &platform{OS: "linux", Architecture: "s390x-" + runtime.GOARCH}}
	data, _ = json.Marshal(ociIndex{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{other, md}})
	id := blob(mediaTypeIndex, data)
	id.Annotations = map[string]string{annotationImageName: img.Name}
	data, _ = json.Marshal(ociIndex{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{id}})
	es = append(es, entry{name: "index.json", body: string(data)})
	return tarOf(t, es...)
}

func hexOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func readLayer(t testing.TB, l Layer) string {
	t.Helper()
	rc, err := l.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// checkImages compares what Spool returned with the images written.
func checkImages(t *testing.T, got, want []Image) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d images, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || !bytes.Equal(g.Config, w.Config) || len(g.Layers) != len(w.Layers) {
			t.Errorf("image %d: %q with config %s and %d layers, want %q with %s and %d", i, g.Name, g.Config, len(g.Layers), w.Name, w.Config, len(w.Layers))
			continue
		}
		for j, wl := range w.Layers {
			gl := g.Layers[j]
			if gl.Digest != wl.Digest || gl.Size != wl.Size || readLayer(t, gl) != readLayer(t, wl) {
				t.Errorf("image %q layer %d: %s (%d bytes), want %s (%d)", w.Name, j, gl.Digest, gl.Size, wl.Digest, wl.Size)
			}
		}
	}
}

// entries lists an archive's entry names, and its files' contents.
func entries(t *testing.T, archive []byte) ([]string, map[string][]byte) {
	t.Helper()
	var names []string
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		files[hdr.Name], _ = io.ReadAll(tr)
	}
}

func TestWriteSpoolRoundTrip(t *testing.T) {
	imgs := testImages(t)
	archive := writeArchive(t, "", imgs)
	if again := writeArchive(t, "", imgs); !bytes.Equal(archive, again) {
		t.Error("two Writes of the same images differ")
	}
	names, files := entries(t, archive)
	// 3 distinct layers, 2 configs, 2 manifests; the folders, the
	// layout's files and manifest.json.
	if want := 2 + 7 + 3; len(names) != want {
		t.Errorf("%d entries, want %d (each blob once): %v", len(names), want, names)
	}
	var index ociIndex
	if err := json.Unmarshal(files["index.json"], &index); err != nil {
		t.Fatal(err)
	}
	for i, want := range []map[string]string{
		{annotationImageName: "example.com/a:1", annotationRefName: "1"},
		{annotationImageName: "b:latest", annotationRefName: "latest"},
	} {
		if i >= len(index.Manifests) || !maps.Equal(index.Manifests[i].Annotations, want) {
			t.Errorf("index.json: %+v, want image %d annotated %v", index.Manifests, i, want)
		}
	}
	var m ociManifest
	json.Unmarshal(files[blobPath(index.Manifests[0].Digest)], &m)
	if m.MediaType != mediaTypeManifest || m.Config.MediaType != mediaTypeConfig || len(m.Layers) != 3 || m.Layers[0].MediaType != mediaTypeLayer {
		t.Errorf("manifest of the first image: %+v", m)
	}

	got, err := Spool(bytes.NewReader(archive), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkImages(t, got, imgs)

	t.Run("prefix", func(t *testing.T) {
		names, files := entries(t, writeArchive(t, "images/", imgs))
		for _, n := range names {
			if !strings.HasPrefix(n, "images/") {
				t.Errorf("entry %s lacks the prefix", n)
			}
		}
		if !bytes.Contains(files["images/manifest.json"], []byte(`"Config":"blobs/sha256/`)) {
			t.Errorf("manifest.json's paths are not relative to it: %s", files["images/manifest.json"])
		}
	})
}

func TestSpoolFormats(t *testing.T) {
	imgs := testImages(t)
	t.Run("docker 20.10", func(t *testing.T) {
		got, err := Spool(bytes.NewReader(legacyArchive(t, imgs)), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		checkImages(t, got, imgs)
	})
	t.Run("OCI layout with gzipped layers", func(t *testing.T) {
		got, err := Spool(bytes.NewReader(ociGzipArchive(t, imgs[0])), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		checkImages(t, got, imgs[:1])
	})
	t.Run("several tags", func(t *testing.T) {
		img := imgs[1]
		archive := tarOf(t,
			entry{name: "manifest.json", body: `[{"Config":"c.json","RepoTags":["b:1","b:2"],"Layers":["l1.tar","l2.tar"]}]`},
			entry{name: "./c.json", body: string(img.Config)},
			entry{name: "l1.tar", body: readLayer(t, img.Layers[0])},
			entry{name: "l2.tar", body: "replaced by the next entry"},
			entry{name: "l2.tar", body: readLayer(t, img.Layers[1])})
		got, err := Spool(bytes.NewReader(archive), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		a, b := img, img
		a.Name, b.Name = "b:1", "b:2"
		checkImages(t, got, []Image{a, b})
	})
}

func TestSpoolRefuses(t *testing.T) {
	img := testImages(t)[1]
	layer0, layer1 := readLayer(t, img.Layers[0]), readLayer(t, img.Layers[1])
	config := string(img.Config)
	manifest := func(tags, layers string) entry {
		return entry{name: "manifest.json", body: `[{"Config":"c.json","RepoTags":` + tags + `,"Layers":` + layers + `}]`}
	}
	good := []entry{{name: "c.json", body: config}, {name: "l0", body: layer0}, {name: "l1", body: layer1}}
	with := func(es ...entry) []entry { return append(slices.Clone(good), es...) }
	cases := []struct {
		name    string
		entries []entry
		want    string
	}{
		{"dot dot", with(entry{name: "../x", body: "x"}), `unsafe entry name "../x"`},
		{"absolute", with(entry{name: "/etc/x", body: "x"}), `unsafe entry name "/etc/x"`},
		{"hard link", with(entry{name: "h", typ: tar.TypeLink, link: "l0"}), "h is a hard link"},
		{"device", with(entry{name: "d", typ: tar.TypeChar}), "d is a device"},
		{"symlink out", with(entry{name: "a/s", typ: tar.TypeSymlink, link: "../../etc/passwd"}), "symlink a/s points out of the archive"},
		{"absolute symlink", with(entry{name: "s", typ: tar.TypeSymlink, link: "/etc/passwd"}), "symlink s points to an absolute path"},
		{"symlink loop", with(entry{name: "s", typ: tar.TypeSymlink, link: "t"}, entry{name: "t", typ: tar.TypeSymlink, link: "s"}, manifest(`["b:1"]`, `["s","l1"]`)), "too many symlinks"},
		{"untagged", with(manifest(`null`, `["l0","l1"]`)), "has no name (RepoTags is empty)"},
		{"tag without name", with(manifest(`["latest"]`, `["l0","l1"]`)), `name "latest" is not NAME:TAG`},
		{"missing layer", with(manifest(`["b:1"]`, `["l0","nope"]`)), "layer 1: nope is not in the archive"},
		{"layers swapped", with(manifest(`["b:1"]`, `["l1","l0"]`)), "layer 0 hashes to " + digestOf([]byte(layer1))},
		{"too few layers", with(manifest(`["b:1"]`, `["l0"]`)), "rootfs.diff_ids lists 2 layers, and the manifest 1"},
		{"config without rootfs", []entry{{name: "c.json", body: "{}"}, manifest(`["b:1"]`, `[]`)}, "image config: no rootfs"},
		{"no manifest", good, "no manifest.json or index.json"},
		{"empty manifest", with(entry{name: "manifest.json", body: "[]"}), "manifest.json lists no image"},
		{"two of a name", with(entry{name: "manifest.json", body: `[{"Config":"c.json","RepoTags":["b:1"],"Layers":["l0","l1"]},{"Config":"c.json","RepoTags":["b:1"],"Layers":["l0","l1"]}]`}), `two images are named "b:1"`},
		{"zstd layer", with(entry{name: "z", body: "\x28\xb5\x2f\xfd rest"}, manifest(`["b:1"]`, `["z","l1"]`)), "zstd-compressed layers are not supported"},
		{"index names only a tag", []entry{{name: "index.json", body: `{"manifests":[{"digest":"sha256:00","size":1,"annotations":{"org.opencontainers.image.ref.name":"latest"}}]}`}}, "has no NAME:TAG name"},
		{"blob not matching its digest", []entry{
			{name: "index.json", body: `{"manifests":[{"digest":"` + digestOf([]byte("m")) + `","size":1,"annotations":{"io.containerd.image.name":"b:1"}}]}`},
			{name: blobPath(digestOf([]byte("m"))), body: "n"}}, "hashing to " + digestOf([]byte("n"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Spool(bytes.NewReader(tarOf(t, c.entries...)), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "image archive: ") {
				t.Errorf("Spool: %v, want an error with %q", err, c.want)
			}
		})
	}
	t.Run("not a tar", func(t *testing.T) {
		if _, err := Spool(strings.NewReader(strings.Repeat("not a tar ", 100)), t.TempDir()); err == nil {
			t.Error("Spool of text succeeded")
		}
	})
}

func TestWriteRefuses(t *testing.T) {
	good := testImages(t)[1]
	mod := func(f func(img *Image)) []Image {
		img := good
		img.Layers = slices.Clone(good.Layers)
		f(&img)
		return []Image{img}
	}
	cases := []struct {
		name string
		imgs []Image
		want string
	}{
		{"no tag", mod(func(img *Image) { img.Name = "b" }), `image "b": an image archive names images NAME:TAG`},
		{"digest", mod(func(img *Image) { img.Name = "b@sha256:" + strings.Repeat("0", 64) }), "names images NAME:TAG"},
		{"twice", []Image{good, good}, `image "b:latest": named twice`},
		{"layers not in the config", mod(func(img *Image) { img.Layers = img.Layers[:1] }), "rootfs.diff_ids lists 2 layers, and the image has 1"},
		{"short layer", mod(func(img *Image) { img.Layers[1].Size++ }), `image "b:latest": layer sha256:`},
		{"long layer", mod(func(img *Image) { img.Layers[1].Size-- }), "is not the"},
		{"other bytes", mod(func(img *Image) {
			l := memLayer(bytes.Repeat([]byte{0}, int(img.Layers[1].Size)))
			img.Layers[1].Open = l.Open
		}), "its bytes hash to"},
		{"open fails", mod(func(img *Image) {
			img.Layers[0].Open = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
		}), "gone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Write(tar.NewWriter(io.Discard), "", c.imgs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Write: %v, want an error with %q", err, c.want)
			}
		})
	}
}

func FuzzSpool(f *testing.F) {
	imgs := testImages(f)
	f.Add(writeArchive(f, "", imgs))
	f.Add(legacyArchive(f, imgs))
	f.Add(ociGzipArchive(f, imgs[0]))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Spool(bytes.NewReader(data), t.TempDir())
		if err != nil {
			return
		}
		for _, img := range got {
			if tagOf(img.Name) == "" {
				t.Errorf("image named %q", img.Name)
			}
			diffIDs, err := configDiffIDs(img.Config)
			if err != nil || len(diffIDs) != len(img.Layers) {
				t.Errorf("image %q: config %s with %d layers", img.Name, img.Config, len(img.Layers))
			}
			for _, l := range img.Layers {
				data := readLayer(t, l)
				if digestOf([]byte(data)) != l.Digest || int64(len(data)) != l.Size {
					t.Errorf("image %q: layer %s (%d bytes) holds %d other bytes", img.Name, l.Digest, l.Size, len(data))
				}
			}
		}
	})
}
