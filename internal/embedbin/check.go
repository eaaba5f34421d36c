package embedbin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CheckFresh fails t when the committed binaries of s (in the current
// directory: the owning package's test) are not what Build makes from the
// current source, so sandboxes never run stale code. It skips without a Go
// toolchain, with another Go release than the one recorded, and in -short.
func CheckFresh(t *testing.T, s *Set) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no Go toolchain on PATH: cannot rebuild %s to compare", s.Name)
	}
	v, err := exec.Command(goBin, "env", "GOVERSION").Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	regen := "go generate ./internal/" + s.Name + "bin"
	if got, want := strings.TrimSpace(string(v)), s.GoVersion(); got != want {
		// Another Go release makes other bytes from the same source.
		t.Skipf("embedded %s was built with %s, this toolchain is %s: run `%s` to compare", s.Name, want, got, regen)
	}
	if testing.Short() {
		t.Skipf("-short: skipping the %s rebuild", s.Name)
	}
	out := t.TempDir()
	if err := Build(s.Name, out); err != nil {
		t.Fatal(err)
	}
	for _, name := range append(s.fileNames(), SumsFile) {
		fresh, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s is stale: run `%s` and commit the result", name, regen)
		}
	}
}

func (s *Set) fileNames() []string {
	var names []string
	for _, arch := range Arches() {
		names = append(names, s.FileName(arch))
	}
	return names
}

// CheckFind tests s's lookup order (config path, then its variable, then the
// embedded ELF binary) and its error for an architecture it lacks.
func CheckFind(t *testing.T, s *Set) {
	t.Helper()
	for _, arch := range Arches() {
		b, err := s.Embedded(arch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Errorf("%s: not an ELF binary", arch)
		}
	}
	for _, arch := range Arches() {
		// The identity recorded at build time is the embedded bytes'.
		id, err := s.Lookup("", arch)
		if err != nil {
			t.Fatal(err)
		}
		b, err := id.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if got := binaryOf(b); got.Sum != id.Sum || got.Size != id.Size {
			t.Errorf("%s: %s records %s %d, the bytes are %s %d", arch, SumsFile, id.Sum, id.Size, got.Sum, got.Size)
		}
	}
	if _, err := s.Lookup("", "mips"); err == nil || !strings.Contains(err.Error(), s.EnvPath) {
		t.Errorf("Lookup(mips): got %v, want an error naming %s", err, s.EnvPath)
	}
	if _, err := s.Embedded("mips"); err == nil || !strings.Contains(err.Error(), s.EnvPath) {
		t.Errorf("unknown arch: got %v, want an error naming %s", err, s.EnvPath)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("from-config"), 0o755)
	os.WriteFile(b, []byte("from-env"), 0o755)
	t.Setenv(s.EnvPath, b)
	got, err := s.Find(a, "amd64")
	if err != nil || string(got) != "from-config" {
		t.Errorf("Find(path) = %q, %v", got, err)
	}
	got, err = s.Find("", "amd64")
	if err != nil || string(got) != "from-env" {
		t.Errorf("Find(env) = %q, %v", got, err)
	}
	if id, err := s.Lookup(a, "amd64"); err != nil || id.Sum != binaryOf([]byte("from-config")).Sum || id.Size != int64(len("from-config")) {
		t.Errorf("Lookup(path) = %+v, %v", id, err)
	}
	t.Setenv(s.EnvPath, "")
	got, err = s.Find("", "amd64")
	if err != nil || !bytes.HasPrefix(got, []byte("\x7fELF")) {
		t.Errorf("Find(embedded): %v", err)
	}
	if _, err := s.Find(filepath.Join(dir, "missing"), "amd64"); err == nil || !strings.Contains(err.Error(), s.PathKey) {
		t.Errorf("Find(missing path): %v, want an error naming %s", err, s.PathKey)
	}
}
