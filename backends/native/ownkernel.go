package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// A sandbox under gVisor has a kernel of its own, with its own view of the
// container's files: a tmpfs of its own at /tmp, and file contents it
// caches. The engine's archive API works on the host's copy of the root
// file system, so it would miss files the sandbox sees and write files the
// sandbox does not: its file operations run in the sandbox instead (sbxd
// and, for archives and writes, sh and tar, as root like the engine's).

// ownKernel reports whether s runs under gVisor.
func (s *Sandbox) ownKernel() bool {
	return backend.RuntimeIsolation(s.runtime) == backend.IsolationGVisor
}

// asRoot runs a sandbox's commands as root, as the engine's file
// operations act, and hides its capabilities but Exec.
type asRoot struct{ backend.Sandbox }

func (r asRoot) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if req.User == "" {
		req.User = "0"
	}
	return r.Sandbox.Exec(ctx, req)
}

// writeInSandbox is WriteFile by sh in the sandbox.
func (s *Sandbox) writeInSandbox(ctx context.Context, name, abs string, r io.Reader, perm fs.FileMode) error {
	return renamed(sbfiles.WriteFile(ctx, asRoot{s}, abs, r, perm), name)
}

// putInSandbox is PutArchive by tar in the sandbox.
func (s *Sandbox) putInSandbox(ctx context.Context, dir, abs string, tarStream io.Reader) error {
	fi, err := s.statInSandbox(ctx, dir, abs)
	if err != nil {
		return reop("put", dir, err)
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "put", Path: dir, Err: fmt.Errorf("%s is not a directory", dir)}
	}
	res, err := asRoot{s}.Exec(ctx, backend.ExecRequest{
		Cmd:   []string{"tar", "-x", "-p", "-f", "-", "-C", abs},
		Stdin: tarStream, OutputLimit: 64 << 10,
	})
	if err != nil {
		return err
	}
	return tarFailed("put", dir, res)
}

// getInSandbox is GetArchive by tar in the sandbox: name's entry (and, for
// a folder, the tree under it) named by name's last element.
func (s *Sandbox) getInSandbox(ctx context.Context, name, abs string) (io.ReadCloser, error) {
	parent, base := path.Dir(abs), path.Base(abs)
	if abs == "/" {
		parent, base = "/", "."
	}
	script := `cd -- "$1" || exit 102; [ -e "$2" ] || [ -L "$2" ] || exit 102; echo ok; exec tar -c -f - -- "$2"`
	return sbfiles.ScriptOutput(ctx, asRoot{s}, "get", name, []string{"sh", "-c", script, "sh", parent, base}, tarFailed)
}

// tarFailed is the error of a tar in the sandbox: its file errors as
// sbfiles' scripts report them; a missing tar or sh is errors.ErrUnsupported,
// so callers take their generic paths.
func tarFailed(op, name string, res backend.ExecResult) error {
	switch res.ExitCode {
	case 0:
		return nil
	case 126, 127:
		return &fs.PathError{Op: op, Path: name, Err: fmt.Errorf("%w: no tar in the sandbox's image (gVisor sandboxes move archives with it): %s",
			errors.ErrUnsupported, strings.TrimSpace(string(res.Stderr)))}
	}
	return sbfiles.ScriptError(op, name, res)
}
