package lite

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/harness"
	"github.com/sandboxkit/sandboxkit/internal/imagearchive"
)

// snapshotOf snapshots sb as ref after running script in it.
func snapshotOf(t *testing.T, sb *Sandbox, ref, script string, labels map[string]string) string {
	t.Helper()
	mustExec(t, sb, script)
	snap, err := sb.Snapshot(t.Context(), backend.SnapshotRequest{Ref: ref, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	return snap.Ref
}

func saveImages(t *testing.T, b *Backend, refs ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := b.SaveImages(t.Context(), &buf, refs); err != nil {
		t.Fatalf("SaveImages(%q): %v", refs, err)
	}
	return buf.Bytes()
}

func loadImages(t *testing.T, b *Backend, archive []byte) map[string]string {
	t.Helper()
	refs, err := b.LoadImages(t.Context(), bytes.NewReader(archive))
	if err != nil {
		t.Fatalf("LoadImages: %v", err)
	}
	return refs
}

// TestImageArchiveRoundTrip saves a snapshot, loads it into another
// backend and starts a sandbox from it: the files, their modes, owners and
// links, and a deletion, come along.
func TestImageArchiveRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("source"))
	const name = "work/source:1"
	ref := snapshotOf(t, sb, srcSnapshot+name, `set -e
		mkdir -p /data/d && chmod 700 /data/d
		echo hello > /data/f && chmod 640 /data/f && chown 1234:5678 /data/f
		ln -s f /data/link && ln /data/f /data/hard
		echo x > /data/suid && chmod 4755 /data/suid
		rm /etc/group`, map[string]string{"purpose": "test"})
	archive := saveImages(t, b, ref)

	e2 := newTestEnv(t)
	b2 := e2.open(t)
	refs := loadImages(t, b2, archive)
	if want := map[string]string{name: ref}; !maps.Equal(refs, want) {
		t.Fatalf("LoadImages = %v, want %v", refs, want)
	}
	spec := e2.spec("loaded")
	spec.Image = refs[name]
	sb2 := create(t, b2, spec)
	got := mustExec(t, sb2, `cat /data/f; stat -c '%n %a %u:%g' /data/f /data/suid /data/d; readlink /data/link
		[ "$(stat -c %i /data/f)" = "$(stat -c %i /data/hard)" ] && echo hard linked
		[ -e /etc/group ] || echo no /etc/group
		[ -e /etc/passwd ] && echo /etc/passwd`)
	want := "hello\n/data/f 640 1234:5678\n/data/suid 4755 0:0\n/data/d 700 0:0\nf\nhard linked\nno /etc/group\n/etc/passwd\n"
	if got != want {
		t.Errorf("in the loaded image:\n%s\nwant:\n%s", got, want)
	}
	snaps, err := b2.ListSnapshots(t.Context(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 1 || snaps[0].Ref != ref || snaps[0].Labels["purpose"] != "test" || snaps[0].Labels[backend.LabelSnapshotOf] != sb.ID() {
		t.Errorf("ListSnapshots after the load: %+v, want %s labelled as the snapshot was", snaps, ref)
	}

	t.Run("a load replaces a name", func(t *testing.T) {
		rec, err := b2.images.names().Read(name)
		if err != nil {
			t.Fatal(err)
		}
		loadImages(t, b2, archive)
		if again, err := b2.images.names().Read(name); err != nil || again.Key != rec.Key {
			t.Errorf("loading the same image again: record %+v (%v), want the folder %s", again, err, rec.Key)
		}
		snapshotOf(t, sb, ref, "echo changed > /data/f", nil)
		loadImages(t, b2, saveImages(t, b, ref))
		changed := create(t, b2, spec)
		if out := mustExec(t, changed, "cat /data/f"); out != "changed\n" {
			t.Errorf("after loading a changed image of the same name: /data/f holds %q", out)
		}
		if _, err := os.Stat(filepath.Join(e2.cfg.ImageDir, rec.Key)); err != nil {
			t.Errorf("the replaced image's folder went while a sandbox runs on it: %v", err)
		}
	})

	t.Run("refs that name no NAME:TAG", func(t *testing.T) {
		for _, bad := range []string{e.image, "snapshot:untagged", "snapshot:Upper:1"} {
			err := b.SaveImages(t.Context(), &bytes.Buffer{}, []string{bad})
			if err == nil || !strings.Contains(err.Error(), "NAME:TAG") {
				t.Errorf("SaveImages(%q): %v, want an error asking for NAME:TAG", bad, err)
			}
		}
	})
}

// TestLoadImagesKeepsNothingOfABadArchive loads archives that fail, after
// and before their first image is unpacked, and checks that the image
// folder and the snapshots are as before.
func TestLoadImagesKeepsNothingOfABadArchive(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	before := imageDirEntries(t, e.cfg.ImageDir)

	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 2, Typeflag: tar.TypeReg})
	tw.Write([]byte("f\n"))
	tw.Close()
	var archive bytes.Buffer
	tw = tar.NewWriter(&archive)
	imgs := []imagearchive.Image{memImage(t, "good/first:1", layer.Bytes()), memImage(t, "bad/second:1", bytes.Repeat([]byte("not a tar "), 200))}
	if err := imagearchive.Write(tw, "", imgs); err != nil {
		t.Fatal(err)
	}
	tw.Close()

	for _, c := range []struct {
		name, want string
		data       []byte
	}{
		// The first image is unpacked before the second fails.
		{"second image's layer is no tar", `image "bad/second:1": unpacking`, archive.Bytes()},
		{"truncated", "unexpected EOF", archive.Bytes()[:archive.Len()/2]},
		{"no archive", "not a readable tar", []byte("nothing")},
	} {
		t.Run(c.name, func(t *testing.T) {
			refs, err := b.LoadImages(t.Context(), bytes.NewReader(c.data))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("LoadImages = %v, %v; want an error with %q", refs, err, c.want)
			}
			if after := imageDirEntries(t, e.cfg.ImageDir); !slices.Equal(after, before) {
				t.Errorf("the image folder held %v, and after the failed load %v", before, after)
			}
		})
	}
}

