package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Spec turns entry name into a backend.Spec: image (falling back to
// default_image), command, environment, volumes (plus mount_host_paths;
// missing host paths skipped), ports, resources, security options, labels
// and TTL (ttl, else default_ttl). Session and Owner are left to the caller.
//
// A Dockerfile key (project_relative_dockerfile_path,
// agent_relative_dockerfile_path, absolute_dockerfile_path; see
// Entry.DockerfilePath) with build_args becomes Spec.Build, with the
// Dockerfile's folder as the build context and image (else
// DefaultBuildImage) as the tag. container_id, or pod_name, becomes
// Spec.Existing: the sandbox attaches to that container instead of making
// one; with pod_name, container_name picks the pod's container
// ("POD/CONTAINER").
//
// Options that backend.Spec cannot carry yet (devices, platform,
// docker_args, host_gateway, container_name without pod_name) give an error wrapping
// errors.ErrUnsupported rather than being dropped.
func (c *Config) Spec(name string) (backend.Spec, error) {
	e, err := c.Entry(name)
	if err != nil {
		return backend.Spec{}, err
	}
	spec, _, problems := c.buildSpec(e, false)
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = invalidf("%s: %s", c.Describe(), p)
		}
		return backend.Spec{}, errors.Join(errs...)
	}
	if opts := unsupportedOptions(e); len(opts) > 0 {
		verb, it := "is", "it"
		if len(opts) > 1 {
			verb, it = "are", "them"
		}
		return backend.Spec{}, &configError{
			msg: fmt.Sprintf("%s: %s: %s %s not supported by this version of sandboxkit (remove %s from the entry)",
				c.Describe(), entryKey(e.Name), strings.Join(opts, ", "), verb, it),
			sentinel: errors.ErrUnsupported,
		}
	}
	return spec, nil
}

func entryKey(name string) toml.Key { return toml.Key{"sandbox", "sandboxes", name} }

// EntryKey is the dotted key of entry name's table, as messages name it:
// sandbox.sandboxes.NAME.
func EntryKey(name string) string { return entryKey(name).String() }

// unsupportedOptions lists the entry keys that are set but that
// backend.Spec has no field for.
func unsupportedOptions(e *Entry) []string {
	var opts []string
	add := func(set bool, key string) {
		if set {
			opts = append(opts, key)
		}
	}
	add(e.ContainerName != "" && e.PodName == "", "container_name")
	add(e.Platform != "", "platform")
	add(len(e.Devices) > 0, "devices")
	add(len(e.DockerArgs) > 0, "docker_args")
	add(e.HostGateway, "host_gateway")
	return opts
}

