package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// parseBuiltin parses text as DIR/sandbox.toml with the real backends'
// factories.
func parseBuiltin(t *testing.T, text string) (*Config, error) {
	t.Helper()
	return builtinRegistry().ParseConfig([]byte(text), filepath.Join(t.TempDir(), "sandbox.toml"))
}

// Each docker_args flag lands in its Spec field, in both the --flag=value
// and the --flag value forms.
func TestDockerArgs(t *testing.T) {
	t.Setenv("SBX_TEST_FROM_HOST", "host-value")
	tests := []struct {
		name string
		args string // TOML array body
		want func(*backend.Spec)
	}{
		{"cap-add", `"--cap-add=SYS_PTRACE", "--cap-add", "NET_ADMIN"`, func(s *backend.Spec) { s.CapAdd = []string{"SYS_PTRACE", "NET_ADMIN"} }},
		{"cap-drop", `"--cap-drop ALL"`, func(s *backend.Spec) { s.CapDrop = []string{"ALL"} }},
		{"security-opt", `"--security-opt", "seccomp=unconfined", "--security-opt apparmor=unconfined"`, func(s *backend.Spec) {
			s.SecurityOpt = []string{"seccomp=unconfined", "apparmor=unconfined"}
		}},
		{"shm-size", `"--shm-size=1g"`, func(s *backend.Spec) { s.Resources.ShmBytes = 1 << 30 }},
		{"memory long", `"--memory", "512m"`, func(s *backend.Spec) { s.Resources.MemoryBytes = 512 << 20 }},
		{"memory short", `"-m512m"`, func(s *backend.Spec) { s.Resources.MemoryBytes = 512 << 20 }},
		{"memory short spaced", `"-m 2g"`, func(s *backend.Spec) { s.Resources.MemoryBytes = 2 << 30 }},
		{"cpus", `"--cpus=1.5"`, func(s *backend.Spec) { s.Resources.CPUs = 1.5 }},
		{"pids-limit", `"--pids-limit", "200"`, func(s *backend.Spec) { s.Resources.PidsLimit = 200 }},
		{"gpus", `"--gpus", "all"`, func(s *backend.Spec) { s.Resources.GPUs = "all" }},
		{"user", `"-u", "1000:1000"`, func(s *backend.Spec) { s.User = "1000:1000" }},
		{"workdir", `"--workdir=/work"`, func(s *backend.Spec) { s.WorkingDir = "/work" }},
		{"env", `"-e", "A=1", "--env=B=x=y", "-e", "SBX_TEST_FROM_HOST", "-e", "SBX_TEST_UNSET_ANYWHERE"`, func(s *backend.Spec) {
			s.Env = map[string]string{"A": "1", "B": "x=y", "SBX_TEST_FROM_HOST": "host-value"}
		}},
		{"network", `"--network=none"`, func(s *backend.Spec) { s.Network = "none" }},
		{"net", `"--net", "host"`, func(s *backend.Spec) { s.Network = "host" }},
		{"privileged", `"--privileged"`, func(s *backend.Spec) { s.Privileged = true }},
		{"read-only", `"--read-only=true"`, func(s *backend.Spec) { s.ReadOnlyRootfs = true }},
		{"add-host", `"--add-host", "db.local:10.0.0.5", "--add-host=gw:host-gateway"`, func(s *backend.Spec) {
			s.ExtraHosts = []string{"db.local:10.0.0.5", "gw:host-gateway"}
		}},
		{"hostname", `"--hostname", "box"`, func(s *backend.Spec) { s.Hostname = "box" }},
		{"name", `"--name=agent-main"`, func(s *backend.Spec) { s.ContainerName = "agent-main" }},
		{"platform", `"--platform", "linux/ARM64"`, func(s *backend.Spec) { s.Platform = "linux/arm64" }},
		{"runtime", `"--runtime=runsc"`, func(s *backend.Spec) { s.Runtime = "runsc" }},
		{"label", `"-l", "team=red"`, func(s *backend.Spec) { s.Labels = map[string]string{"team": "red"} }},
		{"volume", `"-v", "named_cache:/cache:ro"`, func(s *backend.Spec) {
			s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: "named_cache", Target: "/cache", ReadOnly: true}}
		}},
		{"mount", `"--mount", "type=volume,source=data,target=/data"`, func(s *backend.Spec) {
			s.Volumes = []backend.Volume{{Type: backend.VolumeNamed, Source: "data", Target: "/data"}}
		}},
		{"publish", `"-p", "127.0.0.1:18080:8080", "--publish=53/udp", "-p", "9000:90"`, func(s *backend.Spec) {
			s.Ports = []backend.Port{
				{Port: 53, Protocol: "udp"},
				{Port: 90, Protocol: "tcp", HostPort: 9000},
				{Port: 8080, Protocol: "tcp", HostIP: "127.0.0.1", HostPort: 18080},
			}
		}},
		{"repeated scalar: last wins", `"-m", "1g", "--memory=2g"`, func(s *backend.Spec) { s.Resources.MemoryBytes = 2 << 30 }},
		{"same value as the entry's key", `"--user=nobody"`, func(s *backend.Spec) { s.User = "nobody" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			extra := ""
			if tt.name == "same value as the entry's key" {
				extra = "user = \"nobody\"\n"
			}
			cfg, err := parseBuiltin(t, "[sandbox.sandboxes.x]\nimage = \"busybox\"\n"+extra+"docker_args = ["+tt.args+"]\n")
			require.NoError(t, err)
			got := mustSpec(t, cfg, "x")
			want := mustSpec(t, mustParseBuiltin(t, "[sandbox.sandboxes.x]\nimage = \"busybox\"\n"), "x")
			tt.want(&want)
			assert.Equal(t, want, got)
		})
	}
}

