package gdbmcpbin_test

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/embedbin"
	"github.com/sandboxkit/sandboxkit/internal/gdbmcpbin"
)

// The committed binaries must be what `go generate` makes from the current
// cmd/gdbmcp, or sandboxes would run stale code.
func TestEmbeddedBinariesAreCurrent(t *testing.T) { embedbin.CheckFresh(t, gdbmcpbin.Set()) }

func TestFind(t *testing.T) { embedbin.CheckFind(t, gdbmcpbin.Set()) }
