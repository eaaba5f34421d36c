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
	"sync"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
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
// platform, container_name (without pod_name: the container's name) and
// docker_args (see parseDockerArgs) land in the Spec's fields; the backend
// refuses at Create what it cannot honour. The selected backend's
// Factory.EntrySpec applies the [extra] keys it reads per sandbox (lite's
// cpu_max, ...).
//
// Options that backend.Spec cannot carry yet (devices, host_gateway) give
// an error wrapping errors.ErrUnsupported that names the key rather than
// being dropped. [extra] keys that another backend than the selected one
// reads (lite's cpu_max on native) are ignored, as OpenSage's backends
// ignore each other's: ExtraWarnings names them.
//
// A [sandbox] mount_host_paths folder that does not exist on this machine
// is made (0755) by Spec, as Docker makes a missing bind source for
// OpenSage, unless the backend cannot mount host folders: then it is
// skipped with a warning, as missing entry volumes are.
//
// [sandbox] host_shared_mem_dir is mounted read-write at SharedMemTarget
// (/mem/shared) and made on the host (0755) when missing; a backend that
// cannot mount host folders (backend.Factory.NoHostFolders) refuses it
// with an error wrapping errors.ErrUnsupported that names the key and the
// backend.
func (c *Config) Spec(name string) (backend.Spec, error) {
	spec, err := c.CheckSpec(name)
	if err != nil {
		return backend.Spec{}, err
	}
	if err := c.makeSharedMemDir(); err != nil {
		return backend.Spec{}, err
	}
	if err := c.makeMountHostPaths(spec); err != nil {
		return backend.Spec{}, err
	}
	return spec, nil
}

