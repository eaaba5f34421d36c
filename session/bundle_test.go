package session

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
)

// bundleBytes builds a bundle's tar from entries (name, content) in order.
func bundleBytes(t testing.TB, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := writeTarFile(tw, e[0], []byte(e[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func manifestJSON(t testing.TB, m Manifest) string {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func goodManifest() Manifest {
	return Manifest{Version: ManifestVersion, Session: "s1", Backend: "native", ImageFolder: bundleImages,
		Sandboxes: map[string]ManifestSandbox{"main": {Type: "main", Image: "sandboxkit-bundle/s1-main:1"}},
		Volumes:   map[string]ManifestVolume{"shared": {Target: "/shared", Archive: "volumes/shared.tar"}}}
}

// readBundleHead reads what Restore reads before the images' load: the
// manifest, the volume archives and the first image entry's header.
func readBundleHead(tr *tar.Reader, dir string) (*Manifest, *tar.Header, error) {
	m, err := readBundle(tr, dir)
	if err != nil {
		return nil, nil, err
	}
	first, err := nextImageEntry(tr)
	if err != nil {
		return nil, nil, err
	}
	return m, first, nil
}

func TestReadBundle(t *testing.T) {
	dir := t.TempDir()
	data := bundleBytes(t,
		[2]string{bundleManifestName, manifestJSON(t, goodManifest())},
		[2]string{"volumes/shared.tar", "volume bytes"},
		[2]string{"images/oci-layout", `{"imageLayoutVersion":"1.0.0"}`})
	m, first, err := readBundleHead(tar.NewReader(bytes.NewReader(data)), dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.Name != "images/oci-layout" || m.Sandboxes["main"].Image != "sandboxkit-bundle/s1-main:1" {
		t.Errorf("readBundle: first %q, manifest %+v", first.Name, m)
	}
	if got := m.archivePath(m.Volumes["shared"]); got != filepath.Join(dir, "volumes", "shared.tar") {
		t.Errorf("the shared volume's archive resolves to %s", got)
	}
}

// Every malformed bundle is refused before anything is loaded, with an
// error that says what is wrong.
func TestReadBundleRefuses(t *testing.T) {
	noImages := goodManifest()
	noImages.ImageFolder = ""
	escape := goodManifest()
	escape.Volumes = map[string]ManifestVolume{"shared": {Target: "/shared", Archive: "volumes/../../etc/passwd"}}
	newer := goodManifest()
	newer.Version = ManifestVersion + 1
	for _, c := range []struct {
		name    string
		entries [][2]string
		want    string
	}{
		{"empty", nil, "not a bundle"},
		{"other first entry", [][2]string{{"images/oci-layout", "{}"}}, "first entry"},
		// Named right but too big: the error says so, not that the name is wrong.
		{"manifest too big", [][2]string{{bundleManifestName, strings.Repeat(" ", maxManifestSize+1)}},
			fmt.Sprintf("manifest %s is %d bytes, more than the limit of %d bytes", bundleManifestName, maxManifestSize+1, maxManifestSize)},
		{"manifest not JSON", [][2]string{{bundleManifestName, "{"}}, bundleManifestName},
		{"checkpoint manifest", [][2]string{{bundleManifestName, manifestJSON(t, noImages)}}, "sbx up --from-manifest"},
		{"newer format", [][2]string{{bundleManifestName, manifestJSON(t, newer)}}, "newer"},
		{"volume outside", [][2]string{{bundleManifestName, manifestJSON(t, escape)}}, "is not a file of volumes/"},
		{"volume missing", [][2]string{{bundleManifestName, manifestJSON(t, goodManifest())}, {"images/oci-layout", "{}"}}, "volumes/shared.tar"},
		{"unexpected entry", [][2]string{{bundleManifestName, manifestJSON(t, goodManifest())}, {"volumes/other.tar", ""}}, `unexpected entry "volumes/other.tar"`},
		{"no images", [][2]string{{bundleManifestName, manifestJSON(t, goodManifest())}, {"volumes/shared.tar", ""}}, "no images"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := readBundleHead(tar.NewReader(bytes.NewReader(bundleBytes(t, c.entries...))), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, backend.ErrInvalidConfig) {
				t.Errorf("readBundle: %v, want an invalid-config error containing %q", err, c.want)
			}
		})
	}
}

// FuzzReadBundle: whatever the bundle, readBundle does not panic and
// writes nothing outside its folder's volumes/.
func FuzzReadBundle(f *testing.F) {
	f.Add(bundleBytes(f,
		[2]string{bundleManifestName, manifestJSON(f, goodManifest())},
		[2]string{"volumes/shared.tar", "x"},
		[2]string{"images/index.json", "{}"}))
	f.Add(bundleBytes(f, [2]string{bundleManifestName, "{}"}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		readBundleHead(tar.NewReader(bytes.NewReader(data)), dir)
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			rel, _ := filepath.Rel(dir, p)
			if rel != "." && rel != "volumes" && filepath.Dir(rel) != "volumes" {
				t.Errorf("readBundle wrote %s", rel)
			}
			return nil
		})
	})
}

// PruneTemp removes the temporary folders of bundles whose process is
// gone and keeps this process's and folders of other names.
func TestPruneTemp(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	mine, err := bundleTemp()
	if err != nil {
		t.Fatal(err)
	}
	// No process 999999999 started 1 tick after boot: a gone process's.
	dead := filepath.Join(os.TempDir(), bundleTempPrefix+"999999999.1-abc")
	other := filepath.Join(os.TempDir(), "sbx-bundle-notours")
	for _, d := range []string{dead, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dead, "volume.tar"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := PruneTemp(true); err != nil || len(got) != 1 || got[0] != dead {
		t.Fatalf("PruneTemp(dry run) = %v, %v; want [%s]", got, err, dead)
	}
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("a dry run removed %s: %v", dead, err)
	}
	if got, err := PruneTemp(false); err != nil || len(got) != 1 || got[0] != dead {
		t.Fatalf("PruneTemp = %v, %v; want [%s]", got, err, dead)
	}
	for p, want := range map[string]bool{dead: false, mine: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", p, err == nil, want)
		}
	}
}
