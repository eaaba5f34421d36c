package config

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// EnvConfig names the environment variable LoadConfig reads the config
// file's path from when none is given.
const EnvConfig = "SBX_CONFIG"

// DefaultConfigFile is the file LoadConfig uses, when it exists in the
// current directory, if neither a path nor SBX_CONFIG is given.
const DefaultConfigFile = "sandbox.toml"

// DefaultBackend is the backend of a config file without a [sandbox]
// backend key: OpenSage's default, Docker on this machine. (Only the
// embedded default config, used when there is no file at all, runs on
// local, and it says so in its Warnings.)
const DefaultBackend = "native"

// AutoBackend is the [sandbox] backend value that picks the strongest
// isolation this machine can run now; see Registry.Open.
const AutoBackend = "auto"

// LocalNotice is the warning of a config whose commands run as host
// processes without the user having asked for it (the embedded default, or
// backend = "auto" on a machine without Docker, Podman or runc).
const LocalNotice = "commands run as processes on this machine, without isolation (the local backend); " +
	"for isolation write a sandbox.toml with [sandbox] backend = \"auto\" (Docker, Podman or runc, whichever this machine runs) " +
	"or pass --backend native; writing backend = \"local\" yourself silences this notice"

// Defaults of [sandbox] keys.
const (
	DefaultTTL            = 24 * time.Hour
	DefaultExecuteTimeout = 1800 * time.Second
)

//go:embed default.toml
var defaultConfig []byte

// Config is a loaded config file: the [sandbox] table, typed and checked,
// the root [build] table (Build) and the root [mcp.services.NAME] tables
// (MCPServices). Everything else in the file belongs to the program
// embedding sandboxkit and is ignored here.
type Config struct {
	// Path is the file loaded ("" for the embedded default).
	Path string
	// Dir is the folder relative host paths resolve against: Path's folder,
	// or the current directory for the embedded default.
	Dir string
	// WorkDir is the current directory when the file was loaded: a
	// relative absolute_shared_data_path resolves against it, as OpenSage
	// resolves it.
	WorkDir string
	// ProjectRoot is the folder project_relative_* keys resolve against,
	// and ProjectRootFrom says where it came from ([sandbox] project_root,
	// $SBX_PROJECT_ROOT, the nearest folder holding .git, pyproject.toml,
	// go.mod or setup.py at or above Dir, else Dir itself).
	ProjectRoot, ProjectRootFrom string
	Sandbox                      SandboxConfig
	// Chosen is the backend that backend = "auto" opened ("" before Open,
	// or when the backend is named).
	Chosen string
	// Warnings are problems that did not stop loading, such as a volume
	// whose host path does not exist (skipped). Show them to the user.
	Warnings []string

	backends map[string]any // decoded [sandbox.NAME] tables by backend name
	build    BuildConfig    // the root [build] table (build.go)
	// secure is the root [secure_runtime] table (runtime.go).
	secure SecureRuntime
	// mcp holds the root [mcp.services.NAME] tables (mcp.go).
	mcp map[string]MCPService
	// noSandboxTable: the file has no [sandbox] table (OpenSage: an agent
	// without sandboxes).
	noSandboxTable bool
	reg            *Registry // the registry that parsed the file
	// ttlWritten: the file sets [sandbox] default_ttl (else the backend
	// may choose it; see backend.Factory.DefaultTTL).
	ttlWritten bool
	// entryTTLKey is the selected backend's backend.Factory.EntryTTLKey.
	entryTTLKey string
	// remoteHostPaths names the selected backend when its host paths are
	// on another machine (backend.Factory.RemoteHostPaths).
	remoteHostPaths string
}

