package local

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Factory opens the local backend from a config file's [sandbox.local]
// table; state_dir resolves like the file's other host paths. Sandboxes
// are host processes without a mount namespace, so [sandbox]
// host_shared_mem_dir is refused (NoHostFolders).
var Factory = backend.Factory{
	Name:      Name,
	NewConfig: func() any { return new(Config) },
	Open: func(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
		c, err := backend.TableAs[Config](Name, req.Table)
		if err != nil {
			return nil, err
		}
		if c.StateDir, err = req.Settings.HostPath("sandbox.local.state_dir", c.StateDir); err != nil {
			return nil, err
		}
		return New(c, WithLogger(req.Logger))
	},
	AutoRank:      10, // the last resort of backend = "auto", with config.LocalNotice
	NoHostFolders: true,
}
