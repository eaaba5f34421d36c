package lite

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandboxkit/sandboxkit/backend"
)

// labelCPUSet carries a CPU set from the config (config.LabelCPUSet:
// backend.Spec has no field for it) to linux.resources.cpu.cpus.
const labelCPUSet = backend.LabelPrefix + "cpuset"

// ociVersion is the runtime-spec version the bundles claim: the oldest one
// whose fields they use, so runc 1.1 (spec 1.0.2) and crun 1.8 accept them.
const ociVersion = "1.0.2"

// defaultCaps is Docker's default capability set.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// allCaps is every capability a privileged sandbox gets (those Linux 5.x
// and later know; runtimes ignore ones the kernel lacks).
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// Docker's masked and read-only paths.
var (
	maskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// defaultPath is the PATH of a sandbox whose image sets none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// bundleInput is everything the OCI config of a sandbox is made from.
type bundleInput struct {
	id       string
	spec     backend.Spec
	image    *imageConfig
	network  string
	pids     int64
	user     specs.User
	env      []string
	cwd      string
	args     []string
	sbxdPath string // host path of the sbxd binary
	hosts    string // host path of the generated /etc/hosts
	hostname string // host path of the generated /etc/hostname
	agentDir string // host folder mounted at agentDir ("": no agent)
	// egress: the sandbox joins this network namespace (a path) and
	// mounts resolvConf; zero without an egress policy.
	egress struct{ netns, resolvConf string }
}

// buildSpec returns the OCI runtime config of a sandbox.
func buildSpec(in bundleInput) (*specs.Spec, error) {
	sp := in.spec
	caps, err := capabilities(sp)
	if err != nil {
		return nil, err
	}
	noNewPrivs, seccomp, err := securityOptions(sp)
	if err != nil {
		return nil, err
	}

	s := &specs.Spec{
		Version:  ociVersion,
		Hostname: in.id,
		Root:     &specs.Root{Path: "rootfs", Readonly: sp.ReadOnlyRootfs},
		Process: &specs.Process{
			User: in.user,
			Args: in.args,
			Env:  in.env,
			Cwd:  in.cwd,
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			Rlimits:         []specs.POSIXRlimit{nofileLimit()},
			NoNewPrivileges: noNewPrivs,
		},
		Mounts: baseMounts(sp, in),
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
				{Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
			},
			CgroupsPath: "/" + cgroupParent + "/" + in.id,
			Resources:   resources(sp, in.pids),
		},
	}
	if in.network == NetworkNone {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: in.egress.netns})
	}
	if !sp.Privileged {
		s.Linux.MaskedPaths = slices.Clone(maskedPaths)
		s.Linux.ReadonlyPaths = slices.Clone(readonlyPaths)
	}
	if seccomp {
		s.Linux.Seccomp = defaultSeccomp(slices.Contains(caps, "CAP_SYS_ADMIN"))
	}
	if sp.Privileged {
		// Every device of the host, as docker run --privileged.
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
	}
	return s, nil
}

// capabilities is the capability set of a sandbox's processes: Docker's
// default set (or every one, privileged), with the entry's cap_add and
// cap_drop applied in that order.
func capabilities(sp backend.Spec) ([]string, error) {
	caps := slices.Clone(defaultCaps)
	if sp.Privileged {
		caps = slices.Clone(allCaps)
	}
	for _, c := range sp.CapAdd {
		name, err := capName(c)
		if err != nil {
			return nil, err
		}
		if name == "ALL" {
			caps = slices.Clone(allCaps)
			continue
		}
		if !slices.Contains(caps, name) {
			caps = append(caps, name)
		}
	}
	for _, c := range sp.CapDrop {
		name, err := capName(c)
		if err != nil {
			return nil, err
		}
		if name == "ALL" {
			caps = nil
			continue
		}
		caps = slices.DeleteFunc(caps, func(s string) bool { return s == name })
	}
	return caps, nil
}

