package local_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/local"
)

// TestLocal runs the suite on the local backend. Every backend it opens
// shares one state directory, as a restarted program would.
func TestLocal(t *testing.T) {
	dir := t.TempDir()
	// The suite runs commands as another user; that user must be able to
	// enter the sandboxes' directories, and t.TempDir's folders are 0700.
	for d := dir; d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := local.New(local.Config{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	})
}
