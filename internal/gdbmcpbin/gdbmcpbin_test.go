package gdbmcpbin_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/gdbmcpbin"
)

// The committed binaries must be what `go generate` makes from the current
// cmd/gdbmcp, or sandboxes would run stale code.
func TestEmbeddedBinariesAreCurrent(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no Go toolchain on PATH: cannot rebuild gdbmcp to compare")
	}
	v, err := exec.Command(goBin, "env", "GOVERSION").Output()
	if err != nil {
		t.Fatalf("go env GOVERSION: %v", err)
	}
	if got, want := strings.TrimSpace(string(v)), gdbmcpbin.GoVersion(); got != want {
		// Another Go release makes other bytes from the same source.
		t.Skipf("embedded gdbmcp was built with %s, this toolchain is %s: run `go generate ./internal/gdbmcpbin` to compare", want, got)
	}
	if testing.Short() {
		t.Skip("-short: skipping the gdbmcp rebuild")
	}
	out := t.TempDir()
	cmd := exec.Command(goBin, "run", "gen.go", "-o", out)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go run gen.go: %v", err)
	}
	for _, arch := range gdbmcpbin.Arches() {
		name := "gdbmcp-linux-" + arch + ".gz"
		fresh, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		committed, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fresh, committed) {
			t.Errorf("%s is stale: run `go generate ./internal/gdbmcpbin` and commit the result", name)
		}
	}
}

func TestEmbeddedIsAnELF(t *testing.T) {
	for _, arch := range gdbmcpbin.Arches() {
		b, err := gdbmcpbin.Embedded(arch)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Errorf("%s: not an ELF binary", arch)
		}
	}
	if _, err := gdbmcpbin.Embedded("mips"); err == nil || !strings.Contains(err.Error(), gdbmcpbin.EnvPath) {
		t.Errorf("unknown arch: got %v, want an error naming %s", err, gdbmcpbin.EnvPath)
	}
}

func TestFindPrefersPathThenEnv(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.WriteFile(a, []byte("from-config"), 0o755)
	os.WriteFile(b, []byte("from-env"), 0o755)
	t.Setenv(gdbmcpbin.EnvPath, b)
	got, err := gdbmcpbin.Find(a, "amd64")
	if err != nil || string(got) != "from-config" {
		t.Errorf("Find(path) = %q, %v", got, err)
	}
	got, err = gdbmcpbin.Find("", "amd64")
	if err != nil || string(got) != "from-env" {
		t.Errorf("Find(env) = %q, %v", got, err)
	}
	t.Setenv(gdbmcpbin.EnvPath, "")
	got, err = gdbmcpbin.Find("", "amd64")
	if err != nil || !bytes.HasPrefix(got, []byte("\x7fELF")) {
		t.Errorf("Find(embedded): %v", err)
	}
}
