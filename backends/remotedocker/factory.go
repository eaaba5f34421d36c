package remotedocker

import (
	"context"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Factory opens the remotedocker backend from a config file's
// [sandbox.remotedocker] table. host and remote_host default to [sandbox]
// docker_host and docker_remote_host (OpenSage writes them there; the
// backend's own table wins). Files on this machine (known_hosts,
// identity_file, ssh_config, sbxd_path) resolve like the file's other host
// paths; remote_socket is a path on the remote host and stays as written.
// Volume host paths are the remote host's (RemoteHostPaths), and so is
// [sandbox] host_shared_mem_dir: it is mounted at /mem/shared from that
// host, where it must exist (it is not made from here).
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
		if c.RemoteHost == "" {
			c.RemoteHost = req.Settings.DockerRemoteHost()
		}
		paths := []backend.HostPathField{
			{Key: "sandbox.remotedocker.known_hosts", Path: &c.KnownHosts},
			{Key: "sandbox.remotedocker.identity_file", Path: &c.IdentityFile},
			{Key: "sandbox.remotedocker.sbxd_path", Path: &c.SbxdPath},
		}
		if c.SSHConfig != "none" {
			paths = append(paths, backend.HostPathField{Key: "sandbox.remotedocker.ssh_config", Path: &c.SSHConfig})
		}
		if err := backend.ResolveHostPaths(req.Settings, paths...); err != nil {
			return nil, err
		}
		return New(c, WithLogger(req.Logger))
	},
	RemoteHostPaths: true,
}