func mustParseBuiltin(t *testing.T, text string) *Config {
	t.Helper()
	cfg, err := parseBuiltin(t, text)
	require.NoError(t, err)
	return cfg
}

// Flags backend.Spec cannot express, malformed values and contradictions
// of the entry's own keys are errors naming docker_args and the flag.
func TestDockerArgsRefused(t *testing.T) {
	tests := []struct {
		name, entry, wantErr string
	}{
		{"unknown flag", `docker_args = ["--init"]`, `sandbox.sandboxes.x.docker_args: flag --init is not supported (supported: --cap-add, `},
		{"unknown short flag", `docker_args = ["-it"]`, `flag -i is not supported`},
		{"ulimit", `docker_args = ["--ulimit", "nofile=1024"]`, `flag --ulimit is not supported`},
		{"positional", `docker_args = ["ubuntu:24.04"]`, `"ubuntu:24.04" is not a flag (docker_args holds docker run flags only`},
		{"missing value", `docker_args = ["--cap-add"]`, `flag --cap-add needs a value`},
		{"bad size", `docker_args = ["--memory=lots"]`, `docker_args: --memory=lots: want bytes or a size`},
		{"bad cpus", `docker_args = ["--cpus", "0"]`, `docker_args: --cpus 0: want 0.01 to 1024 CPUs`},
		{"bad pids", `docker_args = ["--pids-limit=-1"]`, `--pids-limit=-1: want a positive number`},
		{"bad host", `docker_args = ["--add-host=nocolon"]`, `--add-host=nocolon: want NAME:IP`},
		{"relative workdir", `docker_args = ["-w", "rel"]`, `-w rel: want an absolute path`},
		{"bad bool", `docker_args = ["--privileged=maybe"]`, `--privileged=maybe: want true or false`},
		{"conflict with mem_limit", "mem_limit = \"1g\"\ndocker_args = [\"-m\", \"2g\"]", `docker_args: -m 2g: the entry's mem_limit is 1073741824; set it in one place`},
		{"conflict with user", "user = \"root\"\ndocker_args = [\"--user=nobody\"]", `the entry's user is root; set it in one place`},
		{"conflict with environment", "environment = { A = \"1\" }\ndocker_args = [\"-e\", \"A=2\"]", `-e A=2: A is "1" in environment`},
		{"turning privileged off", "privileged = true\ndocker_args = [\"--privileged=false\"]", `the entry's privileged is true`},
		{"reserved label", `docker_args = ["--label=sandboxkit.id=x"]`, `prefix is reserved`},
		{"duplicate target", "volumes = [\"a:/data\"]\ndocker_args = [\"-v\", \"b:/data\"]", `docker_args: volume "b:/data": /data is already mounted by "a:/data"`},
		{"bad publish", `docker_args = ["-p", "1:2:3:4"]`, `want [IP:][HOST_PORT:]PORT`},
		{"bad platform", `docker_args = ["--platform", "arm64"]`, `sandbox.sandboxes.x.platform: want "os/arch[/variant]"`},
		{"name with a pool", "docker_args = [\"--name=fixed\"]\npool = { size = 2 }", `sandbox.sandboxes.x.pool: container_name "fixed" names one container, and a pool keeps several`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBuiltin(t, "[sandbox.sandboxes.x]\nimage = \"busybox\"\n"+tt.entry+"\n")
			require.ErrorIs(t, err, backend.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// platform and container_name land in the Spec; malformed or contradicting
// values name the key.
func TestSpecPlatformAndContainerName(t *testing.T) {
	cfg := mustParseBuiltin(t, `
[sandbox.sandboxes.arm]
image = "busybox"
platform = "linux/arm64/v8"
[sandbox.sandboxes.named]
image = "busybox"
container_name = "opensage_main_1"
`)
	assert.Equal(t, "linux/arm64/v8", mustSpec(t, cfg, "arm").Platform)
	assert.Equal(t, "opensage_main_1", mustSpec(t, cfg, "named").ContainerName)

	for _, tt := range []struct{ entry, wantErr string }{
		{`platform = "arm64"`, `sandbox.sandboxes.x.platform: want "os/arch[/variant]" as docker run --platform takes, e.g. "linux/amd64" or "linux/arm64/v8", got "arm64"`},
		{"platform = \"linux/amd64\"\ndocker_args = [\"--platform=linux/arm64\"]", `the entry's platform is linux/amd64; set it in one place`},
		{"container_name = \"a\"\ncontainer_id = \"b\"", `container_id attaches to an existing container, so container_name "a" names nothing`},
		{"container_name = \"a\"\npool = { size = 1 }", `container_name "a" names one container, and a pool keeps several`},
	} {
		_, err := parseBuiltin(t, "[sandbox.sandboxes.x]\nimage = \"busybox\"\n"+tt.entry+"\n")
		require.ErrorIs(t, err, backend.ErrInvalidConfig, tt.entry)
		assert.ErrorContains(t, err, tt.wantErr, tt.entry)
	}
}

// The agentdocker-lite extras become the Spec's limits on lite; on
// another backend they are ignored (as OpenSage's backends ignore each
// other's) and ExtraWarnings names them with their reader.
func TestSpecLiteExtras(t *testing.T) {
	const entries = `
[sandbox.sandboxes.main]
image = "busybox"
[sandbox.sandboxes.main.extra]
fs_backend = "overlayfs"
env_base_dir = "/tmp/opensage_ns"
rootfs_cache_dir = "/tmp/opensage_rootfs_cache"
cpu_max = "50000 100000"
memory_max = "512M"
pids_max = 256
`
	cfg := mustParseBuiltin(t, "[sandbox]\nbackend = \"agentdocker-lite\"\n"+entries)
	spec := mustSpec(t, cfg, "main")
	assert.Equal(t, backend.Resources{CPUs: 0.5, MemoryBytes: 512 << 20, PidsLimit: 256}, spec.Resources)

	assert.Empty(t, cfg.ExtraWarnings("main", "the main initializer", nil, nil))

	// On native nothing reads them: no limits, a warning per key.
	cfg = mustParseBuiltin(t, "[sandbox]\nbackend = \"native\"\n"+entries)
	assert.Equal(t, backend.Resources{}, mustSpec(t, cfg, "main").Resources)
	warnings := cfg.ExtraWarnings("main", "the main initializer", nil, nil)
	assert.Len(t, warnings, 6)
	assert.Contains(t, warnings, "sandbox.sandboxes.main.extra.cpu_max: read by the lite backend, not by the native backend or the main initializer (ignored)")
	// Selecting lite (sbx --backend lite) applies them.
	require.NoError(t, cfg.SetBackend("lite"))
	assert.Equal(t, 0.5, mustSpec(t, cfg, "main").Resources.CPUs)
	assert.Empty(t, cfg.ExtraWarnings("main", "the main initializer", nil, nil))

	for _, tt := range []struct{ extra, wantErr string }{
		{`fs_backend = "btrfs"`, `sandbox.sandboxes.x.extra.fs_backend: "btrfs" is not supported by the lite backend, which has only "overlayfs"`},
		{`cpu_max = "half"`, `sandbox.sandboxes.x.extra.cpu_max: want "QUOTA PERIOD" in microseconds`},
		{`cpu_max = "50000 10"`, `(PERIOD is 1000 to 1000000)`},
		{`memory_max = "lots"`, `sandbox.sandboxes.x.extra.memory_max: want bytes, a size like "512M" or "4G", or "max", got "lots"`},
		{`pids_max = "10k"`, `sandbox.sandboxes.x.extra.pids_max: want a count or "max", got "10k"`},
		{`env_base_dir = 3`, `sandbox.sandboxes.x.extra.env_base_dir: want a folder path`},
	} {
		_, err := parseBuiltin(t, "[sandbox]\nbackend = \"lite\"\n[sandbox.sandboxes.x]\nimage = \"busybox\"\n[sandbox.sandboxes.x.extra]\n"+tt.extra+"\n")
		require.ErrorIs(t, err, backend.ErrInvalidConfig, tt.extra)
		assert.ErrorContains(t, err, tt.wantErr, tt.extra)
	}
	// A lite key contradicting the entry's own limit.
	_, err := parseBuiltin(t, "[sandbox]\nbackend = \"lite\"\n[sandbox.sandboxes.x]\ncpus = 2\n[sandbox.sandboxes.x.extra]\ncpu_max = \"50000 100000\"\n")
	assert.ErrorContains(t, err, "sandbox.sandboxes.x.extra.cpu_max gives 0.5, but the entry's cpus gives 2 (set one of them)")
	// "max" is no limit.
	cfg = mustParseBuiltin(t, "[sandbox]\nbackend = \"lite\"\n[sandbox.sandboxes.x]\n[sandbox.sandboxes.x.extra]\ncpu_max = \"max 100000\"\nmemory_max = \"max\"\npids_max = \"max\"\n")
	assert.Equal(t, backend.Resources{}, mustSpec(t, cfg, "x").Resources)
}

// The k8s extras are accepted on k8s entries and warned about elsewhere.
func TestSpecK8sExtras(t *testing.T) {
	const entries = `
[sandbox.sandboxes.main]
image = "busybox"
[sandbox.sandboxes.main.extra]
k8s_namespace = "agents"
context = "kind-dev"
kubeconfig = "~/.kube/config"
tolerations = [{ key = "gpu", operator = "Exists", effect = "NoSchedule" }]
`
	cfg := mustParseBuiltin(t, "[sandbox]\nbackend = \"k8s\"\n"+entries)
	mustSpec(t, cfg, "main")
	assert.Empty(t, cfg.ExtraWarnings("main", "the main initializer", nil, nil))
	cfg = mustParseBuiltin(t, "[sandbox]\nbackend = \"local\"\n"+entries)
	mustSpec(t, cfg, "main")
	assert.Contains(t, cfg.ExtraWarnings("main", "the main initializer", nil, nil),
		"sandbox.sandboxes.main.extra.context: read by the k8s backend, not by the local backend or the main initializer (ignored)")
}

// A config without [sandbox], or without entries, is valid: there is only
// nothing to launch.
func TestNothingToLaunch(t *testing.T) {
	for _, tt := range []struct{ text, missing string }{
		{"task_name = \"no sandbox\"\n[llm]\nmodel = \"x\"\n", "[sandbox] table"},
		{"[sandbox]\nbackend = \"native\"\n", "[sandbox.sandboxes.NAME] tables"},
	} {
		cfg := mustParseBuiltin(t, tt.text)
		assert.Empty(t, cfg.SandboxNames())
		err := cfg.NothingToLaunch()
		require.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.ErrorContains(t, err, "nothing to launch: the file has no "+tt.missing+` (add one, e.g. [sandbox.sandboxes.main] with image = "ubuntu:24.04")`)
	}
	assert.NoError(t, mustParseBuiltin(t, "[sandbox.sandboxes.main]\n").NothingToLaunch())
}