// SandboxConfig is the [sandbox] table. The keys are OpenSage's plus a few of
// ours (default_ttl, tools); see config.example.toml for each one.
type SandboxConfig struct {
	// Backend names the backend (a registry name or alias). Default
	// "native" (DefaultBackend).
	Backend      string `toml:"backend"`
	DefaultImage string `toml:"default_image"`
	// DefaultTTL is the TTL of entries without their own ttl (0: no
	// expiry). Default 24h.
	DefaultTTL time.Duration `toml:"default_ttl"`
	// Runtime is the runtime of entries without their own runtime key:
	// "runc", "gvisor", "kata", "firecracker" or a runtime name of the
	// backend's engine. "": the backend's default (or [secure_runtime]
	// type).
	Runtime string `toml:"runtime"`
	// ToolsConfig holds [sandbox.tools]; its fields are promoted
	// (cfg.Sandbox.ExecuteTimeout).
	ToolsConfig `toml:"tools"`

	// ProjectRoot is the folder project_relative_* keys resolve against
	// (relative to the config file's folder; "~" allowed). "": see
	// Config.ProjectRoot.
	ProjectRoot string `toml:"project_root"`
	// Data copied into the /shared volume: a folder or a .tar.gz. See
	// Config.SharedDataPath.
	AbsoluteSharedDataPath        string `toml:"absolute_shared_data_path"`
	ProjectRelativeSharedDataPath string `toml:"project_relative_shared_data_path"`
	// BashToolsPath and SandboxScriptsPath are host folders (relative to
	// the config file's folder) whose contents fill a session's bash_tools
	// (read-write) and sandbox_scripts (read-only) volumes.
	BashToolsPath      string `toml:"bash_tools_path"`
	SandboxScriptsPath string `toml:"sandbox_scripts_path"`
	// HostSharedMemDir is an absolute host folder ("~" allowed), made
	// (0755) when missing and mounted read-write at Paths.MemRoot + "/shared"
	// (/mem/shared) in every sandbox, as OpenSage does. Backends that cannot
	// mount a host folder refuse it (backend.Factory.NoHostFolders).
	HostSharedMemDir string `toml:"host_shared_mem_dir"`
	// MountHostPaths are volume specs (host:sandbox[:ro|rw]) added to
	// every entry.
	MountHostPaths []string `toml:"mount_host_paths"`
	// Tolerations are Kubernetes tolerations for every pod, kept as written.
	Tolerations []map[string]any `toml:"tolerations"`
	// DockerHost is the Docker daemon URL (ssh://user@host, tcp://...);
	// DockerRemoteHost the address services on that daemon are reached at.
	DockerHost       string `toml:"docker_host"`
	DockerRemoteHost string `toml:"docker_remote_host"`
	// Paths are well-known folders inside every sandbox.
	Paths PathsConfig `toml:"paths"`
	// Serve is [sandbox.serve], the settings of sbx serve and sbx mcp.
	Serve ServeConfig `toml:"serve"`

	// Sandboxes are the [sandbox.sandboxes.NAME] entries by name.
	Sandboxes map[string]*Entry `toml:"sandboxes"`
}

// ToolsConfig is [sandbox.tools]: settings of the agent tools (fileops).
type ToolsConfig struct {
	// ExecuteTimeout is the default timeout of the execute tool. TOML:
	// execute_timeout_sec, in seconds. Default 1800.
	ExecuteTimeout time.Duration `toml:"execute_timeout_sec"`
}

// PathsConfig is [sandbox.paths]: where the shared volumes appear inside
// each sandbox.
type PathsConfig struct {
	MemRoot        string `toml:"mem_root"`        // default /mem
	Shared         string `toml:"shared"`          // default /shared
	BashTools      string `toml:"bash_tools"`      // default /bash_tools
	SandboxScripts string `toml:"sandbox_scripts"` // default /sandbox_scripts
	Src            string `toml:"src"`             // default /src
}

