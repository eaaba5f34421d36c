package sbxdbin_test

import (
	"bytes"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/embedbin"
	"github.com/sandboxkit/sandboxkit/internal/sbxdbin"
)

// The committed binaries must be what `go generate` makes from the current
// cmd/sbxd, or sandboxes would run stale code.
func TestEmbeddedBinariesAreCurrent(t *testing.T) { embedbin.CheckFresh(t, sbxdbin.Set()) }

func TestFind(t *testing.T) { embedbin.CheckFind(t, sbxdbin.Set()) }

func TestNormalizeArch(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "amd64": "amd64", "riscv64": "riscv64"} {
		if got := sbxdbin.NormalizeArch(in); got != want {
			t.Errorf("NormalizeArch(%q) = %q, want %q", in, got, want)
		}
	}
}

// The agent links no code of package backend (it shares the contract's
// sentinels through internal/errdefs and the enforcer's wire types are its
// own). Package paths and source file names stay in a stripped Go binary
// (in the function table and type names), so the bytes tell. backend is
// still in the agent's import graph, through package sbxd, which holds the
// host's client too: adding a field of a named type to backend.Info moved
// bytes of the agent's function table (same functions, files and lines)
// and forced a regeneration; splitting sbxd's agent half from its client
// half would end that.
func TestAgentLinksNoBackend(t *testing.T) {
	for _, arch := range embedbin.Arches() {
		bin, err := sbxdbin.Lookup("", arch)
		if err != nil {
			t.Fatal(err)
		}
		data, err := bin.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("sandboxkit/sbxd.")) {
			t.Fatalf("the %s agent holds no sandboxkit/sbxd. name: the check below would prove nothing", arch)
		}
		for _, pkg := range []string{"sandboxkit/backend.", "sandboxkit/backend/"} {
			if i := bytes.Index(data, []byte(pkg)); i >= 0 {
				end := min(len(data), i+80)
				t.Errorf("the %s agent links package backend: %q", arch, data[i:end])
			}
		}
	}
}
