package config

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// dockerFlag is one docker run flag an entry's docker_args may hold, and
// where it lands in the Spec.
type dockerFlag struct {
	names []string // long name first, then the short one: "--memory", "-m"
	// boolean flags take no value ("--privileged"), or "=true"/"=false".
	boolean bool
	// apply sets the flag's value v in b's Spec, or returns why it cannot.
	apply func(b *specBuilder, v string) error
}

// dockerFlags are the docker run flags docker_args may hold: those whose
// effect backend.Spec can express. Any other flag is refused by name.
var dockerFlags = []dockerFlag{
	{names: []string{"--cap-add"}, apply: func(b *specBuilder, v string) error {
		b.spec.CapAdd = append(b.spec.CapAdd, v)
		return nil
	}},
	{names: []string{"--cap-drop"}, apply: func(b *specBuilder, v string) error {
		b.spec.CapDrop = append(b.spec.CapDrop, v)
		return nil
	}},
	{names: []string{"--security-opt"}, apply: func(b *specBuilder, v string) error {
		b.spec.SecurityOpt = append(b.spec.SecurityOpt, v)
		return nil
	}},
	{names: []string{"--shm-size"}, apply: func(b *specBuilder, v string) error {
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		return setScalar(&b.spec.Resources.ShmBytes, n, "shm_size")
	}},
	{names: []string{"--memory", "-m"}, apply: func(b *specBuilder, v string) error {
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		return setScalar(&b.spec.Resources.MemoryBytes, n, "mem_limit")
	}},
	{names: []string{"--cpus"}, apply: func(b *specBuilder, v string) error {
		c, err := strconv.ParseFloat(v, 64)
		if err != nil || !(c >= backend.MinCPUs && c <= backend.MaxCPUs) {
			return fmt.Errorf("want %v to %v CPUs", backend.MinCPUs, float64(backend.MaxCPUs))
		}
		return setScalar(&b.spec.Resources.CPUs, c, "cpus")
	}},
	{names: []string{"--pids-limit"}, apply: func(b *specBuilder, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of processes (no limit: leave the flag out)")
		}
		return setScalar(&b.spec.Resources.PidsLimit, n, "pids_limit")
	}},
	{names: []string{"--gpus"}, apply: func(b *specBuilder, v string) error {
		g, err := parseGPUs(v)
		if err != nil {
			return err
		}
		return setScalar(&b.spec.Resources.GPUs, g, "gpus")
	}},
	{names: []string{"--user", "-u"}, apply: func(b *specBuilder, v string) error {
		return setScalar(&b.spec.User, v, "user")
	}},
	{names: []string{"--workdir", "-w"}, apply: func(b *specBuilder, v string) error {
		if !strings.HasPrefix(v, "/") {
			return fmt.Errorf("want an absolute path inside the sandbox")
		}
		return setScalar(&b.spec.WorkingDir, v, "working_dir")
	}},
	{names: []string{"--env", "-e"}, apply: func(b *specBuilder, v string) error {
		k, val, ok := strings.Cut(v, "=")
		if k == "" {
			return fmt.Errorf("want KEY=VALUE or KEY")
		}
		if !ok {
			// docker run -e KEY passes the host's KEY, if it is set.
			if val, ok = os.LookupEnv(k); !ok {
				return nil
			}
		}
		if old, set := b.spec.Env[k]; set && old != val {
			return fmt.Errorf("%s is %q in environment; set it in one place", k, old)
		}
		if b.spec.Env == nil {
			b.spec.Env = map[string]string{}
		}
		b.spec.Env[k] = val
		return nil
	}},
	{names: []string{"--network", "--net"}, apply: func(b *specBuilder, v string) error {
		return setScalar(&b.spec.Network, v, "network")
	}},
	{names: []string{"--privileged"}, boolean: true, apply: func(b *specBuilder, v string) error {
		return setBool(&b.spec.Privileged, v, "privileged")
	}},
	{names: []string{"--read-only"}, boolean: true, apply: func(b *specBuilder, v string) error {
		return setBool(&b.spec.ReadOnlyRootfs, v, "read_only")
	}},
	{names: []string{"--add-host"}, apply: func(b *specBuilder, v string) error {
		host, ip, ok := strings.Cut(v, ":")
		if !ok {
			host, ip, ok = strings.Cut(v, "=")
		}
		if !ok || host == "" || (ip != "host-gateway" && net.ParseIP(strings.Trim(ip, "[]")) == nil) {
			return fmt.Errorf("want NAME:IP (or NAME:host-gateway)")
		}
		b.spec.ExtraHosts = append(b.spec.ExtraHosts, host+":"+ip)
		return nil
	}},
	{names: []string{"--hostname", "-h"}, apply: func(b *specBuilder, v string) error {
		return setScalar(&b.spec.Hostname, v, "")
	}},
	{names: []string{"--name"}, apply: func(b *specBuilder, v string) error {
		if b.e.PodName != "" {
			return fmt.Errorf("the entry attaches to pod %q, so it names no container of its own", b.e.PodName)
		}
		return setScalar(&b.spec.ContainerName, v, "container_name")
	}},
	{names: []string{"--platform"}, apply: func(b *specBuilder, v string) error {
		return setScalar(&b.spec.Platform, v, "platform")
	}},
	{names: []string{"--runtime"}, apply: func(b *specBuilder, v string) error {
		return setScalar(&b.spec.Runtime, v, "runtime")
	}},
	{names: []string{"--label", "-l"}, apply: func(b *specBuilder, v string) error {
		k, val, _ := strings.Cut(v, "=")
		switch {
		case k == "":
			return fmt.Errorf("want KEY=VALUE")
		case strings.HasPrefix(k, backend.LabelPrefix):
			return fmt.Errorf("the %s prefix is reserved for sandboxkit's own labels", backend.LabelPrefix)
		}
		if b.spec.Labels == nil {
			b.spec.Labels = map[string]string{}
		}
		b.spec.Labels[k] = val
		return nil
	}},
	{names: []string{"--volume", "-v"}, apply: func(b *specBuilder, v string) error {
		vol, skip, err := parseVolumeOn(v, b.hostPaths())
		b.addVolume(b.at("docker_args"), v, vol, skip, err, true)
		return nil
	}},
	{names: []string{"--mount"}, apply: func(b *specBuilder, v string) error {
		vol, skip, err := parseMount(v, b.hostPaths())
		b.addVolume(b.at("docker_args"), v, vol, skip, err, true)
		return nil
	}},
	{names: []string{"--publish", "-p"}, apply: func(b *specBuilder, v string) error {
		p, err := parsePublish(v)
		if err != nil {
			return err
		}
		b.spec.Ports = append(b.spec.Ports, p)
		return nil
	}},
}

