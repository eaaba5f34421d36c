package sbxdbin_test

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
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

// The agent (cmd/sbxd) imports nothing of the host's side: not package
// backend (the contract; the agent shares its sentinels through
// internal/errdefs, and the enforcer's wire types are its own), backendkit,
// a backend, internal/statedir, internal/sbxdbin or internal/embedbin, nor
// package sbxd, the client (the agent is package sbxd/agent, the types both
// ends share internal/sbxdwire). Being in the agent's import graph is
// enough for a package to move the agent's bytes: before sbxd was split,
// backend was there through the client's half, and adding a field of a
// named type to backend.Info moved bytes of the agent's function table
// (same functions, files and lines) and forced a regeneration. So the
// graph is checked, and then the embedded bytes: package paths and source
// file names stay in a stripped Go binary (in the function table and type
// names), so they tell what was linked.
func TestAgentLinksNoBackend(t *testing.T) {
	t.Run("import graph", func(t *testing.T) {
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Skip("no Go toolchain on PATH: cannot list the agent's imports")
		}
		for _, arch := range embedbin.Arches() {
			// As embedbin.Build builds it.
			cmd := exec.Command(goBin, "list", "-deps", module+"/cmd/sbxd")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps cmd/sbxd (%s): %v", arch, err)
			}
			deps := strings.Fields(string(out))
			for _, want := range []string{module + "/cmd/sbxd", module + "/sbxd/agent"} {
				if !slices.Contains(deps, want) {
					t.Fatalf("%s: the agent's imports lack %s: the check below would prove nothing", arch, want)
				}
			}
			for _, p := range deps {
				if hostSide(p) {
					t.Errorf("%s: the agent imports %s (go list -deps %s/cmd/sbxd)", arch, p, module)
				}
			}
		}
	})
	t.Run("embedded bytes", func(t *testing.T) {
		for _, arch := range embedbin.Arches() {
			bin, err := sbxdbin.Lookup("", arch)
			if err != nil {
				t.Fatal(err)
			}
			data, err := bin.Bytes()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte("sandboxkit/sbxd/agent.")) {
				t.Fatalf("the %s agent holds no sandboxkit/sbxd/agent. name: the check below would prove nothing", arch)
			}
			for _, pkg := range []string{"sandboxkit/backend.", "sandboxkit/backend/", "sandboxkit/backendkit", "sandboxkit/backends/",
				"sandboxkit/sbxd.", "sandboxkit/internal/statedir", "sandboxkit/internal/sbxdbin", "sandboxkit/internal/embedbin"} {
				if i := bytes.Index(data, []byte(pkg)); i >= 0 {
					end := min(len(data), i+80)
					t.Errorf("the %s agent links %s: %q", arch, strings.TrimSuffix(pkg, "."), data[i:end])
				}
			}
		}
	})
}

const module = "github.com/sandboxkit/sandboxkit"

// hostSide reports whether the package p belongs to the host's side, which
// the agent must not import.
func hostSide(p string) bool {
	for _, pkg := range []string{"backend", "backendkit", "backends", "internal/statedir", "internal/sbxdbin", "internal/embedbin"} {
		if p == module+"/"+pkg || strings.HasPrefix(p, module+"/"+pkg+"/") {
			return true
		}
	}
	return p == module+"/sbxd" // the client; sbxd/agent is the agent
}
