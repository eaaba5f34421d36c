package lite

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// Freezes that outlive their process.
//
// Snapshot and Fork freeze a running sandbox while they copy its files
// (freeze). Before it freezes, the process writes frozenFile into the
// sandbox's folder: "cgroup" or "pause" (how it froze) and its owner
// string; it removes the file once it has thawed the sandbox. A process
// killed in between leaves the sandbox frozen and the file behind: Get and
// PruneCaches (sbx gc) thaw a sandbox whose file names an owner that is
// gone, so that nothing stays frozen after its freezer died.
const frozenFile = "frozen-by"

// markFrozen records that this process freezes the sandbox in dir, how.
func markFrozen(dir, how string) error {
	return os.WriteFile(filepath.Join(dir, frozenFile), []byte(how+" "+owner.Self()+"\n"), 0o600)
}

// unmarkFrozen removes the record of markFrozen.
// A record that cannot be removed names this process, and is taken for
// an orphan's once it has ended: the sandbox is thawed already then.
func unmarkFrozen(dir string) { os.Remove(filepath.Join(dir, frozenFile)) }

// thawOrphan thaws the sandbox when its folder holds a freeze record of a
// process that is gone, and reports whether it did.
func (s *Sandbox) thawOrphan(ctx context.Context) bool {
	data, err := os.ReadFile(filepath.Join(s.dir, frozenFile))
	if err != nil {
		return false
	}
	how, who, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	if alive, known := owner.Alive(who); alive || !known {
		return false
	}
	m, err := s.meta()
	if err != nil {
		return false
	}
	switch how {
	case "cgroup":
		err = freezeCgroup(m, false)
	default:
		err = s.setPaused(context.WithoutCancel(ctx), false)
	}
	if err != nil {
		s.b.log.Warn("thawing a sandbox whose freezer is gone", "sandbox", s.id, "err", err)
		return false
	}
	s.b.log.Info("thawed a sandbox whose freezer is gone", "sandbox", s.id, "freezer", who)
	unmarkFrozen(s.dir)
	return true
}