// supportedDockerFlags lists the flags docker_args takes, for messages.
func supportedDockerFlags() string {
	var names []string
	for _, f := range dockerFlags {
		names = append(names, f.names...)
	}
	return strings.Join(names, ", ")
}

func lookupDockerFlag(name string) (dockerFlag, bool) {
	for _, f := range dockerFlags {
		if slices.Contains(f.names, name) {
			return f, true
		}
	}
	return dockerFlag{}, false
}

// dockerArg is one flag of docker_args with its value.
type dockerArg struct {
	name, value string
	hasValue    bool
	raw         string // as written, for messages
}

// splitDockerArgs reads docker_args into flags: "--flag=value", "--flag
// value" as two elements or as one (split at the first blank), "-m512m",
// "-m=512m" and boolean flags alone. Only flags: a positional argument
// (an image, a command) is an error.
func splitDockerArgs(args []string) ([]dockerArg, error) {
	var out []dockerArg
	for i := 0; i < len(args); i++ {
		raw := strings.TrimSpace(args[i])
		if !strings.HasPrefix(raw, "-") || raw == "-" || raw == "--" {
			return nil, fmt.Errorf("%q is not a flag (docker_args holds docker run flags only; the image and command have keys of their own)", args[i])
		}
		a := dockerArg{raw: raw}
		switch {
		case strings.HasPrefix(raw, "--"):
			if i := strings.IndexAny(raw, "= \t"); i > 0 {
				a.name, a.value, a.hasValue = raw[:i], strings.TrimSpace(raw[i+1:]), true
			} else {
				a.name = raw
			}
		default: // -m512m, -m=512m, -m 512m, -m
			a.name = raw[:2]
			if rest := raw[2:]; rest != "" {
				a.value, a.hasValue = strings.TrimPrefix(strings.TrimLeft(rest, " "), "="), true
			}
		}
		f, ok := lookupDockerFlag(a.name)
		if !ok {
			return nil, fmt.Errorf("flag %s is not supported (supported: %s)", a.name, supportedDockerFlags())
		}
		if !a.hasValue && !f.boolean {
			if i+1 == len(args) {
				return nil, fmt.Errorf("flag %s needs a value", a.name)
			}
			i++
			a.value, a.hasValue = args[i], true
			a.raw += " " + args[i]
		}
		out = append(out, a)
	}
	return out, nil
}

