package sbxdbin_test

import (
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