// Entry is one [sandbox.sandboxes.NAME] table, as written (after template
// expansion and type coercion). Config.Spec turns it into a backend.Spec.
//
// Durations (timeout, ttl) are written as integer seconds or Go duration
// strings ("90s", "24h"). Sizes (mem_limit, shm_size) are bytes or Docker
// size strings ("512m", "4g", "1.5GiB").
type Entry struct {
	// Name is the entry's key in [sandbox.sandboxes].
	Name string `toml:"-"`
	// Type selects the initializer; default Name. Names without a built-in
	// initializer get the generic one (a plain sandbox from these keys).
	Type  string `toml:"type"`
	Image string `toml:"image"`
	// ContainerID and PodName (with ContainerName picking the pod's
	// container) attach to an existing container or pod instead of
	// creating one (OpenSage); without PodName, ContainerName is the name
	// of the container made (Spec.ContainerName).
	ContainerID string `toml:"container_id"`
	// Timeout is OpenSage's Docker client timeout per API call; sandboxkit
	// has no counterpart (each step has its own deadline), so it is
	// accepted, warned about and ignored.
	Timeout       time.Duration `toml:"timeout"`
	PodName       string        `toml:"pod_name"`
	ContainerName string        `toml:"container_name"`

	Platform    string   `toml:"platform"`
	Network     string   `toml:"network"`
	Privileged  bool     `toml:"privileged"`
	SecurityOpt []string `toml:"security_opt"`
	CapAdd      []string `toml:"cap_add"`
	CapDrop     []string `toml:"cap_drop"`
	Devices     []string `toml:"devices"`
	// GPUs is "all", a count, or "device=ID[,ID...]" as in docker run --gpus.
	GPUs     string   `toml:"gpus"`
	ShmSize  ByteSize `toml:"shm_size"`
	MemLimit ByteSize `toml:"mem_limit"`
	// CPUs is a CPU quota (a number) or a CPU set (text, "0,1"); see
	// CPULimit.
	CPUs      CPULimit `toml:"cpus"`
	PidsLimit int64    `toml:"pids_limit"`
	ReadOnly  bool     `toml:"read_only"`
	Runtime   string   `toml:"runtime"`

	User       string `toml:"user"`
	WorkingDir string `toml:"working_dir"`
	// Environment values may be written as strings, numbers or booleans.
	Environment map[string]string `toml:"environment"`
	// Volumes are "host:sandbox[:ro|rw]" specs as written; a host part
	// without "/" that does not start with "." or "~" names a volume.
	Volumes []string `toml:"volumes"`
	// Mounts are docker --mount specs: "type=bind,source=...,target=...".
	Mounts []string `toml:"mounts"`
	// Ports maps "PORT[/tcp|/udp]" inside the sandbox to a host binding.
	Ports map[string]PortBinding `toml:"ports"`
	// DockerArgs are docker run flags, mapped onto the Spec's fields (see
	// config.example.toml for the flags taken; others are refused).
	DockerArgs []string `toml:"docker_args"`

	// Where the image's Dockerfile is (at most one; see DockerfilePath)
	// and its build arguments.
	ProjectRelativeDockerfilePath string            `toml:"project_relative_dockerfile_path"`
	AgentRelativeDockerfilePath   string            `toml:"agent_relative_dockerfile_path"`
	AbsoluteDockerfilePath        string            `toml:"absolute_dockerfile_path"`
	BuildArgs                     map[string]string `toml:"build_args"`

	// Command is the main process: nil (key absent) keeps the sandbox
	// alive doing nothing; "" runs the image's own command; anything else
	// is split into argv with shell quoting rules (no shell is run), unless
	// it holds unquoted shell syntax (| & ; < > ` $( ): then /bin/sh -c
	// runs it.
	Command     *string  `toml:"command"`
	UsingCached bool     `toml:"using_cached"`
	MCPServices []string `toml:"mcp_services"`
	// HostGateway makes the host reachable from the sandbox as
	// host.docker.internal.
	HostGateway bool `toml:"host_gateway"`

	// TTL overrides [sandbox] default_ttl for this entry (0: no expiry).
	TTL *time.Duration `toml:"ttl"`
	// Labels are added to the sandbox's labels.
	Labels map[string]string `toml:"labels"`
	// Pool keeps ready sandboxes of this entry (see session.Pool); nil:
	// no pool, every sandbox is made when asked for.
	Pool *PoolConfig `toml:"pool"`
	// Egress limits what the sandbox may reach on the network:
	// egress = { default = "deny", allow = ["*.pypi.org:443"], deny = [] }
	// (see backend.Egress for the rules). Absent: no policy.
	Egress *EgressConfig `toml:"egress"`
	// Credentials are secrets brokered at the egress boundary, by key:
	// the sandbox never holds them (see backend.Credential).
	Credentials map[string]*CredentialConfig `toml:"credentials"`
	// Extra is free-form, for initializers and backends
	// (initializer_timeout_sec, namespace, ...).
	Extra map[string]any `toml:"extra"`

	dir  string // the config file's folder
	root string // the project root (Config.ProjectRoot)
}

