package lite

import (
	"context"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Factory opens the lite backend from a config file's [sandbox.lite] table
// (or [sandbox.agentdocker-lite], OpenSage's name for it). Its folders, and
// a runtime given as a path, resolve like the file's other host paths;
// [sandbox] default_image is the image of sandboxes that name none.
// backend = "auto" chooses it when no Docker daemon answers and runc can
// run here (as root, or rootless).
var Factory = backend.Factory{
	Name:      Name,
	Aliases:   []string{"agentdocker-lite"},
	NewConfig: func() any { return new(Config) },
	Open: func(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
		c, err := backend.TableAs[Config](Name, req.Table)
		if err != nil {
			return nil, err
		}
		paths := []backend.HostPathField{
			{Key: "sandbox.lite.state_dir", Path: &c.StateDir},
			{Key: "sandbox.lite.image_dir", Path: &c.ImageDir},
			{Key: "sandbox.lite.runtime_root", Path: &c.RuntimeRoot},
			{Key: "sandbox.lite.sbxd_path", Path: &c.SbxdPath},
		}
		// A runtime given as a path (not a bare name) resolves too.
		if strings.Contains(c.Runtime, "/") {
			paths = append(paths, backend.HostPathField{Key: "sandbox.lite.runtime", Path: &c.Runtime})
		}
		if err := backend.ResolveHostPaths(req.Settings, paths...); err != nil {
			return nil, err
		}
		c.DefaultImage = req.Settings.DefaultImage()
		return New(c, WithLogger(req.Logger))
	},
	AutoRank: 20, // New checks privileges and finds the runtime
}
