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
// Logging goes to WithLogger's logger; WithDialContext reaches the engine
// over another transport (remotedocker).
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
// no registry) and then marked filled by a second, empty volume
// (sandboxkit-sbxd-<hash>-filled), so that another process's first Create
// only lists volumes. Where that volume cannot be made, sbxd is copied into each
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
// # Images: pulls and builds
//
// The pull policy decides whether Create pulls Spec.Image: "missing" (the
// default) pulls only what the engine lacks, "always" pulls every time,
// "never" fails with backend.ErrNotFound. Concurrent Creates of one image
// share one pull.
//
// Spec.Build builds Spec.Image (the tag; required) with the engine's
// classic builder over the plain build API: no BuildKit session, no docker
// CLI, no registry. The context folder is streamed as a tar honouring its
// .dockerignore; a Dockerfile outside the context is sent along under a
// name of its own (as docker build -f does); build arguments and labels
// (sandboxkit.backend and sandboxkit.native.dockerfile, plus Spec.Labels)
// are passed on. The layer cache makes rebuilding an unchanged Dockerfile a
// row of cache hits, so every Create with a Build builds; builds of one tag
// in one process take turns. Pull policy "always" re-pulls base images;
// "never" refuses a build whose FROM image is missing instead of letting
// the builder pull it. A failed build's error (backend.ErrInvalidConfig;
// ErrNotFound for a missing base image) names the Dockerfile and the
// failing step and carries the last lines of that step's output.
//
// Both report through Spec.Progress: Step "pull" per layer (ID, status,
// bytes done of total), Step "build" per Dockerfile step (Current and
// Total count steps), each ending with a Done report.
//
// # Existing containers
//
// Spec.Existing (OpenSage's container_id) adopts a running container by ID
// or name instead of creating one; the sandbox's ID is "ext-" and the
// container's short ID, which Get accepts too. Adopted containers are not
// listed (they carry none of sandboxkit's labels, which cannot be added to
// a container) and Destroy leaves them running. sbxd is copied to
// /.sbx/sbxd through the archive API when the container has none, so
// timeouts and cancellation kill process trees inside it as for any
// sandbox. Where that fails (read-only root file system, noexec, another
// architecture), commands run as plain engine execs and a warning is
// logged: they work, but a timeout or a cancel only stops waiting (exit
// 124, or the context's error) while the process keeps running in the
// container. Sandbox.Adopted reports which case applies.
//
// # Shared volumes
//
// Backend implements backend.VolumeManager. CreateVolume makes a volume
// labelled like a sandbox (sandboxkit.id, .backend, .session, .expires-at
// for a TTL, the caller's labels) plus sandboxkit.native.volume, named
// sbx-<session>-vol-<id> unless named by the caller, and fills it from a
// host folder or a .tar.gz (.tgz, .tar) through the archive API. The
// engine writes into a volume only through a container that mounts it, so
// a helper container is created (never started) from sandboxkit-helper:
// <sbxd hash>, an image imported on first use from a tar holding only the
// embedded sbxd: no registry, and no dependence on which images the engine
// has. Like the sbxd volume, that image is a cache and stays. Sandboxes
// mount a volume with a backend.Volume of type VolumeNamed (ReadOnly for
// :ro). RemoveVolume is idempotent, refuses volumes CreateVolume did not
// make and volumes still mounted; ListVolumes filters by session and
// labels on the engine. sbx gc removes expired volumes and those of a
// session with no sandboxes left.
//
// # Pool members
//
// Backend implements backend.Claimer. A container's labels are fixed, so a
// claim is kept beside it: a claim record, a volume named
// sbx-claim-<sandbox ID> (never mounted) whose labels are the sandbox's
// labels after the claim, and a rename of the container to its ready name
// + "-claimed". Making the record is the atomic step (the engine creates a
// volume name once and answers later creates with the first one's
// labels); the name keeps a member claimed should its record be lost.
// Info, Get and List merge the record over the container's labels, so they
// report the claim's owner, session, expiry and labels, and List's filter
// matches them. Destroy removes the record after the container; sbx gc
// (PruneCaches) removes records whose sandbox is gone. A claim costs a
// list, a volume create and a rename (~4 ms here, see BenchmarkClaim);
// claims back to ready are not supported. claim.go has the details and
// the reasons.
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
// long-lived exec with stdin/stdout). Sandbox.MemoryUsage reports the
// container's memory as docker stats does (sbx bench scale uses it). Not
// implemented: Renewer (a container's labels cannot change after creation,
// and the expiry lives in a label).
//
// # Performance
//
// Measured on a 2-core machine against Docker Engine 20.10 with the
// benchmarks in bench_test.go, each against the bare Engine API in the
// same run: see docs/backends.md (native) for the numbers, and
// `sbx bench scale` for many sandboxes at once.
package native