// EgressConfig is an entry's egress table: the default for what no rule
// matches ("deny" when absent, or "allow") and the allow and deny rules.
type EgressConfig struct {
	Default string   `toml:"default"`
	Allow   []string `toml:"allow"`
	Deny    []string `toml:"deny"`
}

// CredentialConfig is an entry's [sandbox.sandboxes.NAME.credentials.KEY]
// table:
//
//	hosts = ["api.openai.com:443"]     # egress rules of names
//	header = "Authorization"           # or query = "key", or basic_user = "ci"
//	format = "Bearer {value}"          # with header; default "{value}"
//	env = "OPENAI_API_KEY"             # the sandbox's placeholder variable
//	from_env = "OPENAI_API_KEY"        # or from_file = "...", or from_command = "..."
type CredentialConfig struct {
	Hosts       []string `toml:"hosts"`
	Header      string   `toml:"header"`
	Format      string   `toml:"format"`
	Query       string   `toml:"query"`
	BasicUser   string   `toml:"basic_user"`
	Env         string   `toml:"env"`
	FromEnv     string   `toml:"from_env"`
	FromFile    string   `toml:"from_file"`
	FromCommand string   `toml:"from_command"`
}

// PoolConfig is an entry's [sandbox.sandboxes.NAME.pool] table.
type PoolConfig struct {
	// Size is how many ready sandboxes a keeper keeps (1 to MaxPoolSize).
	Size int `toml:"size"`
	// MaxIdle: a ready sandbox older than this is replaced by a fresh one
	// (default DefaultPoolMaxIdle; written like ttl).
	MaxIdle time.Duration `toml:"max_idle"`
	// Refill is how many sandboxes a keeper makes at once (default
	// DefaultPoolRefill, at most Size).
	Refill int `toml:"refill"`
	// Reuse hands a used sandbox back to the pool after a Reset where the
	// backend's Reset is provably clean (lite); elsewhere used sandboxes
	// are always removed. Default true; false always removes them.
	Reuse *bool `toml:"reuse"`
}

// Pool defaults and bounds.
const (
	DefaultPoolMaxIdle = 30 * time.Minute
	DefaultPoolRefill  = 2
	MaxPoolSize        = 1000
)

// PoolSettings returns the entry's pool with defaults filled in, or nil
// when the entry has none.
func (e *Entry) PoolSettings() *PoolConfig {
	if e.Pool == nil {
		return nil
	}
	p := *e.Pool
	p.MaxIdle = cmp.Or(p.MaxIdle, DefaultPoolMaxIdle)
	p.Refill = min(cmp.Or(p.Refill, DefaultPoolRefill), max(p.Size, 1))
	if p.Reuse == nil {
		t := true
		p.Reuse = &t
	}
	return &p
}

// ReuseOn reports whether used sandboxes may go back to the pool.
func (p *PoolConfig) ReuseOn() bool { return p.Reuse == nil || *p.Reuse }

// DockerfilePath returns the entry's Dockerfile as an absolute host path
// ("" if none is set): absolute_dockerfile_path, which wins over the
// others as in OpenSage, else agent_relative_dockerfile_path (relative to
// the config file's folder), else project_relative_dockerfile_path
// (relative to the project root, Config.ProjectRoot). "~" is expanded.
func (e *Entry) DockerfilePath() string {
	p, dir := e.AbsoluteDockerfilePath, e.dir
	switch e.dockerfileKey() {
	case "":
		return ""
	case "agent_relative_dockerfile_path":
		p = e.AgentRelativeDockerfilePath
	case "project_relative_dockerfile_path":
		p, dir = e.ProjectRelativeDockerfilePath, e.root
	}
	abs, err := resolveHostPath(p, dir)
	if err != nil {
		return p
	}
	return abs
}

// dockerfileKey is the Dockerfile key DockerfilePath reads ("" when none
// is set).
func (e *Entry) dockerfileKey() string {
	switch {
	case e.AbsoluteDockerfilePath != "":
		return "absolute_dockerfile_path"
	case e.AgentRelativeDockerfilePath != "":
		return "agent_relative_dockerfile_path"
	case e.ProjectRelativeDockerfilePath != "":
		return "project_relative_dockerfile_path"
	}
	return ""
}