// dockerArgs applies the entry's docker_args to the Spec, after the
// entry's own keys: list flags add to the lists, a scalar flag sets a value
// the entry leaves unset (setting one to another value is an error naming
// both).
func (b *specBuilder) dockerArgs() {
	if len(b.e.DockerArgs) == 0 {
		return
	}
	args, err := splitDockerArgs(b.e.DockerArgs)
	if err != nil {
		b.fail(b.at("docker_args"), "%v", err)
		return
	}
	// What the entry's keys set, so a flag may repeat (last wins) but not
	// contradict them.
	entry := b.spec
	set := map[string]bool{}
	for _, a := range args {
		f, _ := lookupDockerFlag(a.name)
		if !set[f.names[0]] {
			set[f.names[0]] = true
		} else {
			restoreScalar(&b.spec, entry, f.names[0])
		}
		if err := f.apply(b, a.value); err != nil {
			b.fail(b.at("docker_args"), "%s: %v", a.raw, err)
		}
	}
	slices.SortFunc(b.spec.Ports, comparePorts)
}

// restoreScalar puts back the entry's own value of a scalar flag before a
// repeated flag sets it again (docker: the last one wins).
func restoreScalar(spec *backend.Spec, entry backend.Spec, flag string) {
	switch flag {
	case "--shm-size":
		spec.Resources.ShmBytes = entry.Resources.ShmBytes
	case "--memory":
		spec.Resources.MemoryBytes = entry.Resources.MemoryBytes
	case "--cpus":
		spec.Resources.CPUs = entry.Resources.CPUs
	case "--pids-limit":
		spec.Resources.PidsLimit = entry.Resources.PidsLimit
	case "--gpus":
		spec.Resources.GPUs = entry.Resources.GPUs
	case "--user":
		spec.User = entry.User
	case "--workdir":
		spec.WorkingDir = entry.WorkingDir
	case "--network":
		spec.Network = entry.Network
	case "--hostname":
		spec.Hostname = entry.Hostname
	case "--name":
		spec.ContainerName = entry.ContainerName
	case "--platform":
		spec.Platform = entry.Platform
	case "--runtime":
		spec.Runtime = entry.Runtime
	}
}

// setScalar sets *dst to v unless the entry's key already holds another
// value.
func setScalar[T comparable](dst *T, v T, key string) error {
	var zero T
	if *dst != zero && *dst != v {
		return fmt.Errorf("the entry's %s is %v; set it in one place", key, *dst)
	}
	*dst = v
	return nil
}

// setBool sets a boolean flag ("" is true), refusing to turn off what the
// entry's key turns on.
func setBool(dst *bool, v, key string) error {
	on := true
	if v != "" {
		var err error
		if on, err = strconv.ParseBool(v); err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
	}
	if *dst && !on {
		return fmt.Errorf("the entry's %s is true; set it in one place", key)
	}
	*dst = on
	return nil
}

// parsePublish reads docker run -p: [IP:][HOST_PORT:]PORT[/tcp|/udp].
func parsePublish(s string) (backend.Port, error) {
	spec, proto, _ := strings.Cut(s, "/")
	parts := strings.Split(spec, ":")
	if i := strings.LastIndex(spec, "]:"); strings.HasPrefix(spec, "[") && i > 0 { // [::1]:8080:80
		parts = append([]string{spec[1:i]}, strings.Split(spec[i+2:], ":")...)
	}
	var bind PortBinding
	switch len(parts) {
	case 1:
	case 2:
		bind.HostPort = -1
	case 3:
		bind.HostIP, bind.HostPort = parts[0], -1
	default:
		return backend.Port{}, fmt.Errorf("want [IP:][HOST_PORT:]PORT[/tcp|/udp], got %q", s)
	}
	if bind.HostPort == -1 {
		hp := parts[len(parts)-2]
		bind.HostPort = 0
		if hp != "" {
			n, err := strconv.Atoi(hp)
			if err != nil || n < 1 || n > 65535 {
				return backend.Port{}, fmt.Errorf("host port %q: want 1-65535", hp)
			}
			bind.HostPort = n
		}
	}
	key := parts[len(parts)-1]
	if proto != "" {
		key += "/" + proto
	}
	return parsePort(key, bind)
}
