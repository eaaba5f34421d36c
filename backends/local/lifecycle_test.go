package local_test

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/statedir/statedirtest"
)

// A removal or creation killed half-way stays visible and Destroy finishes
// it (it used to delete meta.json first, leaving folders nothing saw).
func TestLifecycleRecords(t *testing.T) {
	b := newBackend(t)
	statedirtest.Run(t, b, b.StateDir(), backend.Spec{Name: "life"})
}