// BackendConfig returns the decoded [sandbox.NAME] table of a registered
// backend (the pointer its NewConfig returned), or nil if the file has none.
func (c *Config) BackendConfig(name string) any { return c.backends[name] }

// SandboxNames returns the entry names, sorted.
func (c *Config) SandboxNames() []string { return slices.Sorted(maps.Keys(c.Sandbox.Sandboxes)) }

// NothingToLaunch returns nil when the config has sandbox entries, and
// otherwise an error wrapping backend.ErrInvalidConfig that names the
// missing table and how to add one. A config without entries is valid (an
// OpenSage agent that uses no sandbox); only launching from it fails.
func (c *Config) NothingToLaunch() error {
	if len(c.Sandbox.Sandboxes) > 0 {
		return nil
	}
	missing := "[sandbox.sandboxes.NAME] tables"
	if c.noSandboxTable {
		missing = "[sandbox] table"
	}
	return invalidf(`%s: nothing to launch: the file has no %s (add one, e.g. [sandbox.sandboxes.main] with image = "ubuntu:24.04")`,
		c.Describe(), missing)
}

// Entry returns the named entry. An unknown name gives an error wrapping
// backend.ErrInvalidConfig that lists the known ones.
func (c *Config) Entry(name string) (*Entry, error) {
	if e, ok := c.Sandbox.Sandboxes[name]; ok && e != nil {
		return e, nil
	}
	known := strings.Join(c.SandboxNames(), ", ")
	if known == "" {
		known = "none"
	}
	return nil, invalidf("%s: unknown sandbox %q (known: %s)", c.Describe(), name, known)
}

// SharedDataPath returns the data to copy into the shared volume as an
// absolute host path: absolute_shared_data_path (a relative one resolves
// against the working directory it was loaded from, WorkDir, as OpenSage
// resolves it), else project_relative_shared_data_path resolved against
// the project root (Config.ProjectRoot), else "". It need not exist: see
// SharedDataWarning.
func (c *Config) SharedDataPath() string {
	switch c.sharedDataKey() {
	case "absolute_shared_data_path":
		abs, err := resolveHostPath(c.Sandbox.AbsoluteSharedDataPath, cmp.Or(c.WorkDir, c.Dir))
		if err != nil {
			return c.Sandbox.AbsoluteSharedDataPath
		}
		return abs
	case "project_relative_shared_data_path":
		return c.ProjectPath(c.Sandbox.ProjectRelativeSharedDataPath)
	}
	return ""
}

// sharedDataKey is the [sandbox] key SharedDataPath reads ("" when none
// is set): absolute wins, as in OpenSage.
func (c *Config) sharedDataKey() string {
	switch {
	case c.Sandbox.AbsoluteSharedDataPath != "":
		return "absolute_shared_data_path"
	case c.Sandbox.ProjectRelativeSharedDataPath != "":
		return "project_relative_shared_data_path"
	}
	return ""
}

// HostPath resolves a host path written in the config: "~" expanded,
// relative to the config file's folder ("" stays "").
func (c *Config) HostPath(p string) string {
	if p == "" {
		return ""
	}
	abs, err := resolveHostPath(p, c.Dir)
	if err != nil {
		return p
	}
	return abs
}

// SetBackend selects another backend than the file's [sandbox] backend (as
// sbx --backend does) and re-derives what depends on it: default_ttl when the
// file does not set it, and how volume host paths are read.
func (c *Config) SetBackend(name string) error {
	if c.reg == nil {
		return errNoRegistry
	}
	if name != AutoBackend {
		if _, err := c.reg.Lookup(name); err != nil {
			return err
		}
	}
	c.Sandbox.Backend = name
	c.applyBackend()
	return nil
}

// Registry is the registry that parsed the config (nil for a Config not
// made by LoadConfig or ParseConfig).
func (c *Config) Registry() *Registry { return c.reg }

// Open opens the config's backend through the registry that parsed it; see
// Registry.Open. logger may be nil (discard).
func (c *Config) Open(ctx context.Context, logger *slog.Logger) (backend.Backend, error) {
	if c.reg == nil {
		return nil, errNoRegistry
	}
	return c.reg.Open(ctx, c, logger)
}