// buildSpec makes e's Spec. problems are "key: message" lines; warnings
// name the key too. While loading, malformed mount_host_paths are left to
// the caller, which reports them once for the file rather than per entry.
func (c *Config) buildSpec(e *Entry, loading bool) (spec backend.Spec, warnings, problems []string) {
	key := entryKey(e.Name)
	at := func(k ...string) string { return slices.Concat(key, toml.Key(k)).String() }
	fail := func(k, format string, args ...any) { problems = append(problems, k+": "+fmt.Sprintf(format, args...)) }

	spec = backend.Spec{
		Name:           e.Name,
		Image:          cmp.Or(e.Image, c.Sandbox.DefaultImage),
		WorkingDir:     e.WorkingDir,
		User:           e.User,
		Network:        e.Network,
		Privileged:     e.Privileged,
		CapAdd:         slices.Clone(e.CapAdd),
		CapDrop:        slices.Clone(e.CapDrop),
		SecurityOpt:    slices.Clone(e.SecurityOpt),
		ReadOnlyRootfs: e.ReadOnly,
		Runtime:        e.Runtime,
		TTL:            c.Sandbox.DefaultTTL,
	}
	if e.TTL != nil {
		spec.TTL = *e.TTL
	} else if v, ok := e.Extra[c.entryTTLKey]; ok && c.entryTTLKey != "" {
		if secs, ok := wholeSeconds(v); ok {
			spec.TTL = time.Duration(secs) * time.Second
		} else {
			fail(at("extra", c.entryTTLKey), "want a whole number of seconds, got %s", describeValue(v))
		}
	}
	if len(e.Environment) > 0 {
		spec.Env = maps.Clone(e.Environment)
	}

	if e.Command != nil {
		argv, err := splitCommand(*e.Command)
		switch {
		case err != nil:
			fail(at("command"), "%v", err)
		case len(argv) == 0:
			spec.ImageCommand = true
		default:
			spec.Command = argv
		}
	}

	// Volumes: the entry's, its mounts, then mount_host_paths; each target
	// at most once.
	targets := map[string]string{}
	addVolume := func(k, raw string, v backend.Volume, skip string, err error, report bool) {
		switch {
		case err != nil:
			fail(k, "volume %q: %v", raw, err)
		case skip != "":
			if report {
				warnings = append(warnings, fmt.Sprintf("%s: volume %q: %s (skipped)", k, raw, skip))
			}
		case targets[v.Target] != "":
			fail(k, "volume %q: %s is already mounted by %q", raw, v.Target, targets[v.Target])
		default:
			targets[v.Target] = raw
			spec.Volumes = append(spec.Volumes, v)
		}
	}
	hp := hostPaths{dir: c.Dir, remote: c.remoteHostPaths}
	for _, s := range e.Volumes {
		v, skip, err := parseVolumeOn(s, hp)
		addVolume(at("volumes"), s, v, skip, err, true)
	}
	for _, s := range e.Mounts {
		v, skip, err := parseMount(s, hp)
		addVolume(at("mounts"), s, v, skip, err, true)
	}
	for _, s := range c.Sandbox.MountHostPaths {
		v, skip, err := parseVolumeOn(s, hp)
		if err != nil && loading {
			continue
		}
		addVolume("sandbox.mount_host_paths", s, v, skip, err, false)
	}

	for _, p := range sortedKeys(e.Ports) {
		port, err := parsePort(p, e.Ports[p])
		if err != nil {
			fail(at("ports", p), "%v", err)
			continue
		}
		spec.Ports = append(spec.Ports, port)
	}
	slices.SortFunc(spec.Ports, func(a, b backend.Port) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
	})

	if e.CPUs < 0 || math.IsNaN(e.CPUs) || math.IsInf(e.CPUs, 0) {
		fail(at("cpus"), "want a positive number of CPUs, got %v", e.CPUs)
	}
	if e.PidsLimit < 0 {
		fail(at("pids_limit"), "must not be negative, got %d", e.PidsLimit)
	}
	gpus, err := parseGPUs(e.GPUs)
	if err != nil {
		fail(at("gpus"), "%v", err)
	}
	spec.Resources = backend.Resources{
		CPUs:        e.CPUs,
		MemoryBytes: int64(e.MemLimit),
		PidsLimit:   e.PidsLimit,
		GPUs:        gpus,
		ShmBytes:    int64(e.ShmSize),
	}

	for _, k := range sortedKeys(e.Labels) {
		if strings.HasPrefix(k, backend.LabelPrefix) {
			fail(at("labels", k), "the %s prefix is reserved for sandboxkit's own labels", backend.LabelPrefix)
		}
	}
	if len(e.Labels) > 0 {
		spec.Labels = maps.Clone(e.Labels)
	}

	var dockerfiles []string
	for k, v := range map[string]string{
		"absolute_dockerfile_path":         e.AbsoluteDockerfilePath,
		"agent_relative_dockerfile_path":   e.AgentRelativeDockerfilePath,
		"project_relative_dockerfile_path": e.ProjectRelativeDockerfilePath,
	} {
		if v != "" {
			dockerfiles = append(dockerfiles, k)
		}
	}
	slices.Sort(dockerfiles)
	switch {
	case len(dockerfiles) > 1:
		fail(key.String(), "%s are set; use exactly one", strings.Join(dockerfiles, " and "))
	case len(dockerfiles) == 1:
		df := e.DockerfilePath()
		if !filepath.IsAbs(df) {
			fail(at(dockerfiles[0]), "cannot resolve %q to an absolute path", df)
			break
		}
		spec.Build = &backend.Build{ContextDir: filepath.Dir(df), Dockerfile: df}
		if len(e.BuildArgs) > 0 {
			spec.Build.Args = maps.Clone(e.BuildArgs)
		}
		// The image names what is built, not a base to run.
		spec.Image = cmp.Or(e.Image, DefaultBuildImage(e.Name))
	case len(e.BuildArgs) > 0:
		warnings = append(warnings, fmt.Sprintf("%s: no Dockerfile is set (project_relative_dockerfile_path, ...), so build_args are not used", at("build_args")))
	}

	existingKey := ""
	switch {
	case e.ContainerID != "" && e.PodName != "":
		fail(key.String(), "container_id and pod_name are set; use one")
	case e.ContainerID != "":
		spec.Existing, existingKey = e.ContainerID, "container_id"
	case e.PodName != "" && e.ContainerName != "":
		spec.Existing, existingKey = e.PodName+"/"+e.ContainerName, "pod_name"
	case e.PodName != "":
		spec.Existing, existingKey = e.PodName, "pod_name"
	}
	if spec.Existing != "" && spec.Build != nil {
		fail(key.String(), "%s attaches to an existing container, so nothing is built from %s; remove one of them",
			existingKey, dockerfiles[0])
	}
	return spec, warnings, problems
}

// DefaultBuildImage is the image name an entry with a Dockerfile but no
// image builds: sbx-build/<name>:latest, the name lowercased, with
// characters an image name cannot hold replaced by "-".
func DefaultBuildImage(name string) string {
	n := strings.Trim(notImageNameChar.ReplaceAllString(strings.ToLower(name), "-"), "-._")
	if n == "" {
		n = "sandbox"
	}
	return "sbx-build/" + n + ":latest"
}

var notImageNameChar = regexp.MustCompile(`[^a-z0-9._-]+`)