// securityOptions reads the entry's security_opt: whether processes get
// no_new_privs and the seccomp filter (both on unless privileged).
func securityOptions(sp backend.Spec) (noNewPrivs, seccomp bool, err error) {
	noNewPrivs = !sp.Privileged
	seccomp = !sp.Privileged
	for _, opt := range sp.SecurityOpt {
		key, value, _ := strings.Cut(strings.ReplaceAll(opt, "=", ":"), ":")
		switch {
		case key == "no-new-privileges" && (value == "" || value == "true"):
			noNewPrivs = true
		case key == "no-new-privileges" && value == "false":
			noNewPrivs = false
		case key == "seccomp" && value == "unconfined":
			seccomp = false
		case key == "apparmor" && value == "unconfined", key == "label" && value == "disable":
			// Nothing to turn off: lite applies neither.
		default:
			return false, false, fmt.Errorf("%w: the lite backend cannot honour security_opt %q (it knows no-new-privileges[:true|false], seccomp=unconfined, apparmor=unconfined, label=disable)",
				errUnsupported, opt)
		}
	}
	return noNewPrivs, seccomp, nil
}

func baseMounts(sp backend.Spec, in bundleInput) []specs.Mount {
	shm := "size=65536k"
	if sp.Resources.ShmBytes > 0 {
		shm = fmt.Sprintf("size=%dk", (sp.Resources.ShmBytes+1023)/1024)
	}
	sysOpts := []string{"nosuid", "noexec", "nodev", "ro"}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", shm}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
	}
	if in.network == NetworkNone {
		// sysfs shows the network namespace that mounts it: only a new
		// one may mount a fresh instance.
		mounts = append(mounts,
			specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: sysOpts},
			specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}})
		if in.egress.resolvConf != "" {
			mounts = append(mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: in.egress.resolvConf, Options: []string{"bind", "ro"}})
		}
	} else {
		mounts = append(mounts,
			specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
			specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: "/etc/resolv.conf", Options: []string{"rbind", "ro"}})
	}
	mounts = append(mounts,
		specs.Mount{Destination: sbxdPath, Type: "bind", Source: in.sbxdPath, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: in.hosts, Options: []string{"bind", "ro"}},
		specs.Mount{Destination: "/etc/hostname", Type: "bind", Source: in.hostname, Options: []string{"bind", "ro"}},
	)
	if in.agentDir != "" {
		mounts = append(mounts, specs.Mount{Destination: agentDir, Type: "bind", Source: in.agentDir,
			Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}})
	}
	for _, v := range sp.Volumes {
		opts := []string{"rbind", "rprivate"}
		if v.ReadOnly {
			opts = append(opts, "ro")
		}
		mounts = append(mounts, specs.Mount{Destination: v.Target, Type: "bind", Source: v.Source, Options: opts})
	}
	return mounts
}

// nofileLimit is Docker's open-files limit (1048576) or, when this process
// may not raise its own hard limit that far, that hard limit: a sandbox may
// not be given more than its creator has.
func nofileLimit() specs.POSIXRlimit {
	n := uint64(1 << 20)
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err == nil && cur.Max < n {
		n = cur.Max
	}
	return specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: n, Soft: n}
}

