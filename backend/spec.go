package backend

import (
	"fmt"
	"strings"
	"time"
)

// Spec describes a sandbox to create. It covers what an OpenSage sandbox
// entry can say; package config turns TOML entries into Specs.
// Zero values mean "backend default".
type Spec struct {
	// Name is the entry name ("main", "neo4j", ...); Session groups the
	// sandboxes of one agent task. Both become labels.
	Name    string
	Session string

	// Image to run. Backends without images (local) ignore it and say so
	// in Capabilities.
	Image string
	// Command is the sandbox's main process. With Command nil and
	// ImageCommand false the backend keeps the sandbox alive on its own
	// (OpenSage: no command key). ImageCommand runs the image's own
	// entrypoint and CMD (OpenSage: command = ""), for service images.
	Command      []string
	ImageCommand bool

	Env        map[string]string
	WorkingDir string
	User       string

	Volumes   []Volume
	Ports     []Port
	Resources Resources

	// Network is "" (backend default), "none", "bridge", "host" or the name
	// of a network the backend knows.
	Network string
	// Egress, when set, limits what the sandbox may reach on the network
	// (see Egress); backends without Capabilities.Egress refuse it.
	Egress *Egress
	// Credentials are secrets the sandbox's enforcer adds to its HTTPS
	// requests to their hosts (see Credential); they need Egress and a
	// backend with Capabilities.Credentials.
	Credentials    []Credential
	Privileged     bool
	CapAdd         []string
	CapDrop        []string
	SecurityOpt    []string
	ReadOnlyRootfs bool
	// Runtime selects a container runtime such as "runsc" (gVisor).
	Runtime string
	// Platform is the image platform "os/arch[/variant]" ("linux/arm64"),
	// as docker run --platform: the backend pulls, and runs, that variant
	// of a multi-platform image. "" is the backend's own platform.
	Platform string
	// ContainerName is the name the platform gives the sandbox (Docker's
	// container name) instead of one the backend makes up. A fixed name
	// can exist once, so a second sandbox of the same Spec fails with
	// ErrAlreadyExists while the first lives.
	ContainerName string
	// Hostname is the sandbox's host name (docker run --hostname).
	Hostname string
	// ExtraHosts are "NAME:IP" lines added to the sandbox's /etc/hosts
	// (docker run --add-host).
	ExtraHosts []string

	// Labels are added to the backend's own labels (which win on clashes).
	Labels map[string]string
	// TTL is how long the sandbox may live before a reaper removes it
	// (zero: no expiry).
	TTL time.Duration
	// Owner is the owning process, see LabelOwner.
	Owner string
	// AutoRemove asks for a sandbox of one use that the platform removes
	// once it stops, where it can (the Docker backends: the engine's
	// auto-remove), so that Discarder.Discard need not wait for the
	// removal. Backends without such a feature remove it on Destroy as
	// always.
	AutoRemove bool
	// Ahead says the sandbox is made ahead of need (a warm pool's member):
	// no task waits for it, so a backend may make it at a lower CPU
	// priority, that it does not slow the commands of the sandboxes in use
	// beside it. The sandbox runs at the normal priority once made. lite
	// runs its runtime's create at the lowest cgroup CPU weight; the other
	// backends ignore it.
	Ahead bool

	// Build, when set, builds Image from a Dockerfile before the sandbox
	// is created (OpenSage's *_dockerfile_path and build_args); Image
	// names the result.
	Build *Build
	// Existing names an existing container (or pod) to attach to instead
	// of creating one (OpenSage's container_id, pod_name). Destroy of such
	// a sandbox leaves the container running: sandboxkit did not make it.
	Existing string
	// Progress, when set, receives progress of Create's long steps (image
	// pulls, builds), from Create's goroutine.
	Progress func(Progress)
}

// Build says how to build a sandbox's image.
type Build struct {
	// ContextDir is the host folder sent as the build context.
	ContextDir string
	// Dockerfile is the Dockerfile's host path (absolute, or relative to
	// ContextDir); "" means ContextDir/Dockerfile.
	Dockerfile string
	Args       map[string]string
}

// Progress is one report of a long step in Create.
type Progress struct {
	Sandbox string // Spec.Name
	Step    string // "pull", "build", ...
	// ID distinguishes parallel parts of a step (an image layer); "" for a
	// step without parts.
	ID     string
	Status string // what the backend says, e.g. "Downloading", "Step 2/5"
	// Current and Total count bytes (0 when unknown); for Step "build",
	// Dockerfile steps.
	Current, Total int64
	Done           bool
}

// VolumeType says what a Volume's Source is.
type VolumeType string

const (
	// VolumeBind mounts a host path.
	VolumeBind VolumeType = "bind"
	// VolumeNamed mounts a named volume the backend manages.
	VolumeNamed VolumeType = "volume"
)

// Volume mounts Source at Target inside the sandbox.
type Volume struct {
	Type     VolumeType
	Source   string // absolute host path for binds, a name for named volumes
	Target   string // absolute path inside the sandbox
	ReadOnly bool
}

// Port publishes a sandbox port to the host.
type Port struct {
	Port     int    // port inside the sandbox
	Protocol string // "tcp" (default) or "udp"
	HostIP   string // "" lets the backend choose
	HostPort int    // 0 lets the backend choose
}

// The range of Resources.CPUs besides 0 (no limit): Docker's smallest
// quota, and a bound far above any machine's cores that keeps every
// backend's arithmetic (runc quotas, nanoCPUs) from overflowing.
const (
	MinCPUs = 0.01
	MaxCPUs = 1024
)

// Resources are limits on the sandbox. Zero means no limit (or the backend's
// default, such as native's pids limit).
type Resources struct {
	CPUs        float64 // CPU quota in cores, like docker run --cpus
	MemoryBytes int64
	PidsLimit   int64
	// GPUs is "all", a count ("2") or comma-separated device IDs.
	GPUs     string
	ShmBytes int64
}

// Validate refuses limits no backend can carry out faithfully, naming the
// config key: a CPU quota outside MinCPUs..MaxCPUs (which would silently
// become "no limit" or overflow), and negative sizes. Capabilities.Check
// calls it, so every backend refuses them at Create.
func (r Resources) Validate() error {
	var bad []string
	if c := r.CPUs; c != 0 && !(c >= MinCPUs && c <= MaxCPUs) {
		bad = append(bad, fmt.Sprintf("cpus = %v: want 0 (no limit) or %v to %v", c, MinCPUs, float64(MaxCPUs)))
	}
	if r.MemoryBytes < 0 {
		bad = append(bad, fmt.Sprintf("mem_limit = %d: must not be negative", r.MemoryBytes))
	}
	if r.PidsLimit < 0 {
		bad = append(bad, fmt.Sprintf("pids_limit = %d: must not be negative", r.PidsLimit))
	}
	if r.ShmBytes < 0 {
		bad = append(bad, fmt.Sprintf("shm_size = %d: must not be negative", r.ShmBytes))
	}
	if len(bad) == 0 {
		return nil
	}
	return InvalidConfigf("%s", strings.Join(bad, "; "))
}
