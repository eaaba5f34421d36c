package lite

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
)

// TestConformance runs the backend suite on busybox sandboxes. Every
// backend it opens shares one state folder, as a restarted program would.
func TestConformance(t *testing.T) {
	e := newTestEnv(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return e.open(t) },
		backendtest.WithImage(e.image))
}

// TestFileops runs the fileops table on a busybox sandbox, through the
// native FileSystem and through the generic Exec path.
func TestFileops(t *testing.T) {
	e := newTestEnv(t)
	b := e.open(t)
	spec := e.spec("fileops")
	// Not "/": the table's relative-path cases build expected paths as
	// wd+"/"+name, which is "//name" in the root folder.
	spec.WorkingDir = "/work"
	sb := create(t, b, spec)
	t.Run("native", func(t *testing.T) {
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
	t.Run("generic", func(t *testing.T) {
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return backendtest.HideCapabilities(sb) })
	})
}