// parsePort parses a ports key ("8081", "8081/tcp", "53/udp") with its
// binding.
func parsePort(key string, b PortBinding) (backend.Port, error) {
	num, proto, hasProto := strings.Cut(key, "/")
	p := backend.Port{Protocol: "tcp", HostIP: b.HostIP, HostPort: b.HostPort}
	if hasProto {
		p.Protocol = strings.ToLower(proto)
		if p.Protocol != "tcp" && p.Protocol != "udp" {
			return p, fmt.Errorf("protocol %q: want tcp or udp", proto)
		}
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 {
		return p, fmt.Errorf("want PORT or PORT/tcp|udp with PORT in 1-65535, got %q", key)
	}
	p.Port = n
	return p, nil
}

// parseGPUs normalises docker run --gpus values to backend.Resources.GPUs:
// "all", a count, or comma-separated device IDs.
func parseGPUs(s string) (string, error) {
	s = strings.Trim(strings.TrimSpace(s), `"'`)
	switch {
	case s == "" || s == "0":
		return "", nil
	case s == "all":
		return s, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 {
		return s, nil
	}
	if ids, ok := strings.CutPrefix(s, "device="); ok && ids != "" {
		return ids, nil
	}
	if n, ok := strings.CutPrefix(s, "count="); ok {
		return parseGPUs(n)
	}
	return "", fmt.Errorf(`want "all", a count or "device=ID[,ID...]", got %q`, s)
}

// PortBinding is the host side of a published port. In TOML it is a port
// number (0: the backend picks one), a string holding one ("18087",
// "${PORT}", "127.0.0.1:18087"; "" is 0), or a table {host = "127.0.0.1",
// port = 18087}. (OpenSage's null, "let the daemon choose", cannot be written
// in TOML; write 0 or "".)
type PortBinding struct {
	HostIP   string
	HostPort int
}

// UnmarshalTOML implements toml.Unmarshaler.
func (b *PortBinding) UnmarshalTOML(v any) error {
	*b = PortBinding{}
	switch v := v.(type) {
	case int64:
		return b.setPort(v)
	case string:
		s := strings.TrimSpace(v)
		if host, port, err := net.SplitHostPort(s); err == nil {
			b.HostIP, s = host, port
		}
		if s == "" {
			return nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf(`want a host port, "host:port" or {host, port}, got %q`, v)
		}
		return b.setPort(n)
	case map[string]any:
		for _, k := range sortedKeys(v) {
			switch k {
			case "host":
				host, ok := v[k].(string)
				if !ok {
					return fmt.Errorf("host: want text, got %s", describeValue(v[k]))
				}
				b.HostIP = host
			case "port":
				var p PortBinding
				if err := p.UnmarshalTOML(v[k]); err != nil || p.HostIP != "" {
					return fmt.Errorf("port: want a port number, got %s", describeValue(v[k]))
				}
				b.HostPort = p.HostPort
			default:
				return fmt.Errorf("unknown key %q in a port binding (want host, port)%s", k, DidYouMean(k, []string{"host", "port"}))
			}
		}
		return nil
	}
	return fmt.Errorf(`want a host port, "host:port" or {host, port}, got %s`, describeValue(v))
}

func (b *PortBinding) setPort(n int64) error {
	if n < 0 || n > 65535 {
		return fmt.Errorf("host port %d out of range 0-65535", n)
	}
	b.HostPort = int(n)
	return nil
}

// ByteSize is a size in bytes. In TOML it is an integer of bytes or a Docker
// size string: a number with an optional unit b, k, m, g, t or p (optionally
// followed by "b" or "ib", any case; all binary multiples, as Docker uses
// for memory), e.g. "512m", "4g", "1.5g", "4GiB".
type ByteSize int64

// UnmarshalTOML implements toml.Unmarshaler.
func (s *ByteSize) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return fmt.Errorf("must not be negative, got %d", v)
		}
		*s = ByteSize(v)
		return nil
	case string:
		n, err := parseSize(v)
		*s = ByteSize(n)
		return err
	}
	return fmt.Errorf(`want bytes or a size like "512m" or "4g", got %s`, describeValue(v))
}

var sizeRE = regexp.MustCompile(`(?i)^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?$`)

// parseSize parses a Docker size string ("512m", "4g", "1.5GiB", "1024")
// into bytes; "" is 0.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	m := sizeRE.FindStringSubmatch(t)
	if m == nil || (m[2] == "" && strings.EqualFold(m[3], "ib")) {
		return 0, fmt.Errorf(`want bytes or a size like "512m" or "4g", got %q`, s)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	shift := 0 // bytes
	if m[2] != "" {
		shift = strings.Index("kmgtp", strings.ToLower(m[2])) + 1
	}
	f *= math.Pow(1024, float64(shift))
	if f >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(f), nil
}

// wholeSeconds reads a non-negative number of seconds written as an integer,
// a float without a fraction, or a string holding either.
func wholeSeconds(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, n >= 0
	case float64:
		return int64(n), n >= 0 && n == math.Trunc(n) && n < 1<<53
	case string:
		i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		return i, err == nil && i >= 0
	}
	return 0, false
}