// memImage makes an archive image of layers (tar bytes).
func memImage(t *testing.T, name string, layers ...[]byte) imagearchive.Image {
	t.Helper()
	img := imagearchive.Image{Name: name}
	var diffIDs []string
	for _, data := range layers {
		img.Layers = append(img.Layers, imagearchive.Layer{Digest: "sha256:" + hashString(string(data)), Size: int64(len(data)),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
		diffIDs = append(diffIDs, "sha256:"+hashString(string(data)))
	}
	img.Config, _ = json.Marshal(map[string]any{"os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	return img
}

// imageDirEntries lists what the image folder and its snapshot records
// hold.
func imageDirEntries(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, d := range []string{dir, filepath.Join(dir, "snapshots")} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

// withoutEgressNets drops egress networks from PruneCaches' names: they
// are the host's, not one backend's, and PruneCaches also removes those
// whose sandbox's folder is gone, which any run killed on this host
// before may have left.
func withoutEgressNets(names []string) []string {
	return slices.DeleteFunc(names, func(n string) bool { return strings.HasPrefix(n, "egress network ") })
}

// TestPruneTransientImages checks that PruneCaches removes a loaded image
// labelled transient once no sandbox runs on it (and it is older than
// backend.TransientGrace), and keeps other loaded images.
func TestPruneTransientImages(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	sb := create(t, b, e.spec("source"))
	transient := snapshotOf(t, sb, "snapshot:t/transient:1", "echo t > /t", map[string]string{backend.LabelTransient: "1"})
	kept := snapshotOf(t, sb, "snapshot:t/kept:1", "true", nil)
	archive := saveImages(t, b, transient, kept)

	e2 := newTestEnv(t)
	b2 := e2.open(t)
	refs := loadImages(t, b2, archive)
	name := backendkit.SnapshotName(transient)
	prune := func() []string {
		t.Helper()
		names, err := b2.PruneCaches(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		return withoutEgressNets(names)
	}
	if names := prune(); len(names) > 0 {
		t.Errorf("PruneCaches right after the load removed %v, want nothing (the grace)", names)
	}
	rec, err := b2.images.names().Read(name)
	if err != nil {
		t.Fatal(err)
	}
	rec.CreatedAt = rec.CreatedAt.Add(-2 * backend.TransientGrace)
	if err := b2.images.names().Write(rec); err != nil {
		t.Fatal(err)
	}
	spec := e2.spec("on-transient")
	spec.Image = refs[name]
	user := create(t, b2, spec)
	if names := prune(); len(names) > 0 {
		t.Errorf("PruneCaches while a sandbox runs on the transient image removed %v", names)
	}
	if err := user.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	names := prune()
	if want := []string{"snapshot " + transient}; !slices.Equal(names, want) {
		t.Errorf("PruneCaches once no sandbox runs on it = %v, want %v", names, want)
	}
	if _, err := os.Stat(filepath.Join(e2.cfg.ImageDir, rec.Key)); err == nil {
		t.Errorf("the transient image's folder %s is left", rec.Key)
	}
	snaps, _ := b2.ListSnapshots(t.Context(), backend.Filter{})
	if len(snaps) != 1 || snaps[0].Ref != kept {
		t.Errorf("snapshots after the prune: %+v, want only %s", snaps, kept)
	}
}

// TestLoadImagesFromDocker loads what Docker's image save writes (the
// legacy format on Docker 20.10), runs a sandbox on it, and loads a
// snapshot of that sandbox back into Docker.
func TestLoadImagesFromDocker(t *testing.T) {
	cli := dockertest.Client(t)
	dockertest.RequireImage(t, cli, dockertest.BusyboxImage)
	e := newTestEnv(t)
	b := e.open(t)
	rc, err := cli.ImageSave(t.Context(), []string{dockertest.BusyboxImage})
	if err != nil {
		t.Fatal(err)
	}
	refs, err := b.LoadImages(t.Context(), rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	ref, ok := refs[dockertest.BusyboxImage]
	if !ok {
		t.Fatalf("LoadImages = %v, want %s", refs, dockertest.BusyboxImage)
	}
	spec := e.spec("from-docker")
	spec.Image = ref
	sb := create(t, b, spec)
	if out := mustExec(t, sb, "echo hi"); out != "hi\n" {
		t.Errorf("echo hi: %q", out)
	}

	if _, err := exec.LookPath("docker"); err != nil {
		harness.Unavailable(t, dockertest.EnvRequire, "the docker command is missing: %v", err)
	}
	tag := "sandboxkit-test/lite-archive:" + strings.ToLower(rand.Text()[:10])
	snap := snapshotOf(t, sb, srcSnapshot+tag, "echo from lite > /marker", nil)
	f := filepath.Join(t.TempDir(), "archive.tar")
	if err := os.WriteFile(f, saveImages(t, b, snap), 0o600); err != nil {
		t.Fatal(err)
	}
	docker := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("docker", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	docker("load", "-q", "-i", f)
	t.Cleanup(func() { docker("rmi", tag) })
	if out := docker("run", "--rm", tag, "cat", "/marker"); out != "from lite\n" {
		t.Errorf("/marker in Docker: %q", out)
	}
}
