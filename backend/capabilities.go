package backend

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Isolation says how strongly a backend separates a sandbox from the host.
type Isolation string

const (
	// IsolationNone: commands run as host processes (the local backend).
	IsolationNone Isolation = "none"
	// IsolationContainer: namespaces and cgroups (Docker, runc, Kubernetes).
	IsolationContainer Isolation = "container"
	// IsolationGVisor: gVisor's kernel in user space between the
	// sandbox's processes and the host's kernel, which sees a small set
	// of system calls from it (runsc).
	IsolationGVisor Isolation = "gvisor"
	// IsolationVM: a virtual machine with a kernel of its own (Kata,
	// Firecracker).
	IsolationVM Isolation = "vm"
)

// Runtime levels: the names a Spec.Runtime may give on any backend, each
// mapped by the backend to its own runtime (an engine's runtime name, a
// Kubernetes RuntimeClass, an OCI runtime binary). A backend also takes
// its engine's own runtime names.
const (
	RuntimeRunc        = "runc"
	RuntimeGVisor      = "gvisor"
	RuntimeKata        = "kata"
	RuntimeFirecracker = "firecracker"
)

// RuntimeIsolation is the isolation that runtime gives, by its name: a
// level above, or an engine's runtime name of the usual shapes ("runsc",
// "kata-runtime", "io.containerd.kata.v2", "kata-fc", "firecracker");
// anything else ("", "runc", "crun", ...) is a container.
func RuntimeIsolation(runtime string) Isolation {
	r := strings.ToLower(runtime)
	switch {
	case r == RuntimeGVisor || strings.Contains(r, "runsc") || strings.Contains(r, "gvisor"):
		return IsolationGVisor
	case strings.Contains(r, "kata") || strings.Contains(r, "firecracker"):
		return IsolationVM
	}
	return IsolationContainer
}

// Capabilities declares what a backend can do, so callers and the config
// checker can refuse a Spec the backend cannot honour instead of having it
// silently ignored. See Check.
type Capabilities struct {
	Isolation Isolation
	// Images: the backend runs Spec.Image. Backends without images ignore
	// the field (so one config moves between backends) and log that they do.
	Images bool
	// NetworkModes lists the Spec.Network values accepted besides "";
	// a "*" entry accepts any named network.
	NetworkModes []string

	// Egress: Spec.Egress is enforced (see EgressController). Without
	// it, EgressWhy says why not, for the refusal.
	Egress    bool
	EgressWhy string
	// Credentials: the backend's enforcers broker Spec.Credentials.
	Credentials bool

	BindVolumes  bool
	NamedVolumes bool
	Ports        bool
	// User: Spec.User and ExecRequest.User can select another user.
	User bool

	CPULimit    bool
	MemoryLimit bool
	PidsLimit   bool
	GPUs        bool
	ShmSize     bool

	Privileged     bool
	CapAdd         bool
	CapDrop        bool
	SecurityOpt    bool
	ReadOnlyRootfs bool
	// Runtimes lists the Spec.Runtime values accepted besides "" (the
	// backend's default, whose isolation is Isolation): runtime levels
	// (RuntimeGVisor, ...) the backend can give and its engine's own
	// runtime names.
	Runtimes []string
	// RuntimeHint, when set, tells how to add a runtime the backend
	// lacks (it ends a runtime's refusal).
	RuntimeHint string
	// Platform: Spec.Platform selects the image's platform.
	Platform bool
	// ContainerName: Spec.ContainerName names the sandbox's container.
	ContainerName bool
	// Hostname, ExtraHosts: Spec.Hostname and Spec.ExtraHosts are set in
	// the sandbox.
	Hostname   bool
	ExtraHosts bool

	// ImageCommand: Spec.ImageCommand can run the image's own command.
	ImageCommand bool
	// NoCommand: the backend cannot run Spec.Command as the sandbox's
	// main process (its platform decides what runs there). Check refuses
	// a Spec with a Command, and the conformance suite skips the cases
	// that need one (a main process that logs, serves or counts).
	NoCommand bool
	// Build: Spec.Build can build an image.
	Build bool
	// AttachExisting: Spec.Existing can attach to a container the backend
	// did not make.
	AttachExisting bool
	// PauseKeepsMemory: Pause freezes processes with their memory (as
	// opposed to stopping them).
	PauseKeepsMemory bool
	// Persistent: sandboxes survive a restart of the host program, so Get
	// and List find them again.
	Persistent bool
	// MaxConcurrency bounds concurrent sandboxes (0: no known bound).
	MaxConcurrency int
}