var errNoRegistry = invalidf("config: this Config was not made by a Registry's LoadConfig or ParseConfig, so it knows no backends")

// settings is what a backend factory may read of a config besides its own
// table (backend.Settings).
type settings struct{ c *Config }

func (s settings) HostPath(key, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	abs, err := resolveHostPath(p, s.c.Dir)
	if err != nil {
		return "", invalidf("%s: %v", key, err)
	}
	return abs, nil
}

func (s settings) DefaultImage() string          { return s.c.Sandbox.DefaultImage }
func (s settings) DockerHost() string            { return s.c.Sandbox.DockerHost }
func (s settings) DockerRemoteHost() string      { return s.c.Sandbox.DockerRemoteHost }
func (s settings) Tolerations() []map[string]any { return s.c.Sandbox.Tolerations }
func (s settings) Extras(key string) map[string]any {
	out := map[string]any{}
	for name, e := range s.c.Sandbox.Sandboxes {
		if e == nil {
			continue
		}
		if v, ok := e.Extra[key]; ok {
			out[name] = v
		}
	}
	return out
}

// applyBackend derives the settings that depend on the selected backend.
func (c *Config) applyBackend() {
	c.entryTTLKey, c.remoteHostPaths = "", ""
	c.Warnings = slices.DeleteFunc(c.Warnings, func(w string) bool { return w == LocalNotice })
	if c.Path == "" && c.Sandbox.Backend == "local" {
		// The embedded default: nobody asked for host processes.
		c.Warnings = append(c.Warnings, LocalNotice)
	}
	name, f, ok := c.reg.resolve(c.Sandbox.Backend)
	if !c.ttlWritten {
		c.Sandbox.DefaultTTL = DefaultTTL
	}
	if !ok {
		return
	}
	c.entryTTLKey = f.EntryTTLKey
	if f.RemoteHostPaths {
		c.remoteHostPaths = name
	}
	if !c.ttlWritten && f.DefaultTTL != nil {
		backendCfg, ok := c.backends[name]
		if !ok && f.NewConfig != nil {
			backendCfg = f.NewConfig()
		}
		c.Sandbox.DefaultTTL = f.DefaultTTL(backendCfg)
	}
}

// Describe names the config in messages: "config PATH", or "the built-in
// default config".
func (c *Config) Describe() string {
	if c.Path == "" {
		return "the built-in default config"
	}
	return "config " + c.Path
}

// LoadConfig loads the config file at path; when path is "", the file named
// by $SBX_CONFIG; when that is unset too, ./sandbox.toml if it exists; else
// the embedded default (one "main" sandbox on the local backend).
func (r *Registry) LoadConfig(path string) (*Config, error) {
	if path == "" {
		path = os.Getenv(EnvConfig)
	}
	if path == "" {
		switch _, err := os.Stat(DefaultConfigFile); {
		case err == nil:
			path = DefaultConfigFile
		case !errors.Is(err, fs.ErrNotExist):
			return nil, fmt.Errorf("config %s: %w", DefaultConfigFile, err)
		}
	}
	if path == "" {
		return r.ParseConfig(defaultConfig, "")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return r.ParseConfig(data, path)
}

// ParseConfig parses config file contents. path names the file in errors and
// its folder is where relative host paths resolve; "" means the embedded
// default, resolving against the current directory.
//
// Errors wrap backend.ErrInvalidConfig and name the file and key. Unknown
// keys inside [sandbox], the root [build] table and [mcp.services.NAME]
// tables are errors; everything else outside [sandbox] is ignored.
func (r *Registry) ParseConfig(data []byte, path string) (*Config, error) {
	c := &Config{Path: path}
	var err error
	if c.WorkDir, err = os.Getwd(); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Describe(), err)
	}
	if path == "" {
		c.Dir = c.WorkDir
	} else if c.Dir, err = filepath.Abs(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%s: %w", c.Describe(), err)
	}
	p := &parser{reg: r, cfg: c}
	if err := p.parse(data); err != nil {
		return nil, err
	}
	return c, nil
}
