// Package lite is the sandboxkit backend that runs sandboxes as OCI
// containers with no daemon: for each sandbox it mounts an overlay root file
// system, writes an OCI bundle (github.com/opencontainers/runtime-spec
// types) and drives an OCI runtime binary, runc by default. It is
// OpenSage's agentdocker-lite: for hosts without Docker and for workloads
// that make and throw away many sandboxes.
//
// # Configuration
//
// Config is the [sandbox.lite] table (also [sandbox.agentdocker-lite]);
// every key is optional:
//
//	[sandbox.lite]
//	runtime = "runc"          # "runc" | "crun" | "runsc" | a path to one
//	runtime_root = ""         # the runtime's --root; default /run/sandboxkit/lite/<runtime>
//	state_dir = ""            # default $XDG_STATE_HOME/sandboxkit/lite or ~/.local/state/sandboxkit/lite
//	image_dir = ""            # default $XDG_CACHE_HOME/sandboxkit/lite/images or ~/.cache/sandboxkit/lite/images
//	network = "none"          # entries naming no network: "none" (own empty namespace) | "host"
//	rootless = "auto"         # "auto": rootless unless root | "force": refuse to run as root | "off": root only
//	pids_limit = 4096         # when an entry sets none; negative: unlimited
//	pull_policy = "missing"   # registry images: "missing" | "always" | "never"
//	engine_socket = ""        # "": names a local Docker/Podman holds come from it | a socket | "off"
//	insecure_registries = []  # registries spoken to over plain HTTP ("127.0.0.1:5000")
//	sbxd_path = ""            # a static sbxd to use instead of the embedded one
//	egress_block = "10.252.0.0/16"  # /30s of the sandboxes with an egress policy
//	egress_dns = ""           # DNS server their enforcers ask; default the host's first nameserver
//
//	[sandbox.lite.images]     # image names of entries -> image sources
//	"ubuntu:20.04" = "dir:/srv/rootfs/focal"
//
// # Images
//
// Spec.Image (after the images table maps it) names where the root file
// system comes from, with skopeo's transport names:
//
//	dir:/abs/path                a root file system folder (debootstrap, ...), used in place
//	docker-archive:/abs/x.tar    a `docker save` archive
//	oci:/abs/layout[:tag]        an OCI image layout folder
//	oci-archive:/abs/x.tar[:tag] a tar of an OCI image layout
//	/abs/path                    any of the above, told apart by its content
//	ref                          a local engine's image (Docker, Podman: engine_socket), else as docker://ref
//	docker://ref                 a registry reference, pulled with go-containerregistry
//	snapshot:NAME                a snapshot of a sandbox (Sandbox.Snapshot; see snapshot.go)
//
// Images (all but dir:) are flattened once, whiteouts applied, into
// image_dir/sha256-<image ID>, whatever name reached them; a registry tag
// remembers its image ID, so with pull_policy "missing" a known tag needs no
// registry. A bare name is first looked up in the local engines' image
// stores (Docker's, Podman's; OpenSage's agentdocker-lite takes Docker
// images) through the Engine API, exported from the first that holds it
// (image save) and unpacked by its image ID; only a name no engine holds
// is pulled. Create says which source a name came from (its progress and
// log). lite builds no images: an entry with a Dockerfile (Spec.Build)
// runs when its image is on hand (a local engine or the cache holds it),
// as OpenSage uses an image on hand before building it; otherwise Create
// refuses, naming the image and the Dockerfile to build it from. A folder image has no config, so no env, entrypoint or
// command = "" (Spec.ImageCommand); an image's Env, WorkingDir, User,
// Entrypoint and Cmd apply as in Docker. Unpacking goes through os.Root, so
// an archive cannot write outside its folder; device nodes and extended
// attributes (file capabilities) in layers are not unpacked.
//
// # Sandboxes
//
// Each sandbox is a folder under the state dir:
//
//	<state>/<id>/meta.json        labels, image, runtime, init PID: what Get and List read
//	<state>/<id>/upper, work      the overlay's writable layer
//	<state>/<id>/bundle/          config.json and rootfs/, the merged overlay (lower = the image, read-only)
//	<state>/<id>/main.log         output of the sandbox's first process
//	<state>/<id>/lock             locked by Reset and Destroy, in every process
//
// and one container, sbxlite-<id>, in the runtime's root. The first process
// is sbxd init (cmd/sbxd, bind-mounted read-only from the state dir at
// /.sbx/sbxd): it keeps the sandbox alive and reaps orphans, or runs the
// entry's command (after the image's entrypoint) or the image's own.
//
// What Create sets up, as Docker would: pid, mount, ipc and uts namespaces,
// and a network namespace of its own (only loopback) unless the network is
// "host"; Docker's default capabilities (CapAdd/CapDrop adjust them;
// Privileged gives all, every device and no seccomp); no-new-privileges;
// Docker's masked and read-only /proc and /sys paths; a seccomp filter
// denying what Docker's default profile denies to such a container (module
// loading, kexec, mount, namespace creation, keyrings, bpf, perf, io_uring,
// clock changes, ...; a deny list on an allow-by-default action, not
// Docker's allow list); cgroup limits for cpus, memory and pids (v1 and v2;
// the cgroup is /sandboxkit-lite/<id>), a pids limit of 4096 by default;
// /dev/shm of Spec.Resources.ShmBytes; bind and named volumes; generated
// /etc/hosts and /etc/hostname (the hostname is the sandbox ID).
//
// A Spec with an Egress policy (as root only) gets a network namespace with
// a veth to the host instead of an empty one, and an enforcer outside it
// (`sbxd egress`, package egress): DNS only for allowed names, TCP only
// through the enforcer's proxy, nothing else; see egress.go. Backend is an
// EgressController: SetEgress changes the policy of a running sandbox.
//
// Destroy works from meta.json alone, so it also removes sandboxes whose
// creator crashed half-way: it kills the container's first process (which
// ends the PID namespace), deletes the container, unmounts the overlay and
// removes the folder; it is idempotent. Reset (a lite-only method) throws the
// writable layer away and starts the container again: the sandbox is back to
// its image, with the same ID. For most Specs (Backend.CleanReset: not on
// the host's network, not privileged, no capability but NET_ADMIN beyond
// Docker's, seccomp on, no writable volume) nothing of what ran before is
// left, so a warm pool may hand the sandbox to another task. A pool's claim
// (Backend.Claim) changes meta.json under the flock that every writer of
// the record takes, in any process. After the first Reset a sandbox keeps a
// standby: the next generation's container, made with the runtime's create
// on a fresh layer in the background, which the next Reset starts (about
// 5 ms instead of a whole run); see Sandbox.Reset. Containers made ahead
// like it (and a fork's, see Fork) are made at the lowest CPU weight of
// their cgroup, so that a task's commands in a sandbox just handed out win
// the CPU over them; whatever waits for one (a Destroy, a Reset,
// Backend.Close) gives it the normal weight, and so does its start.
//
// # Exec
//
// Every command runs through the runtime's exec as
//
//	/.sbx/sbxd exec --id EXECID [--timeout D] -- ARGV...
//
// with a process.json made from the sandbox's OCI process (its environment,
// capabilities and user), so exec'd commands are confined like the first
// process. sbxd runs ARGV in a process group with SBX_EXEC_ID=EXECID and, on
// timeout, kills the group and every process carrying the marker, then
// exits 124. Cancelling the context kills every process carrying the marker
// from the host (the sandbox's processes are visible there; under gVisor,
// where they are not, sbxd kill does it inside through the runtime's exec).
// The runtime's
// stdio is the command's, with no copy in between for files; its own errors
// go to a JSON log and come back as errors (a stopped sandbox wraps
// backend.ErrUnavailable). Attach runs the same way with pipes.
//
// # Files
//
// Sandbox implements backend.FileSystem on the host side of the overlay,
// with no exec. Paths resolve as the kernel would resolve them inside the
// sandbox, chroot-style ("/.." is "/", absolute symlinks start at the
// sandbox's root), through os.Root, so no "..", symlink or
// /proc/self/root trick reaches a host file; under a volume's target
// they reach the volume's host folder. Paths under /proc, /sys, /dev, /.sbx
// and the generated /etc files are not on the overlay and return
// errors.ErrUnsupported, so sbfiles.ReadFile and friends fall back to Exec.
// New files belong to the sandbox's user; a replaced file keeps its owner.
//
// # Volumes
//
// Backend is a backend.VolumeManager: a named volume is a folder of the
// state dir that sandboxes bind-mount (a Volume of type VolumeNamed whose
// Source is the name), so sandboxes of one session share /shared and see
// each other's writes at once:
//
//	<state>/volumes/<name>/volume.json  name, session, labels, created, expires
//	<state>/volumes/<name>/data/        what sandboxes mount (0755, root's in the sandbox)
//
// CreateVolume fills data/ from a host folder or a .tar.gz (modes kept; a
// folder's files belong to root in the sandbox, an archive's to the owners
// it names; rootless, all belong to the user, who is root in the sandbox)
// in a hidden folder that it renames to the volume's name when complete,
// so a kill leaves nothing that ListVolumes shows, and PruneCaches (sbx
// gc) removes the leftover. Names follow Docker's rule
// ([a-zA-Z0-9][a-zA-Z0-9_.-]*); "" picks sbx-<session>-vol-<random>; an
// existing name wraps backend.ErrAlreadyExists. As Docker does, Create
// makes a volume that a Spec names and that does not exist yet (with no
// session: it stays until RemoveVolume, like a cache shared by sessions);
// unlike Docker, it does not copy the image's files at the target into
// an empty volume. RemoveVolume refuses a volume that a
// sandbox mounts, as Docker does; sbx gc removes expired volumes and those
// of sessions without sandboxes. A volume is not part of the sandbox's
// writable layer: Reset leaves it as it is, a snapshot holds only its
// empty mount point, and a fork mounts the same volume.
//
// # Hosts
//
// As root the backend mounts overlays on the host and puts each sandbox in
// a cgroup. Any other user gets rootless sandboxes: each runs in a user
// namespace of its own that maps root inside to that user (one ID, no
// /etc/subuid), made by util-linux's unshare, which also mounts the overlay
// there; commands enter it with nsenter or go through the agent, and files
// go through /proc/<first process>/root. Rootless sandboxes have no cgroup
// limits (cpus, mem_limit and pids_limit are refused; the default pids
// limit is not applied), run everything as root inside (other users are
// refused), pause with SIGSTOP, and need images whose files belong to the
// user (images the backend unpacks do; a dir: image of another user is
// refused with an error saying so). New checks that the host lets the user
// make user namespaces and names the sysctl to change when it does not;
// Linux 5.11 or later mounts overlayfs in a user namespace. It needs overlayfs and an OCI
// runtime; runc 1.1 works on cgroup v1, hybrid and v2 hosts. crun 1.8
// refuses hosts whose cgroup v2 hierarchy holds controllers in hybrid mode
// ("cgroups in hybrid mode not supported"); the error is passed on.
//
// # gVisor
//
// runtime = "runsc" (or a sandbox's runtime = "gvisor") runs sandboxes on
// gVisor's runsc (Debian's 2022-12 release is tested; the ptrace platform
// works without KVM), isolation "gvisor". The sandbox's root file system
// is shared with the host side (--file-access=shared) and /tmp is a bind
// of the root file system's own (runsc would hide an empty one under a
// tmpfs of its memory), so files, snapshots, forks and Reset behave as on
// runc; an egress policy's namespace runs on the kernel's stack inside it
// (that runsc refuses its own stack in any namespace on 5.x kernels).
// What differs: named pipes made inside live in gVisor's kernel, not in
// the root file system, so forks and snapshots lack them and file access
// from the host asks the sandbox (through Exec) about a path it misses;
// there is no /dev/mqueue and, without a network, no addresses or routes
// to add; and the agent's terminals are gVisor's ptys, which in that
// release raise no SIGWINCH on a resize and no SIGINT on Ctrl-C
// (google/gvisor#13317; lite's own terminals, on the host's ptys, do).
// A later generation's container is named sbxlite-g<N>-<id> (runsc takes
// a prefix of an ID for the ID). runsc's gofer and sandbox processes live
// in the sandbox's cgroup, which Destroy empties.
package lite
