// Package atomicfile replaces a file's content in one step: the bytes go
// to a temporary file beside the target, which is then renamed over it.
// It is a leaf of the standard library, so the in-sandbox agent
// (internal/egressctl's policy file) and the host's state folders
// (internal/statedir) share it without the agent linking the host's
// packages.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write writes data to a temporary file beside p and renames it over p, so
// a reader sees the old or the new content, never a mix. Missing parent
// directories are made (mode 0755). A symlink at p is replaced, not
// followed.
func Write(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
