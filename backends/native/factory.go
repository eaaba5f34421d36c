package native

import (
	"context"
	"fmt"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Factory opens the native backend from a config file's [sandbox.native]
// table. Its host defaults to [sandbox] docker_host (OpenSage's key; an
// ssh:// host is refused with a pointer to remotedocker), else DOCKER_HOST;
// sbxd_path resolves like the file's other host paths. backend = "auto"
// prefers it when its daemon (Docker, or Podman's Docker API) answers.
var Factory = backend.Factory{
	Name:        Name,
	RuntimeKind: backend.RuntimeKindDocker,
	NewConfig:   func() any { return new(Config) },
	Open: func(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
		c, err := backend.TableAs[Config](Name, req.Table)
		if err != nil {
			return nil, err
		}
		if c.Host == "" {
			c.Host = req.Settings.DockerHost()
		}
		if c.SbxdPath, err = req.Settings.HostPath("sandbox.native.sbxd_path", c.SbxdPath); err != nil {
			return nil, err
		}
		return New(c, WithLogger(req.Logger))
	},
	AutoRank: 30,
	Probe: func(ctx context.Context, b backend.Backend) error {
		nb, ok := b.(*Backend)
		if !ok {
			return fmt.Errorf("native probe: got a %T", b)
		}
		if _, err := nb.cli.Ping(ctx); err != nil {
			return nb.translate(err)
		}
		return nil
	},
}
