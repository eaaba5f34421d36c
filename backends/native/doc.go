// Package native is the sandboxkit backend that runs sandboxes as
// containers on a Docker Engine API: the local daemon by default,
// DOCKER_HOST or Config.Host otherwise, with the client negotiating the API
// version (tested against Docker Engine 20.10).
//
// # Configuration
//
// Config is the [sandbox.native] table; every key is optional:
//
//	[sandbox.native]
//	docker_host = "unix:///var/run/docker.sock" # default: DOCKER_HOST, else the local socket
//	pull_policy = "missing"    # "missing" | "always" | "never"
//	ports = "dynamic"          # 127.0.0.1 with engine-chosen host ports, or
//	                           # "loopback": a 127.x.y.z of the session's own, ports unchanged
//	pids_limit = 4096          # when an entry sets none; negative: unlimited
//	allow_new_privileges = false  # true drops the default no-new-privileges
//	runtime = ""               # OCI runtime when an entry names none, e.g. "runsc"
//	sbxd_path = ""             # a static sbxd to inject instead of the embedded one
//
// Progress of image pulls is reported through WithPullProgress; logging
// goes to WithLogger's logger; WithDialContext reaches the engine over
// another transport (remotedocker).
//
// # Sandboxes
//
// Each sandbox is one container named sbx-<session>-<name>-<id>, carrying
// the labels of package backend (sandboxkit.id, .backend, .session, .name,
// .owner, .expires-at) plus sandboxkit.native.workdir; Get and List find
// containers by those labels, so nothing is kept on the host. Containers
// are never auto-removed: Destroy force-removes the container and its
// anonymous volumes, and is idempotent.
//
// Every sandbox gets sbxd (cmd/sbxd; the binary is embedded for
// linux/amd64 and linux/arm64, see internal/sbxdbin) at /.sbx/sbxd, from a
// read-only engine volume shared by all sandboxes, sandboxkit-sbxd-<hash>,
// made and filled through the archive API on first use (no image changes,
// no registry). Where that volume cannot be made, sbxd is copied into each
// container before it starts instead. sbxd init is PID 1: it reaps orphans
// and forwards stop signals. What it runs follows OpenSage's entry
// semantics: no command keeps the sandbox alive (an image needs no shell,
// not even a sleep binary); Spec.ImageCommand (command = "") runs the
// image's ENTRYPOINT and CMD; a Command runs after the image's ENTRYPOINT,
// as `docker run IMAGE CMD...` would.
//
// Defaults that differ from plain docker run: a pids limit of 4096 and the
// no-new-privileges security option, both configurable.
//
// # Exec
//
// Every command runs through the engine's exec API as
//
//	/.sbx/sbxd exec --id EXECID [--timeout D] -- ARGV...
//
// sbxd puts ARGV in a process group of its own with SBX_EXEC_ID=EXECID in
// its environment and, on timeout, kills the group and every process
// carrying the marker, inside the container, then exits 124. Cancelling the
// context runs a second exec, `sbxd kill EXECID`. Neither needs host PIDs,
// so both work when the engine is remote. Output is demultiplexed
// (stdout/stderr) and captured per backend.NewOutputs.
//
// # Files
//
// Files move through the archive API (docker cp's), so images need no
// tools: Sandbox implements backend.Archiver and backend.FileSystem
// (ReadFile, WriteFile and Stat through the archive API; ReadDir runs
// `sbxd ls`, as the sandbox's user). The engine reads and writes files
// as root, whatever Spec.User is.
//
// # Other capabilities
//
// Endpointer (published TCP ports), Pauser (cgroup freezer, memory kept),
// Checkpointer (commit to an image; the file system only), Attacher (a
// long-lived exec with stdin/stdout). Not implemented: Renewer (a
// container's labels cannot change after creation, and the expiry lives in
// a label), entries attaching to an existing
// container (container_id), image builds, and labelled creation of named
// and shared volumes.
package native
