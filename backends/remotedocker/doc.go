// Package remotedocker is the sandboxkit backend that runs sandboxes on
// another machine's Docker Engine, so that an agent moves from a laptop to a
// GPU server by changing two config keys:
//
//	[sandbox]
//	backend = "remotedocker"
//	docker_host = "ssh://me@gpu-box"
//
// It is the native backend's engine code (containers, sbxd injection, exec,
// files through the archive API, builds, labels) over another transport, so
// sandboxes behave exactly as on native; this package adds the connection,
// port endpoints that work from this machine, and errors that name it.
//
// # Connection
//
// An ssh:// docker_host is reached through one SSH connection
// (golang.org/x/crypto/ssh) that carries every Engine API request as a
// Unix-socket channel (direct-streamlocal@openssh.com) to the engine's
// socket on the remote, so the remote needs only sshd and Docker: no docker
// CLI, no open Docker port. The host part may be an alias of ~/.ssh/config,
// whose HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump,
// HostKeyAlias, UserKnownHostsFile, GlobalKnownHostsFile, ConnectTimeout,
// ServerAliveInterval and ServerAliveCountMax apply (read with
// github.com/kevinburke/ssh_config; ProxyCommand is refused).
//
// Authentication offers the ssh-agent's keys (SSH_AUTH_SOCK), then
// identity_file, then the config's IdentityFile entries or ~/.ssh/id_ed25519,
// id_ecdsa and id_rsa. Keys with a passphrase must be in the agent. A
// refused login names the keys tried and how to install one.
//
// Host keys are checked against known_hosts (the config's
// UserKnownHostsFile, else ~/.ssh/known_hosts; the known_hosts key; and
// /etc/ssh/ssh_known_hosts). An unknown or changed key is refused with a
// *HostKeyError whose message has the offered key's SHA256 fingerprint and
// the exact known_hosts line (or ssh-keyscan / ssh-keygen -R command) that
// fixes it. insecure_ignore_host_key = true accepts any key, for throwaway
// hosts only, and logs a warning on every connection.
//
// The connection is made on the first call and kept up with keepalives
// (ServerAliveInterval, default 15s; after ServerAliveCountMax unanswered,
// default 3, it counts as dropped). When it drops, calls that were using it
// fail with a *DroppedError wrapping backend.ErrUnavailable (an exec's
// output is then incomplete and its command may still run on the remote),
// and the next call connects again. A remote without a Docker socket, an
// sshd that forbids socket forwarding, an unreachable host and a refused
// login each have their own message.
//
// A tcp:// docker_host (e.g. tcp://gpu-box:2376) is spoken to directly,
// with TLS when DOCKER_CERT_PATH is set (ca.pem, cert.pem, key.pem; the
// server is verified when DOCKER_TLS_VERIFY is set), as the docker CLI does.
// When docker_host is empty, DOCKER_HOST is used.
//
// # Configuration
//
// Config is the [sandbox.remotedocker] table; docker_host and
// docker_remote_host may also come from [sandbox], as in OpenSage's files:
//
//	[sandbox.remotedocker]
//	docker_host = "ssh://me@gpu-box:22"   # or tcp://gpu-box:2376; "": DOCKER_HOST
//	docker_remote_host = ""               # where published ports are dialled
//	                                      # ("": docker_host's host, after HostName)
//	ports = "remote"                      # or "tunnel"
//	remote_socket = "/var/run/docker.sock"
//	known_hosts = ""                      # checked besides ~/.ssh/known_hosts
//	identity_file = ""                    # tried after the agent's keys
//	ssh_config = ""                       # "": ~/.ssh/config; "none"
//	insecure_ignore_host_key = false
//	# and native's: pull_policy, pids_limit, allow_new_privileges, runtime, sbxd_path
//
// # Ports
//
// In "remote" mode a published port whose entry names no host address is
// bound on all the remote's interfaces with a port the engine picks, and
// Endpoint returns docker_remote_host:port. In "tunnel" mode it is bound on
// the remote's 127.0.0.1, and Endpoint returns a 127.0.0.1 address on this
// machine whose connections go through the SSH connection (for remotes
// behind a firewall); the listener lives until Destroy or Close. A port an
// entry binds to the remote's loopback is tunnelled in either mode.
// Readiness probes that use Endpoint take the same path. A host reached
// through ProxyJump is usually not reachable directly: set
// docker_remote_host, or use "tunnel" (New logs a warning otherwise).
//
// # What lives where
//
// Everything is on the remote engine: images (pulled there, or built there
// from a build context uploaded through the Engine API), containers,
// volumes, checkpoints, snapshots (images committed there) and forks
// (containers started there from one commit of the parent). Files move
// through the archive API over the same connection. Nothing falls back to
// the local daemon. Bind volumes name paths on the remote host.
//
// Sandboxes carry native's labels (including sandboxkit.backend=native, as
// native writes them), so Get, List, TTL expiry and sbx gc work from the
// remote engine alone; Info.Backend says remotedocker.
package remotedocker