// CheckSpec is Spec without its one effect on the host (making
// host_shared_mem_dir), for checking a config (sbx config check).
func (c *Config) CheckSpec(name string) (backend.Spec, error) {
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
	if err := c.refuseSharedMem(); err != nil {
		return backend.Spec{}, err
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
	add(len(e.Devices) > 0, "devices")
	add(e.HostGateway, "host_gateway")
	return opts
}

// selectedFactory is the factory of the backend the config selects (for
// backend = "auto", the one Open chose; ok false before that).
func (c *Config) selectedFactory() (name string, f backend.Factory, ok bool) {
	if c.reg == nil {
		return "", backend.Factory{}, false
	}
	b := c.Sandbox.Backend
	if b == AutoBackend {
		b = c.Chosen
	}
	return c.reg.resolve(b)
}

// buildSpec makes e's Spec. problems are "key: message" lines; warnings
// name the key too. While loading, malformed mount_host_paths are left to
// the caller, which reports them once for the file rather than per entry.
func (c *Config) buildSpec(e *Entry, loading bool) (spec backend.Spec, warnings, problems []string) {
	b := &specBuilder{c: c, e: e, key: entryKey(e.Name), loading: loading}
	b.spec = backend.Spec{
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
		Runtime:        c.entryRuntime(e),
		Platform:       e.Platform,
		TTL:            c.Sandbox.DefaultTTL,
	}
	if e.PodName == "" {
		b.spec.ContainerName = e.ContainerName // with pod_name: existing's
	}
	if len(e.Environment) > 0 {
		b.spec.Env = maps.Clone(e.Environment)
	}
	b.ttl()
	b.command()
	b.volumes()
	b.ports()
	b.resources()
	b.labels()
	b.dockerArgs()
	b.platform()
	b.build()
	b.existing()
	b.sharedMem()
	b.extras()
	b.pool()
	b.egress()
	b.credentials()
	return b.spec, b.warnings, b.problems
}

// egress checks the entry's egress policy and puts it in the Spec.
func (b *specBuilder) egress() {
	e := b.e.Egress
	if e == nil {
		return
	}
	if _, err := egress.NewPolicy(e.Default, e.Allow, e.Deny); err != nil {
		b.fail(b.at("egress"), "%v", err)
		return
	}
	if b.spec.Network == "host" || b.spec.Network == "none" {
		b.fail(b.at("egress"), "network = %q and an egress policy exclude each other (remove one)", b.spec.Network)
		return
	}
	b.spec.Egress = &backend.Egress{Default: e.Default, Allow: slices.Clone(e.Allow), Deny: slices.Clone(e.Deny)}
}

// pool checks [sandbox.sandboxes.NAME.pool].
func (b *specBuilder) pool() {
	p := b.e.Pool
	if p == nil {
		return
	}
	switch {
	case p.Size < 1 || p.Size > MaxPoolSize:
		b.fail(b.at("pool", "size"), "want 1 to %d ready sandboxes, got %d (remove the [pool] table for no pool)", MaxPoolSize, p.Size)
	case p.MaxIdle < 0:
		b.fail(b.at("pool", "max_idle"), "must not be negative, got %s", p.MaxIdle)
	case p.MaxIdle > 0 && p.MaxIdle < time.Second:
		b.fail(b.at("pool", "max_idle"), "want at least 1s, got %s", p.MaxIdle)
	case p.Refill < 0:
		b.fail(b.at("pool", "refill"), "must not be negative, got %d", p.Refill)
	case b.e.ContainerID != "" || b.e.PodName != "":
		b.fail(b.at("pool"), "an entry that attaches to an existing container (container_id, pod_name) cannot have a pool")
	case b.spec.ContainerName != "":
		b.fail(b.at("pool"), "container_name %q names one container, and a pool keeps several; remove container_name (or docker_args --name) or the [pool] table", b.spec.ContainerName)
	}
}

// platformRE is docker's --platform form: os/arch[/variant].
var platformRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$`) })

// platform checks the image platform (platform, or docker_args --platform).
func (b *specBuilder) platform() {
	p := strings.ToLower(b.spec.Platform)
	if p != "" && !platformRE().MatchString(p) {
		b.fail(b.at("platform"), `want "os/arch[/variant]" as docker run --platform takes, e.g. "linux/amd64" or "linux/arm64/v8", got %q`, b.spec.Platform)
	}
	b.spec.Platform = p
}

// extras applies the selected backend's per-entry [extra] keys
// (backend.Factory.EntrySpec).
func (b *specBuilder) extras() {
	_, f, ok := b.c.selectedFactory()
	if !ok || f.EntrySpec == nil {
		return
	}
	extra := b.e.Extra
	if extra == nil {
		extra = map[string]any{}
	}
	if err := f.EntrySpec(extra, &b.spec); err != nil {
		b.problems = append(b.problems, b.at("extra")+"."+err.Error())
	}
}

// addVolume adds a parsed volume spec raw of key k: an error, a skip
// (warned about when report), or a volume whose target is not mounted yet.
func (b *specBuilder) addVolume(k, raw string, v backend.Volume, skip string, err error, report bool) {
	if b.targets == nil {
		b.targets = map[string]string{}
	}
	switch {
	case err != nil:
		b.fail(k, "volume %q: %v", raw, err)
	case skip != "":
		if report {
			b.warnings = append(b.warnings, fmt.Sprintf("%s: volume %q: %s (skipped)", k, raw, skip))
		}
	case b.targets[v.Target] != "":
		b.fail(k, "volume %q: %s is already mounted by %q", raw, v.Target, b.targets[v.Target])
	default:
		b.targets[v.Target] = raw
		b.spec.Volumes = append(b.spec.Volumes, v)
	}
}

func (b *specBuilder) hostPaths() hostPaths {
	return hostPaths{dir: b.c.Dir, remote: b.c.remoteHostPaths}
}

// specBuilder holds one entry's Spec while buildSpec fills it, key by key.
type specBuilder struct {
	c        *Config
	e        *Entry
	key      toml.Key
	loading  bool
	spec     backend.Spec
	warnings []string
	problems []string
	// dockerfile is the Dockerfile key that is set, for existing's message.
	dockerfile string
	// targets maps each volume target to the spec that mounts it.
	targets map[string]string
}

// at is the dotted key of one of the entry's keys.
func (b *specBuilder) at(k ...string) string { return slices.Concat(b.key, toml.Key(k)).String() }

func (b *specBuilder) fail(k, format string, args ...any) {
	b.problems = append(b.problems, k+": "+fmt.Sprintf(format, args...))
}

// ttl: the entry's ttl, else the backend's [extra] TTL key, else
// default_ttl (already set).
func (b *specBuilder) ttl() {
	e, k := b.e, b.c.entryTTLKey
	if e.TTL != nil {
		b.spec.TTL = *e.TTL
		return
	}
	if v, ok := e.Extra[k]; ok && k != "" {
		if secs, ok := wholeSeconds(v); ok {
			b.spec.TTL = time.Duration(secs) * time.Second
		} else {
			b.fail(b.at("extra", k), "want a whole number of seconds, got %s", describeValue(v))
		}
	}
}

func (b *specBuilder) command() {
	if b.e.Command == nil {
		return
	}
	argv, shell, err := splitCommand(*b.e.Command)
	switch {
	case err != nil:
		b.fail(b.at("command"), "%v", err)
	case shell:
		b.spec.Command = []string{"/bin/sh", "-c", *b.e.Command}
	case len(argv) == 0:
		b.spec.ImageCommand = true
	default:
		b.spec.Command = argv
	}
}

// volumes: the entry's, its mounts, then mount_host_paths; each target at
// most once.
func (b *specBuilder) volumes() {
	add := b.addVolume
	hp := b.hostPaths()
	for _, s := range b.e.Volumes {
		v, skip, err := parseVolumeOn(s, hp)
		add(b.at("volumes"), s, v, skip, err, true)
	}
	for _, s := range b.e.Mounts {
		v, skip, err := parseMount(s, hp)
		add(b.at("mounts"), s, v, skip, err, true)
	}
	for _, s := range b.c.Sandbox.MountHostPaths {
		v, skip, err := parseVolumeOn(s, hp)
		if err != nil && b.loading {
			continue
		}
		if skip != "" && b.c.makesHostPaths() {
			skip = "" // made by Spec, as Docker makes it for OpenSage
		}
		add("sandbox.mount_host_paths", s, v, skip, err, false)
	}
}

func (b *specBuilder) ports() {
	for _, p := range sortedKeys(b.e.Ports) {
		port, err := parsePort(p, b.e.Ports[p])
		if err != nil {
			b.fail(b.at("ports", p), "%v", err)
			continue
		}
		b.spec.Ports = append(b.spec.Ports, port)
	}
	slices.SortFunc(b.spec.Ports, comparePorts)
}

func comparePorts(x, y backend.Port) int {
	return cmp.Or(cmp.Compare(x.Port, y.Port), cmp.Compare(x.Protocol, y.Protocol))
}

func (b *specBuilder) resources() {
	e := b.e
	if c := e.CPUs.Quota; c != 0 && !(c >= backend.MinCPUs && c <= backend.MaxCPUs) {
		// Out of range a quota silently becomes "no limit" or overflows.
		b.fail(b.at("cpus"), "want 0 (no limit) or %v to %v CPUs, got %v", backend.MinCPUs, float64(backend.MaxCPUs), c)
	}
	if w := e.CPUs.bareNumberWarning(b.at("cpus")); w != "" {
		b.warnings = append(b.warnings, w)
	}

	if e.PidsLimit < 0 {
		b.fail(b.at("pids_limit"), "must not be negative, got %d", e.PidsLimit)
	}
	gpus, err := parseGPUs(e.GPUs)
	if err != nil {
		b.fail(b.at("gpus"), "%v", err)
	}
	b.spec.Resources = backend.Resources{
		CPUs:        e.CPUs.Quota,
		MemoryBytes: int64(e.MemLimit),
		PidsLimit:   e.PidsLimit,
		GPUs:        gpus,
		ShmBytes:    int64(e.ShmSize),
	}
}

func (b *specBuilder) labels() {
	for _, k := range sortedKeys(b.e.Labels) {
		if strings.HasPrefix(k, backend.LabelPrefix) {
			b.fail(b.at("labels", k), "the %s prefix is reserved for sandboxkit's own labels", backend.LabelPrefix)
		}
	}
	if len(b.e.Labels) > 0 {
		b.spec.Labels = maps.Clone(b.e.Labels)
	}
	if set := b.e.CPUs.Set; set != "" {
		// A CPU set travels as a label (see LabelCPUSet).
		if b.spec.Labels == nil {
			b.spec.Labels = map[string]string{}
		}
		b.spec.Labels[LabelCPUSet] = set
	}
}

// build: a Dockerfile key with build_args becomes Spec.Build.
// absolute_dockerfile_path wins over a relative key (OpenSage's files often
// set both); the two relative keys are exclusive.
func (b *specBuilder) build() {
	e := b.e
	if e.AgentRelativeDockerfilePath != "" && e.ProjectRelativeDockerfilePath != "" && e.AbsoluteDockerfilePath == "" {
		b.fail(b.key.String(), "agent_relative_dockerfile_path and project_relative_dockerfile_path are set; use one (or absolute_dockerfile_path, which wins over both)")
		return
	}
	key := e.dockerfileKey()
	switch {
	case key != "":
		b.dockerfile = key
		df := e.DockerfilePath()
		if !filepath.IsAbs(df) {
			b.fail(b.at(key), "cannot resolve %q to an absolute path", df)
			return
		}
		b.spec.Build = &backend.Build{ContextDir: filepath.Dir(df), Dockerfile: df}
		if len(e.BuildArgs) > 0 {
			b.spec.Build.Args = maps.Clone(e.BuildArgs)
		}
		// The image names what is built, not a base to run.
		b.spec.Image = cmp.Or(e.Image, DefaultBuildImage(e.Name))
	case len(e.BuildArgs) > 0:
		b.warnings = append(b.warnings, fmt.Sprintf("%s: no Dockerfile is set (project_relative_dockerfile_path, ...), so build_args are not used", b.at("build_args")))
	}
}

// existing: container_id, or pod_name (with container_name), attaches to
// a running container instead of making one.
func (b *specBuilder) existing() {
	e, key := b.e, b.key.String()
	existingKey := ""
	switch {
	case e.ContainerID != "" && e.PodName != "":
		b.fail(key, "container_id and pod_name are set; use one")
	case e.ContainerID != "" && b.spec.ContainerName != "":
		b.fail(key, "container_id attaches to an existing container, so container_name %q names nothing; remove one of them", b.spec.ContainerName)
	case e.ContainerID != "":
		b.spec.Existing, existingKey = e.ContainerID, "container_id"
	case e.PodName != "" && e.ContainerName != "":
		b.spec.Existing, existingKey = e.PodName+"/"+e.ContainerName, "pod_name"
	case e.PodName != "":
		b.spec.Existing, existingKey = e.PodName, "pod_name"
	}
	if b.spec.Existing != "" && b.spec.Build != nil {
		b.fail(key, "%s attaches to an existing container, so nothing is built from %s; remove one of them",
			existingKey, b.dockerfile)
	}
}

// DefaultBuildImage is the image name an entry with a Dockerfile but no
// image builds: sbx-build/<name>:latest, the name lowercased, with
// characters an image name cannot hold replaced by "-".
func DefaultBuildImage(name string) string {
	n := strings.Trim(notImageNameChar().ReplaceAllString(strings.ToLower(name), "-"), "-._")
	if n == "" {
		n = "sandbox"
	}
	return "sbx-build/" + n + ":latest"
}

var notImageNameChar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^a-z0-9._-]+`) })

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

var sizeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)^(\d+(?:\.\d+)?)\s*([kmgtp]?)(i?b)?$`) })

// parseSize parses a Docker size string ("512m", "4g", "1.5GiB", "1024")
// into bytes; "" is 0.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, nil
	}
	m := sizeRE().FindStringSubmatch(t)
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

// envName matches the variable names a sandbox's placeholder may take.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// credentials checks the entry's credentials and puts them in the Spec:
// each names its hosts (names the entry's egress policy allows), exactly
// one place for the value and exactly one source.
func (b *specBuilder) credentials() {
	for _, key := range slices.Sorted(maps.Keys(b.e.Credentials)) {
		c, at := b.e.Credentials[key], b.at("credentials", key)
		if c == nil {
			continue
		}
		if b.e.Egress == nil {
			b.fail(at, "credentials need an egress policy (egress = { ... } in the entry): its enforcer adds them, outside the sandbox")
			continue
		}
		pol, err := egress.NewPolicy(b.e.Egress.Default, b.e.Egress.Allow, b.e.Egress.Deny)
		if err != nil {
			continue // egress() said why
		}
		cred := &egress.Credential{Name: key, Header: c.Header, Format: c.Format, Query: c.Query, BasicUser: c.BasicUser}
		bad := false
		for i, h := range c.Hosts {
			r, err := egress.ParseRule(h)
			if err != nil {
				b.fail(b.at("credentials", key, "hosts"), "hosts[%d] %q: %v", i, h, err)
				bad = true
				continue
			}
			name, port := r.Domain, uint16(443)
			if r.Wildcard {
				name = "any." + name
			}
			if len(r.Ports) > 0 {
				port = r.Ports[0].Lo
			}
			if r.Domain != "" && !pol.AllowName(name, port) {
				b.fail(b.at("credentials", key, "hosts"), "hosts[%d] %q: the entry's egress policy does not allow it (allow it in egress, or drop the host)", i, h)
				bad = true
			}
			cred.Hosts = append(cred.Hosts, r)
		}
		if bad {
			continue
		}
		if err := cred.Check(); err != nil {
			b.fail(at, "%s", strings.TrimPrefix(err.Error(), "credential "+key+": "))
			continue
		}
		if c.Env != "" && !envName.MatchString(c.Env) {
			b.fail(b.at("credentials", key, "env"), "%q is not a variable name (letters, digits and _, not starting with a digit)", c.Env)
			continue
		}
		src := backend.CredentialSource{Env: c.FromEnv, File: c.FromFile}
		if c.FromCommand != "" {
			src.Command = []string{"sh", "-c", c.FromCommand}
		}
		n := 0
		for _, set := range []bool{c.FromEnv != "", c.FromFile != "", c.FromCommand != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			b.fail(at, "give exactly one source of the value: from_env, from_file or from_command")
			continue
		}
		src.File = b.c.HostPath(src.File)
		b.spec.Credentials = append(b.spec.Credentials, backend.Credential{Name: key, Hosts: slices.Clone(c.Hosts),
			Header: c.Header, Format: c.Format, Query: c.Query, BasicUser: c.BasicUser, Env: c.Env, From: src})
	}
}