func resources(sp backend.Spec, defaultPids int64) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if c := sp.Resources.CPUs; c > 0 {
		period := uint64(100000)
		quota := int64(c * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if set := sp.Labels[labelCPUSet]; set != "" {
		// A CPU set (an entry's cpus = "0,1", OpenSage's cpuset_cpus)
		// comes as a label; Resources.CPUs is then its size.
		if r.CPU == nil {
			r.CPU = &specs.LinuxCPU{}
		}
		r.CPU.Cpus = set
	}
	if m := sp.Resources.MemoryBytes; m > 0 {
		r.Memory = &specs.LinuxMemory{Limit: &m}
	}
	pids := sp.Resources.PidsLimit
	if pids == 0 {
		pids = defaultPids
	}
	if pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return r
}

// capName turns "net_admin", "NET_ADMIN" or "CAP_NET_ADMIN" into
// "CAP_NET_ADMIN" ("ALL" stays "ALL").
func capName(c string) (string, error) {
	u := strings.ToUpper(strings.TrimSpace(c))
	if u == "ALL" {
		return u, nil
	}
	if !strings.HasPrefix(u, "CAP_") {
		u = "CAP_" + u
	}
	if !slices.Contains(allCaps, u) {
		return "", fmt.Errorf("%w: unknown capability %q", backend.ErrInvalidConfig, c)
	}
	return u, nil
}

// Seccomp: a deny list on top of an allow-by-default action. It refuses
// what Docker's default profile refuses to a container without
// CAP_SYS_ADMIN and friends: kernel modules, kexec, reboot, swap, clock
// changes, keyrings, bpf, perf, userfaultfd, mount APIs, namespace
// creation (unshare, setns, clone with namespace flags; clone3 reports
// ENOSYS so libc falls back to clone), io_uring, and old or obscure calls.
// Docker's profile is an allow list of ~350 calls; this one keeps the same
// effect for those calls with a list short enough to review.
var deniedSyscalls = []string{
	"acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module",
	"delete_module", "finit_module", "fanotify_init", "fsconfig", "fsmount", "fsopen",
	"fspick", "get_kernel_syms", "get_mempolicy", "init_module", "io_uring_enter",
	"io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp", "kexec_file_load",
	"kexec_load", "keyctl", "lookup_dcookie", "mbind", "mount", "mount_setattr",
	"move_mount", "move_pages", "name_to_handle_at", "nfsservctl", "open_by_handle_at",
	"open_tree", "perf_event_open", "pivot_root", "process_vm_readv", "process_vm_writev",
	"query_module", "quotactl", "reboot", "request_key", "set_mempolicy", "setns",
	"settimeofday", "stime", "swapoff", "swapon", "syslog", "_sysctl", "umount", "umount2",
	"unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old", "adjtimex",
}

// Namespace flags of clone(2) a sandbox may not use.
var cloneNamespaceFlags = []uint64{
	0x00020000, // CLONE_NEWNS
	0x02000000, // CLONE_NEWCGROUP
	0x04000000, // CLONE_NEWUTS
	0x08000000, // CLONE_NEWIPC
	0x10000000, // CLONE_NEWUSER
	0x20000000, // CLONE_NEWPID
	0x40000000, // CLONE_NEWNET
}

// sysAdminSyscalls are allowed when the sandbox has CAP_SYS_ADMIN, as
// Docker's profile allows them then.
var sysAdminSyscalls = []string{
	"fsconfig", "fsmount", "fsopen", "fspick", "mount", "mount_setattr", "move_mount",
	"open_tree", "pivot_root", "setns", "umount", "umount2", "unshare",
}

func defaultSeccomp(sysAdmin bool) *specs.LinuxSeccomp {
	eperm, enosys := uint(1), uint(38)
	denied := slices.Clone(deniedSyscalls)
	if sysAdmin {
		denied = slices.DeleteFunc(denied, func(n string) bool { return slices.Contains(sysAdminSyscalls, n) })
	}
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: seccompArches(),
		Syscalls: []specs.LinuxSyscall{
			{Names: denied, Action: specs.ActErrno, ErrnoRet: &eperm},
		},
	}
	if sysAdmin {
		return s
	}
	s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys})
	for _, flag := range cloneNamespaceFlags {
		s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{
			Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: &eperm,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		})
	}
	return s
}

func seccompArches() []specs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	}
	return nil
}

// processEnv merges the environments of a process: PATH, then the image's,
// then the spec's, then the request's (later ones win), as KEY=VALUE sorted
// by key for stable configs.
func processEnv(layers ...map[string]string) []string {
	env := map[string]string{}
	k, v, _ := strings.Cut(defaultPath, "=")
	env[k] = v
	for _, l := range layers {
		maps.Copy(env, l)
	}
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// envMap parses KEY=VALUE entries (an image config's Env).
func envMap(entries []string) map[string]string {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}
