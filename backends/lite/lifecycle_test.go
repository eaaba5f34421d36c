package lite

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/statedir/statedirtest"
)

// A removal or creation killed half-way stays visible and Destroy finishes
// it (it used to delete meta.json first, so Get could not find a
// half-removed sandbox to finish).
func TestLifecycleRecords(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	statedirtest.Run(t, b, b.StateDir(), e.spec("life"))
}