// Check returns nil when a backend with these capabilities can honour spec,
// and otherwise an error wrapping errors.ErrUnsupported that names every
// option it cannot honour, with the backend's name.
func (c Capabilities) Check(backendName string, spec Spec) error {
	if err := spec.Resources.Validate(); err != nil {
		return err
	}
	var bad []string
	need := func(ok bool, option string) {
		if !ok {
			bad = append(bad, option)
		}
	}
	if spec.Network != "" && !slices.Contains(c.NetworkModes, spec.Network) &&
		(!slices.Contains(c.NetworkModes, "*") || isBuiltinNetwork(spec.Network)) {
		bad = append(bad, fmt.Sprintf("network %q", spec.Network))
	}
	for _, v := range spec.Volumes {
		switch v.Type {
		case VolumeNamed:
			need(c.NamedVolumes, fmt.Sprintf("volume %q", v.Source+":"+v.Target))
		default:
			need(c.BindVolumes, fmt.Sprintf("volume %q", v.Source+":"+v.Target))
		}
	}
	if spec.Egress != nil && !c.Egress {
		why := c.EgressWhy
		if why == "" {
			why = "it does not enforce egress policies"
		}
		bad = append(bad, "egress ("+why+")")
	}
	need(len(spec.Credentials) == 0 || c.Credentials, "credentials (brokered secrets: its egress enforcer does not add them yet)")
	need(len(spec.Ports) == 0 || c.Ports, "ports")
	need(spec.User == "" || c.User, "user")
	need(spec.Resources.CPUs == 0 || c.CPULimit, "cpus")
	need(spec.Resources.MemoryBytes == 0 || c.MemoryLimit, "mem_limit")
	need(spec.Resources.PidsLimit == 0 || c.PidsLimit, "pids_limit")
	need(spec.Resources.GPUs == "" || c.GPUs, "gpus")
	need(spec.Resources.ShmBytes == 0 || c.ShmSize, "shm_size")
	need(!spec.Privileged || c.Privileged, "privileged")
	need(len(spec.CapAdd) == 0 || c.CapAdd, "cap_add")
	need(len(spec.CapDrop) == 0 || c.CapDrop, "cap_drop")
	need(len(spec.SecurityOpt) == 0 || c.SecurityOpt, "security_opt")
	need(!spec.ReadOnlyRootfs || c.ReadOnlyRootfs, "read_only")
	need(spec.Platform == "" || c.Platform, fmt.Sprintf("platform %q", spec.Platform))
	need(spec.ContainerName == "" || c.ContainerName, fmt.Sprintf("container_name %q", spec.ContainerName))
	need(spec.Hostname == "" || c.Hostname, "hostname")
	need(len(spec.ExtraHosts) == 0 || c.ExtraHosts, "extra hosts (--add-host)")
	if spec.Runtime != "" && !slices.Contains(c.Runtimes, spec.Runtime) {
		offers := "it has no runtime to choose"
		if len(c.Runtimes) > 0 {
			offers = "it offers " + strings.Join(c.Runtimes, ", ")
		}
		if c.RuntimeHint != "" {
			offers += "; " + c.RuntimeHint
		}
		bad = append(bad, fmt.Sprintf("runtime %q (%s)", spec.Runtime, offers))
	}
	need(!spec.ImageCommand || c.ImageCommand, `command = "" (the image's own command)`)
	need(len(spec.Command) == 0 || !c.NoCommand, "command (a main process of the entry's choosing)")
	need(spec.Build == nil || c.Build, "dockerfile build")
	need(spec.Existing == "" || c.AttachExisting, fmt.Sprintf("attaching to existing container %q", spec.Existing))
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the %s backend cannot honour %s (remove it from the sandbox entry or pick another backend)",
		errors.ErrUnsupported, backendName, strings.Join(bad, ", "))
}

func isBuiltinNetwork(n string) bool {
	return n == "none" || n == "host" || n == "bridge"
}
