package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// parse parses text as ./sandbox.toml with the fake registry.
func parse(t *testing.T, text string) (*Config, error) {
	t.Helper()
	return testRegistry(nil).ParseConfig([]byte(text), "sandbox.toml")
}

// unsetenv unsets environment variables for the duration of the test.
func unsetenv(t *testing.T, names ...string) {
	for _, n := range names {
		t.Setenv(n, "") // restores the old value at the end
		require.NoError(t, os.Unsetenv(n))
	}
}

func mustParse(t *testing.T, text string) *Config {
	t.Helper()
	cfg, err := parse(t, text)
	require.NoError(t, err)
	return cfg
}

func mustSpec(t *testing.T, cfg *Config, name string) backend.Spec {
	t.Helper()
	spec, err := cfg.Spec(name)
	require.NoError(t, err)
	return spec
}

func TestEmbeddedDefault(t *testing.T) {
	cfg, err := builtinRegistry().ParseConfig(defaultConfig, "")
	require.NoError(t, err)
	wd, err := os.Getwd()
	require.NoError(t, err)

	assert.Equal(t, "", cfg.Path)
	assert.Equal(t, wd, cfg.Dir)
	assert.Equal(t, []string{LocalNotice}, cfg.Warnings, "the embedded default says it runs on the host")
	assert.Equal(t, "local", cfg.Sandbox.Backend)
	assert.Equal(t, DefaultTTL, cfg.Sandbox.DefaultTTL)
	assert.Equal(t, DefaultExecuteTimeout, cfg.Sandbox.ExecuteTimeout)
	assert.Equal(t, "/shared", cfg.Sandbox.Paths.Shared)
	assert.Equal(t, []string{"main"}, cfg.SandboxNames())

	e, err := cfg.Entry("main")
	require.NoError(t, err)
	assert.Equal(t, "main", e.Name)
	assert.Equal(t, "main", e.Type, "type defaults to the entry name")
	assert.Equal(t, backend.Spec{Name: "main", TTL: DefaultTTL}, mustSpec(t, cfg, "main"))
}

// Only the embedded default runs on local unasked, and it says so; a file
// without a backend key gets OpenSage's default, native; a file that writes
// backend = "local" itself is not warned; choosing another backend for the
// embedded default (sbx --backend) drops the notice.
func TestDefaultBackendIsIsolated(t *testing.T) {
	cfg, err := builtinRegistry().ParseConfig([]byte("[sandbox.sandboxes.main]\n"), "sandbox.toml")
	require.NoError(t, err)
	assert.Equal(t, "native", cfg.Sandbox.Backend)
	assert.NotContains(t, cfg.Warnings, LocalNotice)

	cfg, err = builtinRegistry().ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n"), "sandbox.toml")
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings, "writing backend = local yourself silences the notice")

	def, err := builtinRegistry().ParseConfig(defaultConfig, "")
	require.NoError(t, err)
	require.Contains(t, def.Warnings, LocalNotice)
	require.NoError(t, def.SetBackend("lite"))
	assert.NotContains(t, def.Warnings, LocalNotice)
	require.NoError(t, def.SetBackend("local"))
	assert.Equal(t, []string{LocalNotice}, def.Warnings, "once, however often it is set")
	require.NoError(t, def.SetBackend("auto"))
	assert.Equal(t, "auto", def.Sandbox.Backend)
}

func TestLoadConfigResolution(t *testing.T) {
	write := func(t *testing.T, dir, name, image string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("[sandbox]\ndefault_image = \""+image+"\"\n[sandbox.sandboxes.main]\n"), 0o644))
		return p
	}
	tests := []struct {
		name      string
		arg       string // LoadConfig's argument; "-" means a file written by the case
		env       bool   // set SBX_CONFIG to env.toml
		cwdFile   bool   // write ./sandbox.toml
		wantImage string // identifies which file was loaded ("" = the default)
		wantPath  string
	}{
		{name: "path wins over everything", arg: "-", env: true, cwdFile: true, wantImage: "from-arg", wantPath: "arg.toml"},
		{name: "SBX_CONFIG wins over ./sandbox.toml", env: true, cwdFile: true, wantImage: "from-env", wantPath: "env.toml"},
		{name: "./sandbox.toml", cwdFile: true, wantImage: "from-cwd", wantPath: "sandbox.toml"},
		{name: "embedded default", wantImage: "", wantPath: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			t.Setenv(EnvConfig, "")
			arg := tt.arg
			if arg == "-" {
				write(t, dir, "arg.toml", "from-arg")
				arg = "arg.toml"
			}
			if tt.env {
				write(t, dir, "env.toml", "from-env")
				t.Setenv(EnvConfig, "env.toml")
			}
			if tt.cwdFile {
				write(t, dir, "sandbox.toml", "from-cwd")
			}
			cfg, err := testRegistry(nil).LoadConfig(arg)
			require.NoError(t, err)
			assert.Equal(t, tt.wantImage, cfg.Sandbox.DefaultImage)
			assert.Equal(t, tt.wantPath, cfg.Path)
			assert.Equal(t, []string{"main"}, cfg.SandboxNames())
			wd, _ := os.Getwd()
			assert.Equal(t, wd, cfg.Dir)
		})
	}
}

func TestLoadConfigErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)

	_, err := testRegistry(nil).LoadConfig("missing.toml")
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), "config missing.toml: ")

	t.Setenv(EnvConfig, "from-env.toml")
	_, err = testRegistry(nil).LoadConfig("")
	assert.ErrorContains(t, err, "config from-env.toml: ")

	require.NoError(t, os.WriteFile("bad.toml", []byte("[sandbox\n"), 0o644))
	_, err = testRegistry(nil).LoadConfig("bad.toml")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, "config bad.toml: toml: line 2: expected '.' or ']'")
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want []string // the error's lines
	}{
		{"in [sandbox]", "[sandbox]\ndefault_imgae = \"x\"\n",
			[]string{`config sandbox.toml: unknown key "sandbox.default_imgae" (did you mean "default_image"?)`}},
		{"in an entry", "[sandbox.sandboxes.main]\nimgae = \"x\"\n",
			[]string{`config sandbox.toml: unknown key "sandbox.sandboxes.main.imgae" (did you mean "image"?)`}},
		{"in an entry, no suggestion", "[sandbox.sandboxes.main]\nflavour = \"x\"\n",
			[]string{`config sandbox.toml: unknown key "sandbox.sandboxes.main.flavour"`}},
		{"entry name is not a key", "[sandbox.sandboxes.main]\nname = \"x\"\n",
			[]string{`config sandbox.toml: unknown key "sandbox.sandboxes.main.name"`}},
		{"in [sandbox.paths]", "[sandbox.paths]\nshraed = \"/x\"\n",
			[]string{`config sandbox.toml: unknown key "sandbox.paths.shraed" (did you mean "shared"?)`}},
		{"in [sandbox.tools]", "[sandbox.tools]\nexecute_timeout = 5\n",
			[]string{`config sandbox.toml: unknown key "sandbox.tools.execute_timeout" (did you mean "execute_timeout_sec"?)`}},
		{"unknown table in [sandbox], reported once", "[sandbox.dockr]\nhost = \"x\"\nport = 1\n",
			[]string{`config sandbox.toml: unknown key "sandbox.dockr"`}},
		{"unknown table suggests a backend", "[sandbox.fak]\n",
			[]string{`config sandbox.toml: unknown key "sandbox.fak" (did you mean "fake"?)`}},
		{"every unknown key is reported",
			"[sandbox]\nbackedn = \"local\"\n[sandbox.sandboxes.main]\nmem_limt = \"1g\"\n",
			[]string{
				`config sandbox.toml: unknown key "sandbox.backedn" (did you mean "backend"?)`,
				`config sandbox.toml: unknown key "sandbox.sandboxes.main.mem_limt" (did you mean "mem_limit"?)`,
			}},
		{"in a port binding", "[sandbox.sandboxes.main.ports]\n\"80\" = { host = \"::\", prot = 8080 }\n",
			[]string{`config sandbox.toml: sandbox.sandboxes.main.ports.80: unknown key "prot" in a port binding (want host, port) (did you mean "port"?)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testRegistry(nil).ParseConfig([]byte(tt.toml), "sandbox.toml")
			require.ErrorIs(t, err, backend.ErrInvalidConfig)
			assert.Equal(t, tt.want, strings.Split(err.Error(), "\n"))
		})
	}
}

func TestRawTablesAreNotChecked(t *testing.T) {
	cfg := mustParse(t, `
[[sandbox.tolerations]]
key = "gpu"
nested = { deep = 1 }
[[sandbox.tolerations]]
key = "spot"
[sandbox.tolerations.selector]
any = "thing"
[sandbox.sandboxes.main.extra]
initializer_timeout_sec = 1800
[sandbox.sandboxes.main.extra.k8s]
namespace = "agents"
`)
	require.Len(t, cfg.Sandbox.Tolerations, 2)
	assert.Equal(t, "spot", cfg.Sandbox.Tolerations[1]["key"])
	e, err := cfg.Entry("main")
	require.NoError(t, err)
	assert.Equal(t, int64(1800), e.Extra["initializer_timeout_sec"])
	assert.Equal(t, map[string]any{"namespace": "agents"}, e.Extra["k8s"])
}

func TestForeignTablesAreIgnored(t *testing.T) {
	cfg := mustParse(t, `
task_name = "${NOT_OURS}"
default_host = ""
answer = 42
lowercase_var = "${ALSO_NOT_OURS}"
[neo4j]
password = "${UNDEFINED_BUT_NOT_OURS}"
[llm.model_configs.summarize]
model_name = "x"
[[model.available_models]]
model = "a"
[mcp.services.gdb_mcp]
sse_port = "1111"
[build]
poc_dir = ""
[history.events_compaction]
compaction_percent = 50
[plugins]
enabled = []
[sandboxes]
not = "ours either"
`)
	assert.Empty(t, cfg.Warnings)
	assert.Empty(t, cfg.SandboxNames())
}

func TestOpenSageShapedConfig(t *testing.T) {
	// The environment wins over the file's variables: keep it out.
	unsetenv(t, "BASE_IMAGE", "PROJECT", "DB_PASSWORD", "AGENT_MODEL", "GDB_PORT", "PDB_PORT",
		"JOERN_PORT", "BOLT_PORT", "HTTP_PORT", "DATA_DIR", "ENABLE_COVERAGE", "CPU_QUOTA", "NOT_DEFINED_ANYWHERE")
	abs, err := filepath.Abs("testdata")
	require.NoError(t, err)
	// The file's project_relative_* paths are relative to OpenSage's
	// project root, which testdata stands for.
	t.Setenv(EnvProjectRoot, abs)
	cfg, err := builtinRegistry().LoadConfig("testdata/opensage.toml")
	require.NoError(t, err)

	// Every table of an OpenSage file is a built-in backend's now,
	// checked strictly; only OpenSage's per-call Docker timeout is named.
	assert.Equal(t, []string{"sandbox.sandboxes.coverage.timeout, sandbox.sandboxes.main.timeout: OpenSage's Docker client timeout per API call, which sandboxkit does not use (ignored): " +
		"each step has its own deadline (a pull or build as long as it takes, provisioning and readiness initializer_timeout_sec, commands their exec timeout)"},
		cfg.Warnings)
	assert.Equal(t, "native", cfg.Sandbox.Backend)
	assert.Equal(t, "debian:bookworm", cfg.Sandbox.DefaultImage)
	assert.Equal(t, "", cfg.SharedDataPath(), `absolute_shared_data_path = "${DATA_DIR}" with DATA_DIR = ""`)
	assert.Equal(t, []string{"codeql", "coverage", "gdb_mcp", "joern", "main", "neo4j", "pdb_mcp"}, cfg.SandboxNames())

	main, err := cfg.Entry("main")
	require.NoError(t, err)
	assert.Equal(t, 300*time.Second, main.Timeout)
	assert.Equal(t, map[string]string{"BASE_IMAGE": "debian:bookworm", "JOBS": "8"}, main.BuildArgs)
	assert.Equal(t, map[string]any{"initializer_timeout_sec": int64(1200)}, main.Extra)
	assert.Equal(t, filepath.Join(abs, "dockerfiles/main/Dockerfile"), main.DockerfilePath())

	day := 24 * time.Hour
	build := func(name string, args map[string]string) *backend.Build {
		return &backend.Build{
			ContextDir: filepath.Join(abs, "dockerfiles", name),
			Dockerfile: filepath.Join(abs, "dockerfiles", name, "Dockerfile"),
			Args:       args,
		}
	}
	bookworm := map[string]string{"BASE_IMAGE": "debian:bookworm"}
	tests := []struct {
		name string
		want backend.Spec
	}{
		{"main", backend.Spec{
			Name: "main", Image: "triage_run_main",
			Build: build("main", map[string]string{"BASE_IMAGE": "debian:bookworm", "JOBS": "8"}),
			Volumes: []backend.Volume{
				{Type: backend.VolumeBind, Source: abs, Target: "/agent", ReadOnly: true},
				{Type: backend.VolumeNamed, Source: "triage_cache", Target: "/root/.cache"},
			},
			Resources: backend.Resources{CPUs: 1.5, MemoryBytes: 8 << 30},
			TTL:       day,
		}},
		{"gdb_mcp", backend.Spec{
			Name: "gdb_mcp", Image: "triage_run_gdb_mcp", ImageCommand: true,
			Build:  build("gdb_mcp", bookworm),
			Ports:  []backend.Port{{Port: 2345, Protocol: "tcp", HostPort: 2345}},
			CapAdd: []string{"SYS_PTRACE"}, SecurityOpt: []string{"seccomp=unconfined"},
			TTL: day,
		}},
		{"pdb_mcp", backend.Spec{
			Name: "pdb_mcp", Image: "triage_run_pdb_mcp", ImageCommand: true,
			Build: build("pdb_mcp", nil),
			Ports: []backend.Port{{Port: 2346, Protocol: "tcp", HostIP: "127.0.0.1", HostPort: 2346}},
			TTL:   day,
		}},
		{"codeql", backend.Spec{Name: "codeql", Image: "debian:bookworm", TTL: day}},
		{"coverage", backend.Spec{
			Name: "coverage", Image: "debian:bookworm_coverage",
			Build:   build("coverage", bookworm),
			Command: []string{"tail", "-f", "/dev/null"},
			Env:     map[string]string{"COVERAGE_ENABLED": "true"},
			TTL:     day,
		}},
		{"joern", backend.Spec{
			Name: "joern", Image: "example/joern:4.0", ImageCommand: true,
			Build: build("joern", nil),
			Env:   map[string]string{"JAVA_OPTS": "-Xmx12G -Xms2G"},
			Ports: []backend.Port{{Port: 8081, Protocol: "tcp", HostPort: 18087}},
			TTL:   day,
		}},
		{"neo4j", backend.Spec{
			Name: "neo4j", Image: "neo4j:5.26-enterprise", ImageCommand: true,
			Env: map[string]string{
				"NEO4J_AUTH":                         "neo4j/s3cret-graph",
				"NEO4J_ACCEPT_LICENSE_AGREEMENT":     "yes",
				"NEO4J_PLUGINS":                      `["apoc"]`,
				"NEO4J_server_memory_heap_max__size": "2G",
				"NEO4J_apoc_export_file_enabled":     "true",
			},
			Ports: []backend.Port{
				{Port: 7474, Protocol: "tcp", HostPort: 7474},
				{Port: 7687, Protocol: "tcp", HostPort: 7687},
			},
			Resources: backend.Resources{ShmBytes: 1 << 30},
			TTL:       day,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, mustSpec(t, cfg, tt.name))
		})
	}
}

func TestTemplates(t *testing.T) {
	t.Run("environment wins over the file", func(t *testing.T) {
		t.Setenv("SBX_TEST_IMAGE", "from-env")
		cfg := mustParse(t, "SBX_TEST_IMAGE = \"from-file\"\nSBX_TEST_TAG = 3\n[sandbox]\ndefault_image = \"${SBX_TEST_IMAGE}:v${SBX_TEST_TAG}\"\n")
		assert.Equal(t, "from-env:v3", cfg.Sandbox.DefaultImage)
	})
	t.Run("an empty environment variable still wins", func(t *testing.T) {
		t.Setenv("SBX_TEST_IMAGE", "")
		cfg := mustParse(t, "SBX_TEST_IMAGE = \"from-file\"\n[sandbox]\ndefault_image = \"x${SBX_TEST_IMAGE}\"\n")
		assert.Equal(t, "x", cfg.Sandbox.DefaultImage)
	})
	t.Run("undefined variable names the key and the variable", func(t *testing.T) {
		_, err := parse(t, "DEFINED = 1\n[sandbox.sandboxes.main.environment]\nTOKEN = \"${SBX_TEST_UNDEFINED}\"\n")
		require.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.EqualError(t, err, `config sandbox.toml: sandbox.sandboxes.main.environment.TOKEN: undefined template variable ${SBX_TEST_UNDEFINED} (define SBX_TEST_UNDEFINED as a top-level key of the file or in the environment; known: DEFINED)`)
	})
	t.Run("only UPPERCASE scalar keys are variables", func(t *testing.T) {
		_, err := parse(t, "lower = \"x\"\nTABLE_LIKE = [1]\n[sandbox]\ndefault_image = \"${TABLE_LIKE}\"\n")
		assert.ErrorContains(t, err, "undefined template variable ${TABLE_LIKE} (define TABLE_LIKE as a top-level key of the file or in the environment; known: none)")
	})
	t.Run("lower-case and unbraced references stay literal", func(t *testing.T) {
		cfg := mustParse(t, "[sandbox]\ndefault_image = \"${lower} $HOME\"\n")
		assert.Equal(t, "${lower} $HOME", cfg.Sandbox.DefaultImage)
	})
	t.Run("values are coerced to the type the key wants", func(t *testing.T) {
		cfg := mustParse(t, `
PORT = 1111
CPUS = "2.5"
PIDS = "512"
PRIV = true
TTL = 90
WORKERS = 4
BIG = 1.5
[sandbox]
default_ttl = "${TTL}"
[sandbox.tools]
execute_timeout_sec = "${TTL}"
[sandbox.sandboxes.main]
cpus = "${CPUS}"
pids_limit = "${PIDS}"
privileged = "${PRIV}"
gpus = "${WORKERS}"
mem_limit = "${BIG}g"
ttl = "${TTL}m"
[sandbox.sandboxes.main.environment]
WORKERS = "${WORKERS}"
PORT = "${PORT}"
[sandbox.sandboxes.main.ports]
"1111/tcp" = "${PORT}"
`)
		assert.Equal(t, 90*time.Second, cfg.Sandbox.DefaultTTL)
		assert.Equal(t, 90*time.Second, cfg.Sandbox.ExecuteTimeout)
		spec := mustSpec(t, cfg, "main")
		assert.Equal(t, backend.Resources{CPUs: 2.5, PidsLimit: 512, GPUs: "4", MemoryBytes: 3 << 29}, spec.Resources)
		assert.True(t, spec.Privileged)
		assert.Equal(t, 90*time.Minute, spec.TTL)
		assert.Equal(t, map[string]string{"WORKERS": "4", "PORT": "1111"}, spec.Env)
		assert.Equal(t, []backend.Port{{Port: 1111, Protocol: "tcp", HostPort: 1111}}, spec.Ports)
	})
	t.Run("a value that cannot be coerced names the key", func(t *testing.T) {
		_, err := parse(t, "PIDS = \"lots\"\n[sandbox.sandboxes.main]\npids_limit = \"${PIDS}\"\nprivileged = \"maybe\"\n")
		require.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.Equal(t, []string{
			`config sandbox.toml: sandbox.sandboxes.main.pids_limit: want an integer, got "lots"`,
			`config sandbox.toml: sandbox.sandboxes.main.privileged: want true or false, got "maybe"`,
		}, strings.Split(err.Error(), "\n"))
	})
	t.Run("an empty variable leaves a number unset", func(t *testing.T) {
		cfg := mustParse(t, "N = \"\"\n[sandbox.sandboxes.main]\npids_limit = \"${N}\"\ncpus = \"${N}\"\n")
		assert.Equal(t, backend.Resources{}, mustSpec(t, cfg, "main").Resources)
	})
}

func TestValueErrors(t *testing.T) {
	tests := []struct {
		name, toml, want string
	}{
		{"list wanted", "[sandbox.sandboxes.main]\nvolumes = \"/a:/b\"\n",
			`sandbox.sandboxes.main.volumes: want a list of strings, got "/a:/b"`},
		{"table wanted", "[sandbox.sandboxes.main]\nenvironment = [\"A=b\"]\n",
			`sandbox.sandboxes.main.environment: want a table, got a list`},
		{"scalar wanted", "[sandbox.sandboxes.main]\nimage = { name = \"x\" }\n",
			`sandbox.sandboxes.main.image: want text, got a table`},
		{"environment value must be a scalar", "[sandbox.sandboxes.main.environment]\nA = [1]\n",
			`sandbox.sandboxes.main.environment.A: want text, got a list`},
		{"bad size", "[sandbox.sandboxes.main]\nmem_limit = \"4 gigs\"\n",
			`sandbox.sandboxes.main.mem_limit: want bytes or a size like "512m" or "4g", got "4 gigs"`},
		{"negative size", "[sandbox.sandboxes.main]\nshm_size = -1\n",
			`sandbox.sandboxes.main.shm_size: must not be negative, got -1`},
		{"bad duration", "[sandbox]\ndefault_ttl = \"a day\"\n",
			`sandbox.default_ttl: want seconds or a duration like "90s" or "24h", got "a day"`},
		{"negative duration", "[sandbox.sandboxes.main]\nttl = -5\n",
			`sandbox.sandboxes.main.ttl: must not be negative, got -5`},
		{"fractional integer", "[sandbox.sandboxes.main]\npids_limit = 1.5\n",
			`sandbox.sandboxes.main.pids_limit: want an integer, got 1.5`},
		{"bool for a number", "[sandbox.sandboxes.main]\npids_limit = true\n",
			`sandbox.sandboxes.main.pids_limit: want an integer, got true`},
		{"number for a bool", "[sandbox.sandboxes.main]\nprivileged = 1\n",
			`sandbox.sandboxes.main.privileged: want true or false, got 1`},
		{"date for text", "[sandbox.sandboxes.main]\nimage = 2024-01-01\n",
			`sandbox.sandboxes.main.image: want text, got a date or time`},
		{"sandbox is not a table", "sandbox = 1\n", `sandbox: want a table, got 1`},
		{"entry is not a table", "[sandbox.sandboxes]\nmain = 1\n", `sandbox.sandboxes.main: want a table, got 1`},
		{"bad gpus", "[sandbox.sandboxes.main]\ngpus = \"some\"\n",
			`sandbox.sandboxes.main.gpus: want "all", a count or "device=ID[,ID...]", got "some"`},
		{"negative cpus", "[sandbox.sandboxes.main]\ncpus = -1\n",
			`sandbox.sandboxes.main.cpus: want 0 (no limit) or 0.01 to 1024 CPUs, got -1`},
		{"cpus too small to be a quota", "[sandbox.sandboxes.main]\ncpus = 0.0000000001\n",
			`sandbox.sandboxes.main.cpus: want 0 (no limit) or 0.01 to 1024 CPUs, got 1e-10`},
		{"cpus that overflow a quota", "[sandbox.sandboxes.main]\ncpus = 1e30\n",
			`sandbox.sandboxes.main.cpus: want 0 (no limit) or 0.01 to 1024 CPUs, got 1e+30`},
		{"reserved label", "[sandbox.sandboxes.main.labels]\n\"sandboxkit.id\" = \"x\"\n",
			`sandbox.sandboxes.main.labels."sandboxkit.id": the sandboxkit. prefix is reserved for sandboxkit's own labels`},
		{"two relative dockerfiles", "[sandbox.sandboxes.main]\nagent_relative_dockerfile_path = \"a\"\nproject_relative_dockerfile_path = \"b\"\n",
			`sandbox.sandboxes.main: agent_relative_dockerfile_path and project_relative_dockerfile_path are set; use one (or absolute_dockerfile_path, which wins over both)`},
		{"relative host_shared_mem_dir", "[sandbox]\nhost_shared_mem_dir = \"mem\"\n[sandbox.sandboxes.a]\n[sandbox.sandboxes.b]\n",
			`sandbox.host_shared_mem_dir: "mem" is not an absolute path: write the host folder as one, e.g. "/srv/agent-mem" or "~/agent-mem"`},
		{"unterminated quote in command", "[sandbox.sandboxes.main]\ncommand = \"sh -c 'echo\"\n",
			`sandbox.sandboxes.main.command: command "sh -c 'echo": unterminated single quote`},
		{"unknown backend", "[sandbox]\nbackend = \"fkae\"\n",
			`sandbox.backend: unknown backend "fkae" (known: fake, local, native) (did you mean "fake"?)`},
		{"malformed mount_host_paths", "[sandbox]\nmount_host_paths = [\"/tmp\"]\n[sandbox.sandboxes.a]\n[sandbox.sandboxes.b]\n",
			`sandbox.mount_host_paths: volume "/tmp": no sandbox path (want host:sandbox[:ro|rw])`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.toml)
			require.ErrorIs(t, err, backend.ErrInvalidConfig)
			assert.EqualError(t, err, "config sandbox.toml: "+tt.want)
		})
	}
}

func TestVolumes(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	require.NoError(t, os.MkdirAll(filepath.Join(home, "tools"), 0o755))
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "data"), 0o755))

	tests := []struct {
		spec    string
		want    backend.Volume
		skip    string
		wantErr string
	}{
		{spec: dir + ":/work", want: backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/work"}},
		{spec: dir + ":/work:ro", want: backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/work", ReadOnly: true}},
		{spec: dir + ":/work/:rw", want: backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/work"}},
		{spec: "./data:/data", want: backend.Volume{Type: backend.VolumeBind, Source: filepath.Join(dir, "data"), Target: "/data"}},
		{spec: "data/:/data:ro", want: backend.Volume{Type: backend.VolumeBind, Source: filepath.Join(dir, "data"), Target: "/data", ReadOnly: true}},
		{spec: ".:/cfg", want: backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/cfg"}},
		{spec: "~/tools:/tools:ro", want: backend.Volume{Type: backend.VolumeBind, Source: filepath.Join(home, "tools"), Target: "/tools", ReadOnly: true}},
		{spec: "~:/home/me", want: backend.Volume{Type: backend.VolumeBind, Source: home, Target: "/home/me"}},
		{spec: "cache:/root/.cache", want: backend.Volume{Type: backend.VolumeNamed, Source: "cache", Target: "/root/.cache"}},
		{spec: "my-vol.1:/v:ro", want: backend.Volume{Type: backend.VolumeNamed, Source: "my-vol.1", Target: "/v", ReadOnly: true}},
		{spec: "/srv/sbx-test-missing:/data", skip: "host path does not exist"},
		{spec: "./missing:/data", skip: "host path " + filepath.Join(dir, "missing") + " does not exist"},
		{spec: "/data", wantErr: "no sandbox path (want host:sandbox[:ro|rw])"},
		{spec: "/a:/b:ro:x", wantErr: "too many ':' (want host:sandbox[:ro|rw])"},
		{spec: ":/b", wantErr: "empty host path (want host:sandbox[:ro|rw])"},
		{spec: "/a:", wantErr: "empty sandbox path (want host:sandbox[:ro|rw])"},
		{spec: dir + ":/b:rx", wantErr: `mode "rx": want ro or rw`},
		{spec: dir + ":/b:", wantErr: `mode "": want ro or rw`},
		{spec: dir + ":relative", wantErr: `sandbox path "relative" is not absolute`},
		{spec: "_bad:/v", wantErr: `volume name "_bad": want letters, digits, '_', '.', '-'`},
		{spec: "~other/x:/v", wantErr: `cannot expand "~other/x": only ~ and ~/ are supported`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			v, skip, err := parseVolume(tt.spec, dir)
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.skip, skip)
			if tt.skip == "" {
				assert.Equal(t, tt.want, v)
			}
		})
	}
}

func TestVolumesInConfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	path := filepath.Join(dir, "sandbox.toml")
	missing := filepath.Join(dir, "made", "opt")
	text := `
[sandbox]
mount_host_paths = ["./scripts:/sandbox_scripts:ro", "` + missing + `:/opt"]
[sandbox.sandboxes.a]
volumes = ["/srv/x-sbx-test-missing:/data", "shared:/shared"]
mounts = ["type=bind,source=./scripts,target=/mnt/scripts,readonly", "type=volume,src=cache,dst=/cache"]
[sandbox.sandboxes.b]
`
	cfg, err := testRegistry(nil).ParseConfig([]byte(text), path)
	require.NoError(t, err)
	assert.Equal(t, []string{
		`sandbox.mount_host_paths: volume "` + missing + `:/opt": host path does not exist: made (0755) when a sandbox is made, as Docker makes it for OpenSage`,
		`sandbox.sandboxes.a.volumes: volume "/srv/x-sbx-test-missing:/data": host path does not exist (skipped)`,
	}, cfg.Warnings, "mount_host_paths warns once, not per entry")
	_, err = cfg.CheckSpec("a")
	require.NoError(t, err)
	assert.NoDirExists(t, missing, "CheckSpec makes nothing")

	scripts := filepath.Join(dir, "scripts")
	assert.Equal(t, []backend.Volume{
		{Type: backend.VolumeNamed, Source: "shared", Target: "/shared"},
		{Type: backend.VolumeBind, Source: scripts, Target: "/mnt/scripts", ReadOnly: true},
		{Type: backend.VolumeNamed, Source: "cache", Target: "/cache"},
		{Type: backend.VolumeBind, Source: scripts, Target: "/sandbox_scripts", ReadOnly: true},
		{Type: backend.VolumeBind, Source: missing, Target: "/opt"},
	}, mustSpec(t, cfg, "a").Volumes)
	assert.DirExists(t, missing, "Spec makes a missing mount_host_paths folder")
	assert.Equal(t, []backend.Volume{
		{Type: backend.VolumeBind, Source: scripts, Target: "/sandbox_scripts", ReadOnly: true},
		{Type: backend.VolumeBind, Source: missing, Target: "/opt"},
	}, mustSpec(t, cfg, "b").Volumes)

	// A backend that cannot mount host folders skips it, as before.
	require.NoError(t, os.Remove(missing))
	cfg, err = builtinRegistry().ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n"+text[strings.Index(text, "mount_host_paths"):]), path)
	require.NoError(t, err)
	assert.Contains(t, cfg.Warnings, `sandbox.mount_host_paths: volume "`+missing+`:/opt": host path does not exist (skipped)`)
	assert.NotContains(t, mustSpec(t, cfg, "b").Volumes, backend.Volume{Type: backend.VolumeBind, Source: missing, Target: "/opt"})
	assert.NoDirExists(t, missing)

	_, err = testRegistry(nil).ParseConfig([]byte("[sandbox.sandboxes.a]\nvolumes = [\"x:/d\", \"y:/d/\"]\n"), path)
	assert.EqualError(t, err, `config `+path+`: sandbox.sandboxes.a.volumes: volume "y:/d/": /d is already mounted by "x:/d"`)
	_, err = testRegistry(nil).ParseConfig([]byte("[sandbox.sandboxes.a]\nvolumes = [\"/etc:/d:rx\"]\n"), path)
	assert.EqualError(t, err, `config `+path+`: sandbox.sandboxes.a.volumes: volume "/etc:/d:rx": mode "rx": want ro or rw`)
}

func TestMounts(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		spec    string
		want    backend.Volume
		wantErr string
	}{
		{spec: "type=bind,source=.,target=/w", want: backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/w"}},
		{spec: "type=bind,src=" + dir + ",dst=/w,ro=true", want: backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/w", ReadOnly: true}},
		{spec: "source=data,destination=/d", want: backend.Volume{Type: backend.VolumeNamed, Source: "data", Target: "/d"}},
		{spec: "type=tmpfs,target=/t", wantErr: `type "tmpfs" is not supported (want bind or volume)`},
		{spec: "type=volume,target=/t", wantErr: "no source"},
		{spec: "type=volume,source=v", wantErr: "no target"},
		{spec: "type=volume,source=./v,target=/t", wantErr: `source "./v" of a volume mount is not a volume name`},
		{spec: "type=bind,source=.,target=/t,bind-propagation=shared", wantErr: `option "bind-propagation" is not supported (want type, source, target, readonly)`},
		{spec: "type=bind,source=.,target=/t,readonly=maybe", wantErr: `readonly="maybe": want true or false`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			v, _, err := parseMount(tt.spec, hostPaths{dir: dir})
			if tt.wantErr != "" {
				assert.EqualError(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, v)
		})
	}
}

func TestPorts(t *testing.T) {
	tests := []struct {
		name    string
		toml    string // the ports table's body
		want    []backend.Port
		wantErr string
	}{
		{"number", `"8081/tcp" = 18087`, []backend.Port{{Port: 8081, Protocol: "tcp", HostPort: 18087}}, ""},
		{"no protocol means tcp", `"8081" = 18087`, []backend.Port{{Port: 8081, Protocol: "tcp", HostPort: 18087}}, ""},
		{"udp", `"53/udp" = 5353`, []backend.Port{{Port: 53, Protocol: "udp", HostPort: 5353}}, ""},
		{"zero lets the backend choose", `"80" = 0`, []backend.Port{{Port: 80, Protocol: "tcp"}}, ""},
		{"empty string lets the backend choose", `"80" = ""`, []backend.Port{{Port: 80, Protocol: "tcp"}}, ""},
		{"numeric string", `"80" = "8080"`, []backend.Port{{Port: 80, Protocol: "tcp", HostPort: 8080}}, ""},
		{"host:port string", `"80" = "127.0.0.1:8080"`, []backend.Port{{Port: 80, Protocol: "tcp", HostIP: "127.0.0.1", HostPort: 8080}}, ""},
		{"IPv6 host:port string", `"80" = "[::1]:8080"`, []backend.Port{{Port: 80, Protocol: "tcp", HostIP: "::1", HostPort: 8080}}, ""},
		{"table", `"80" = { host = "0.0.0.0", port = 8080 }`, []backend.Port{{Port: 80, Protocol: "tcp", HostIP: "0.0.0.0", HostPort: 8080}}, ""},
		{"table with a templated port", `"80" = { host = "0.0.0.0", port = "${SBX_TEST_PORT}" }`, []backend.Port{{Port: 80, Protocol: "tcp", HostIP: "0.0.0.0", HostPort: 9999}}, ""},
		{"table without port", `"80" = { host = "127.0.0.1" }`, []backend.Port{{Port: 80, Protocol: "tcp", HostIP: "127.0.0.1"}}, ""},
		{"sorted by port", "\"9000\" = 1\n\"22\" = 2\n\"22/udp\" = 3", []backend.Port{
			{Port: 22, Protocol: "tcp", HostPort: 2}, {Port: 22, Protocol: "udp", HostPort: 3}, {Port: 9000, Protocol: "tcp", HostPort: 1}}, ""},
		{"bad protocol", `"80/sctp" = 1`, nil, `sandbox.sandboxes.main.ports."80/sctp": protocol "sctp": want tcp or udp`},
		{"bad port", `"http" = 1`, nil, `sandbox.sandboxes.main.ports.http: want PORT or PORT/tcp|udp with PORT in 1-65535, got "http"`},
		{"port out of range", `"70000" = 1`, nil, `sandbox.sandboxes.main.ports.70000: want PORT or PORT/tcp|udp with PORT in 1-65535, got "70000"`},
		{"host port out of range", `"80" = 70000`, nil, `sandbox.sandboxes.main.ports.80: host port 70000 out of range 0-65535`},
		{"bad string", `"80" = "eighty"`, nil, `sandbox.sandboxes.main.ports.80: want a host port, "host:port" or {host, port}, got "eighty"`},
		{"bool", `"80" = true`, nil, `sandbox.sandboxes.main.ports.80: want a host port, "host:port" or {host, port}, got true`},
		{"bad host", `"80" = { host = 1, port = 2 }`, nil, `sandbox.sandboxes.main.ports.80: host: want text, got 1`},
	}
	t.Setenv("SBX_TEST_PORT", "9999")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parse(t, "[sandbox.sandboxes.main.ports]\n"+tt.toml+"\n")
			if tt.wantErr != "" {
				require.ErrorIs(t, err, backend.ErrInvalidConfig)
				assert.EqualError(t, err, "config sandbox.toml: "+tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, mustSpec(t, cfg, "main").Ports)
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"", 0, false},
		{"1024", 1024, false},
		{"512b", 512, false},
		{"1k", 1 << 10, false},
		{"512m", 512 << 20, false},
		{"512M", 512 << 20, false},
		{"4g", 4 << 30, false},
		{"4G", 4 << 30, false},
		{"4gb", 4 << 30, false},
		{"4GiB", 4 << 30, false},
		{"4 GB", 4 << 30, false},
		{"1.5g", 3 << 29, false},
		{"2t", 2 << 40, false},
		{"1p", 1 << 50, false},
		{" 64m ", 64 << 20, false},
		{"4x", 0, true},
		{"g", 0, true},
		{"-1g", 0, true},
		{"4ib", 0, true},
		{"1.2.3g", 0, true},
		{"99999999p", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if tt.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		shell   bool
		wantErr string
	}{
		{in: "tail -f /dev/null", want: []string{"tail", "-f", "/dev/null"}},
		{in: "  spaced\t out \n", want: []string{"spaced", "out"}},
		{in: `sh -c 'echo $HOME && ls | wc -l'`, want: []string{"sh", "-c", "echo $HOME && ls | wc -l"}},
		{in: `echo "a \"quoted\" \$word" 'single \n'`, want: []string{"echo", `a "quoted" $word`, `single \n`}},
		{in: `echo "keep \n backslash"`, want: []string{"echo", `keep \n backslash`}},
		{in: `a\ b c\\d`, want: []string{"a b", `c\d`}},
		{in: `x''y "" ''`, want: []string{"xy", "", ""}},
		{in: "line \\\ncontinued", want: []string{"line", "continued"}},
		{in: `neo4j console --verbose=true`, want: []string{"neo4j", "console", "--verbose=true"}},
		{in: `echo 'unterminated`, wantErr: `command "echo 'unterminated": unterminated single quote`},
		{in: `echo "unterminated`, wantErr: `command "echo \"unterminated": unterminated double quote`},
		{in: `echo trailing\`, wantErr: `command "echo trailing\\" ends with a backslash`},
		// Unquoted shell syntax: the command is for a shell.
		{in: `cd /x && make`, shell: true},
		{in: `echo $(date)`, shell: true},
		{in: "ls | wc", shell: true},
		{in: "a; b", shell: true},
		{in: "tail -f /dev/null > /tmp/log 2>&1", shell: true},
		{in: "a < b", shell: true},
		{in: "echo `date`", shell: true},
		{in: `echo '|' ">"`, want: []string{"echo", "|", ">"}},
		{in: `echo $HOME`, want: []string{"echo", "$HOME"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, shell, err := splitCommand(tt.in)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.shell, shell)
		})
	}
}

func TestSpecCommand(t *testing.T) {
	cfg := mustParse(t, `
[sandbox.sandboxes.absent]
[sandbox.sandboxes.empty]
command = ""
[sandbox.sandboxes.blank]
command = "   "
[sandbox.sandboxes.argv]
command = "python3 -m http.server 8000"
[sandbox.sandboxes.shell]
command = "tail -f /dev/null | cat > /tmp/out"
`)
	tests := []struct {
		name         string
		command      []string
		imageCommand bool
	}{
		{"absent", nil, false},
		{"empty", nil, true},
		{"blank", nil, true},
		{"argv", []string{"python3", "-m", "http.server", "8000"}, false},
		{"shell", []string{"/bin/sh", "-c", "tail -f /dev/null | cat > /tmp/out"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := mustSpec(t, cfg, tt.name)
			assert.Equal(t, tt.command, spec.Command)
			assert.Equal(t, tt.imageCommand, spec.ImageCommand)
		})
	}
}

func TestSpecDetails(t *testing.T) {
	cfg := mustParse(t, `
[sandbox]
default_image = "base:1"
default_ttl = 3600
[sandbox.sandboxes.full]
image = "own:2"
user = "1000:1000"
working_dir = "/w"
network = "none"
privileged = true
cap_add = ["SYS_ADMIN"]
cap_drop = ["ALL"]
security_opt = ["no-new-privileges"]
read_only = true
runtime = "runsc"
gpus = "device=GPU-1,GPU-2"
ttl = 0
[sandbox.sandboxes.full.labels]
team = "x"
[sandbox.sandboxes.plain]
`)
	assert.Equal(t, backend.Spec{
		Name: "full", Image: "own:2", User: "1000:1000", WorkingDir: "/w", Network: "none",
		Privileged: true, CapAdd: []string{"SYS_ADMIN"}, CapDrop: []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"}, ReadOnlyRootfs: true, Runtime: "runsc",
		Resources: backend.Resources{GPUs: "GPU-1,GPU-2"},
		Labels:    map[string]string{"team": "x"},
		TTL:       0, // ttl = 0 overrides default_ttl: no expiry
	}, mustSpec(t, cfg, "full"))
	assert.Equal(t, backend.Spec{Name: "plain", Image: "base:1", TTL: time.Hour}, mustSpec(t, cfg, "plain"))
}

func TestGPUs(t *testing.T) {
	tests := []struct{ in, want, wantErr string }{
		{"", "", ""}, {"0", "", ""}, {"all", "all", ""}, {"2", "2", ""},
		{"device=0", "0", ""}, {`"device=0,1"`, "0,1", ""}, {"count=3", "3", ""}, {"count=all", "all", ""},
		{"capabilities=compute", "", `want "all", a count or "device=ID[,ID...]", got "capabilities=compute"`},
		{"-1", "", `want "all", a count or "device=ID[,ID...]", got "-1"`},
	}
	for _, tt := range tests {
		got, err := parseGPUs(tt.in)
		if tt.wantErr != "" {
			assert.EqualError(t, err, tt.wantErr, tt.in)
			continue
		}
		assert.NoError(t, err, tt.in)
		assert.Equal(t, tt.want, got, tt.in)
	}
}

func TestSpecRefusesWhatItCannotCarry(t *testing.T) {
	cfg := mustParse(t, `
[sandbox.sandboxes.one]
devices = ["/dev/kvm"]
[sandbox.sandboxes.many]
devices = ["/dev/kvm"]
host_gateway = true
`)
	_, err := cfg.Spec("one")
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorContains(t, err, `: sandbox.sandboxes.one: devices is not supported by this version of sandboxkit (remove it from the entry)`)
	_, err = cfg.Spec("many")
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.ErrorContains(t, err, `: sandbox.sandboxes.many: devices, host_gateway are not supported by this version of sandboxkit (remove them from the entry)`)
}

// Dockerfile keys become Spec.Build: the Dockerfile's folder is the
// context, relative paths resolve against the config's folder, image is
// the tag (default sbx-build/<name>:latest, never default_image).
func TestSpecBuild(t *testing.T) {
	dir := t.TempDir()
	cfg, err := testRegistry(nil).ParseConfig([]byte(`
[sandbox]
default_image = "debian:12"
[sandbox.sandboxes.main]
project_relative_dockerfile_path = "docker/main/Dockerfile"
[sandbox.sandboxes.main.build_args]
BASE = "busybox"
JOBS = 4
[sandbox.sandboxes.Tool_X]
image = "my/tool:dev"
agent_relative_dockerfile_path = "../tools/Dockerfile.tool"
[sandbox.sandboxes.abs]
absolute_dockerfile_path = "/srv/images/Dockerfile"
[sandbox.sandboxes.plain]
[sandbox.sandboxes.args_only]
build_args = { A = "1" }
`), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)

	main := mustSpec(t, cfg, "main")
	require.NotNil(t, main.Build)
	assert.Equal(t, backend.Build{
		ContextDir: filepath.Join(dir, "docker/main"),
		Dockerfile: filepath.Join(dir, "docker/main/Dockerfile"),
		Args:       map[string]string{"BASE": "busybox", "JOBS": "4"},
	}, *main.Build)
	assert.Equal(t, "sbx-build/main:latest", main.Image)

	tool := mustSpec(t, cfg, "Tool_X")
	require.NotNil(t, tool.Build)
	assert.Equal(t, filepath.Join(filepath.Dir(dir), "tools"), tool.Build.ContextDir)
	assert.Equal(t, filepath.Join(filepath.Dir(dir), "tools/Dockerfile.tool"), tool.Build.Dockerfile)
	assert.Nil(t, tool.Build.Args)
	assert.Equal(t, "my/tool:dev", tool.Image)

	abs := mustSpec(t, cfg, "abs")
	assert.Equal(t, "/srv/images", abs.Build.ContextDir)
	assert.Equal(t, "sbx-build/abs:latest", abs.Image)

	plain := mustSpec(t, cfg, "plain")
	assert.Nil(t, plain.Build)
	assert.Equal(t, "debian:12", plain.Image)

	assert.Nil(t, mustSpec(t, cfg, "args_only").Build)
	assert.Contains(t, cfg.Warnings, "sandbox.sandboxes.args_only.build_args: no Dockerfile is set (project_relative_dockerfile_path, ...), so build_args are not used")

	assert.Equal(t, "sbx-build/tool_x:latest", DefaultBuildImage("Tool_X"))
	assert.Equal(t, "sbx-build/my-tool:latest", DefaultBuildImage("My Tool!"))
	assert.Equal(t, "sbx-build/sandbox:latest", DefaultBuildImage(""))
}

// container_id (and pod_name) attach to an existing container.
func TestSpecExisting(t *testing.T) {
	cfg := mustParse(t, `
[sandbox.sandboxes.main]
container_id = "f00dfeed"
image = "ignored:1"
[sandbox.sandboxes.pod]
pod_name = "agent-0"
[sandbox.sandboxes.sidecar]
pod_name = "agent-0"
container_name = "tools"
`)
	assert.Equal(t, "f00dfeed", mustSpec(t, cfg, "main").Existing)
	assert.Equal(t, "agent-0", mustSpec(t, cfg, "pod").Existing)
	assert.Equal(t, "agent-0/tools", mustSpec(t, cfg, "sidecar").Existing)
	// Without pod_name, container_name names the container made.
	lone := mustSpec(t, mustParse(t, "[sandbox.sandboxes.lone]\ncontainer_name = \"tools\"\n"), "lone")
	assert.Equal(t, "tools", lone.ContainerName)
	assert.Empty(t, lone.Existing)
	assert.Empty(t, mustSpec(t, cfg, "sidecar").ContainerName, "with pod_name it picks the pod's container")

	_, err := parse(t, "[sandbox.sandboxes.both]\ncontainer_id = \"a\"\npod_name = \"b\"\n")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, "sandbox.sandboxes.both: container_id and pod_name are set; use one")
	_, err = parse(t, "[sandbox.sandboxes.built]\ncontainer_id = \"a\"\nproject_relative_dockerfile_path = \"Dockerfile\"\n")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, "sandbox.sandboxes.built: container_id attaches to an existing container, so nothing is built from project_relative_dockerfile_path")
}

func TestEntryLookup(t *testing.T) {
	cfg := mustParse(t, "[sandbox.sandboxes.main]\n[sandbox.sandboxes.neo4j]\ntype = \"graph\"\n")
	_, err := cfg.Entry("mian")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `unknown sandbox "mian" (known: main, neo4j)`)
	_, err = cfg.Spec("mian")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)

	e, err := cfg.Entry("neo4j")
	require.NoError(t, err)
	assert.Equal(t, "graph", e.Type)

	_, err = mustParse(t, "").Entry("main")
	assert.ErrorContains(t, err, `unknown sandbox "main" (known: none)`)
}

func TestDockerfileAndSharedDataPaths(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	unsetenv(t, EnvProjectRoot)
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, ".git"), 0o755))
	dir := filepath.Join(root, "agents", "mine") // the config file's folder
	require.NoError(t, os.MkdirAll(dir, 0o755))
	cfg, err := testRegistry(nil).ParseConfig([]byte(`
[sandbox]
project_relative_shared_data_path = "data/seed.tar.gz"
[sandbox.sandboxes.rel]
project_relative_dockerfile_path = "docker/Dockerfile"
[sandbox.sandboxes.agent]
agent_relative_dockerfile_path = "../Dockerfile"
[sandbox.sandboxes.abs]
absolute_dockerfile_path = "/srv/Dockerfile"
[sandbox.sandboxes.both]
absolute_dockerfile_path = "/srv/both/Dockerfile"
project_relative_dockerfile_path = "docker/Dockerfile"
[sandbox.sandboxes.tilde]
absolute_dockerfile_path = "~/Dockerfile"
[sandbox.sandboxes.none]
`), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)
	assert.Equal(t, root, cfg.ProjectRoot)
	want := map[string]string{
		"rel":   filepath.Join(root, "docker/Dockerfile"),
		"agent": filepath.Join(root, "agents", "Dockerfile"),
		"abs":   "/srv/Dockerfile",
		"both":  "/srv/both/Dockerfile", // absolute wins, as in OpenSage
		"tilde": filepath.Join(home, "Dockerfile"),
		"none":  "",
	}
	for name, path := range want {
		e, err := cfg.Entry(name)
		require.NoError(t, err)
		assert.Equal(t, path, e.DockerfilePath(), name)
	}
	assert.Equal(t, "/srv/both", mustSpec(t, cfg, "both").Build.ContextDir)
	assert.Equal(t, filepath.Join(root, "data/seed.tar.gz"), cfg.SharedDataPath())
	cfg.Sandbox.AbsoluteSharedDataPath = "/abs/data"
	assert.Equal(t, "/abs/data", cfg.SharedDataPath(), "absolute_shared_data_path wins")
}

// The project root: [sandbox] project_root, else $SBX_PROJECT_ROOT, else
// the nearest folder at or above the config's holding a project marker,
// else the config's folder.
func TestProjectRoot(t *testing.T) {
	tmp := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{tmp}, parts...)...)
		require.NoError(t, os.MkdirAll(p, 0o755))
		return p
	}
	touch := func(parts ...string) {
		p := filepath.Join(append([]string{tmp}, parts...)...)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	mk("git", ".git")
	mk("git", "a", "b")
	touch("py", "pyproject.toml")
	mk("py", "cfg")
	mk("gomod", "inner")
	touch("gomod", "go.mod")
	touch("setup", "setup.py")
	mk("nested", ".git")
	mk("nested", "sub", "cfg")
	touch("nested", "sub", "setup.py") // the nearest marker wins
	mk("plain", "cfg")
	mk("named", "root")
	mk("fromenv")
	wd := mk("wd")

	tests := []struct {
		name, cfgDir, table, env string
		wantRoot, wantFrom       string
	}{
		{"git above", "git/a/b", "", "", "git", "the nearest folder holding .git at or above the config's folder"},
		{"pyproject.toml", "py/cfg", "", "", "py", "the nearest folder holding pyproject.toml at or above the config's folder"},
		{"go.mod", "gomod/inner", "", "", "gomod", "the nearest folder holding go.mod at or above the config's folder"},
		{"setup.py in the config's own folder", "setup", "", "", "setup", "the nearest folder holding setup.py at or above the config's folder"},
		{"nearest marker", "nested/sub/cfg", "", "", "nested/sub", "the nearest folder holding setup.py at or above the config's folder"},
		{"none: the config's folder", "plain/cfg", "", "", "plain/cfg", "the config's folder: no .git, pyproject.toml, go.mod or setup.py at or above it"},
		{"the variable wins over markers", "git/a/b", "", "../fromenv", "fromenv", "$SBX_PROJECT_ROOT"},
		{"the key wins over the variable", "git/a/b", `project_root = "../../../named/root"`, "fromenv", "named/root", "[sandbox] project_root"},
		{"an absolute key", "plain/cfg", `project_root = "` + filepath.Join(tmp, "named") + `"`, "", "named", "[sandbox] project_root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(wd)
			if tt.env == "" {
				unsetenv(t, EnvProjectRoot)
			} else {
				t.Setenv(EnvProjectRoot, tt.env)
			}
			text := "[sandbox]\n" + tt.table + "\nproject_relative_shared_data_path = \"seed\"\n"
			cfg, err := testRegistry(nil).ParseConfig([]byte(text), filepath.Join(tmp, tt.cfgDir, "sandbox.toml"))
			require.NoError(t, err)
			root := filepath.Join(tmp, tt.wantRoot)
			assert.Equal(t, root, cfg.ProjectRoot)
			assert.Equal(t, tt.wantFrom, cfg.ProjectRootFrom)
			assert.Equal(t, filepath.Join(root, "seed"), cfg.SharedDataPath())
		})
	}
}

// CheckHostPaths fails on a Dockerfile, build context or named project
// root that does not exist, naming the key and the path (shared data that
// does not exist is a warning: TestSharedDataAsOpenSage).
func TestCheckHostPaths(t *testing.T) {
	unsetenv(t, EnvProjectRoot)
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, ".git"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docker", "ok"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "docker", "ok", "Dockerfile"), []byte("FROM scratch\n"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(root, "seed"), 0o755))
	cfgDir := filepath.Join(root, "agent")
	require.NoError(t, os.Mkdir(cfgDir, 0o755))

	tests := []struct {
		name, text string
		want       []string // substrings of the error; none: no error
	}{
		{"all there", `[sandbox]
project_relative_shared_data_path = "seed"
[sandbox.sandboxes.main]
project_relative_dockerfile_path = "docker/ok/Dockerfile"`, nil},
		{"missing Dockerfile", `[sandbox.sandboxes.main]
project_relative_dockerfile_path = "docker/ok/Dockerfile.missing"`, []string{
			"sandbox.sandboxes.main.project_relative_dockerfile_path: Dockerfile " + filepath.Join(root, "docker/ok/Dockerfile.missing") + " does not exist",
			"(relative to the project root " + root + ", from the nearest folder holding .git",
		}},
		{"missing build context", `[sandbox.sandboxes.main]
agent_relative_dockerfile_path = "nowhere/Dockerfile"`, []string{
			"sandbox.sandboxes.main.agent_relative_dockerfile_path: build context " + filepath.Join(cfgDir, "nowhere") + " does not exist",
		}},
		{"a folder for a Dockerfile", `[sandbox.sandboxes.main]
absolute_dockerfile_path = "` + filepath.Join(root, "docker", "ok") + `"`, []string{"is a folder, not a file"}},
		{"missing project root", `[sandbox]
project_root = "../gone"
project_relative_shared_data_path = "seed"`, []string{
			"sandbox.project_root: project root " + filepath.Join(root, "gone") + " does not exist",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := testRegistry(nil).ParseConfig([]byte(tt.text), filepath.Join(cfgDir, "sandbox.toml"))
			require.NoError(t, err, "missing paths do not stop loading")
			err = cfg.CheckHostPaths()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, backend.ErrInvalidConfig)
			for _, w := range tt.want {
				assert.ErrorContains(t, err, w)
			}
		})
	}
}

func TestDurations(t *testing.T) {
	tests := []struct {
		toml string
		want time.Duration
	}{
		{"default_ttl = 60", time.Minute},
		{"default_ttl = 1.5", 1500 * time.Millisecond},
		{`default_ttl = "48h"`, 48 * time.Hour},
		{`default_ttl = "90"`, 90 * time.Second},
		{`default_ttl = "1h30m"`, 90 * time.Minute},
		{"default_ttl = 0", 0},
		{`default_ttl = ""`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.toml, func(t *testing.T) {
			cfg := mustParse(t, "[sandbox]\n"+tt.toml+"\n")
			assert.Equal(t, tt.want, cfg.Sandbox.DefaultTTL)
		})
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"image", "image", 0}, {"imgae", "image", 1}, {"imag", "image", 1},
		{"mem_limt", "mem_limit", 1}, {"dokcer", "docker", 1}, {"", "abc", 3}, {"kitten", "sitting", 3},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, editDistance(tt.a, tt.b), "%s/%s", tt.a, tt.b)
	}
}

// With remotedocker, host paths name folders on the remote host: they are
// not looked up here (a folder only the server has is kept, not skipped),
// and paths that only make sense here (~, relative) are refused.
func TestRemoteHostPaths(t *testing.T) {
	const head = "[sandbox]\nbackend = \"remotedocker\"\ndocker_host = \"ssh://gpu-box\"\n"
	cfg := mustParseDefault(t, head+`mount_host_paths = ["/srv/only-on-the-server/cache:/cache"]
[sandbox.sandboxes.main]
volumes = ["/srv/only-on-the-server/models:/models:ro", "data:/data"]
mounts = ["type=bind,source=/srv/only-on-the-server/x,target=/x"]
`)
	assert.Empty(t, cfg.Warnings)
	spec := mustSpec(t, cfg, "main")
	assert.Equal(t, []backend.Volume{
		{Type: backend.VolumeBind, Source: "/srv/only-on-the-server/models", Target: "/models", ReadOnly: true},
		{Type: backend.VolumeNamed, Source: "data", Target: "/data"},
		{Type: backend.VolumeBind, Source: "/srv/only-on-the-server/x", Target: "/x"},
		{Type: backend.VolumeBind, Source: "/srv/only-on-the-server/cache", Target: "/cache"},
	}, spec.Volumes)

	for _, bad := range []string{"~/models:/models", "./models:/models", "models/x:/models"} {
		_, err := builtinRegistry().ParseConfig([]byte(head+"[sandbox.sandboxes.main]\nvolumes = [\""+bad+"\"]\n"), "sandbox.toml")
		require.ErrorIs(t, err, backend.ErrInvalidConfig, bad)
		assert.ErrorContains(t, err, "sandbox.sandboxes.main.volumes", bad)
		assert.ErrorContains(t, err, "absolute path on that host", bad)
	}

	// Switching backends after loading (sbx --backend) re-reads them.
	local := mustParseDefault(t, "[sandbox]\n[sandbox.sandboxes.main]\nvolumes = [\"/srv/only-on-the-server/models:/models\"]\n")
	assert.Empty(t, mustSpec(t, local, "main").Volumes, "missing local host path is skipped")
	require.NoError(t, local.SetBackend("remotedocker"))
	assert.Len(t, mustSpec(t, local, "main").Volumes, 1)
	require.NoError(t, local.SetBackend("local"))
	assert.Empty(t, mustSpec(t, local, "main").Volumes)
}

// SetBackend re-derives default_ttl unless the file wrote it, and refuses
// unknown backends without changing anything.
func TestSetBackend(t *testing.T) {
	cfg := mustParseDefault(t, "[sandbox]\nbackend = \"local\"\n[sandbox.opensandbox]\ndefault_timeout_sec = 600\n[sandbox.sandboxes.main]\n")
	assert.Equal(t, DefaultTTL, cfg.Sandbox.DefaultTTL)
	require.NoError(t, cfg.SetBackend("opensandbox"))
	assert.Equal(t, 10*time.Minute, cfg.Sandbox.DefaultTTL)
	assert.Equal(t, 10*time.Minute, mustSpec(t, cfg, "main").TTL)

	err := cfg.SetBackend("nosuch")
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `"nosuch"`)
	assert.Equal(t, "opensandbox", cfg.Sandbox.Backend)

	written := mustParseDefault(t, "[sandbox]\ndefault_ttl = \"2h\"\n[sandbox.sandboxes.main]\n")
	require.NoError(t, written.SetBackend("opensandbox"))
	assert.Equal(t, 2*time.Hour, written.Sandbox.DefaultTTL)
}

// mustParseDefault parses text with the default registry (the real
// backends).
func mustParseDefault(t *testing.T, text string) *Config {
	t.Helper()
	cfg, err := builtinRegistry().ParseConfig([]byte(text), "sandbox.toml")
	require.NoError(t, err)
	return cfg
}

// OpenSage's cache manifest folders for remotedocker and opensandbox are
// named in a warning when set, never silently taken.
func TestOpenSageCacheVarsWarn(t *testing.T) {
	t.Setenv("OPENSAGE_REMOTE_DOCKER_CACHE_DIR", "/var/cache/os")
	t.Setenv("OPENSAGE_OPENSANDBOX_CACHE_DIR", "")
	cfg, err := builtinRegistry().ParseConfig([]byte("[sandbox]\nbackend = \"remotedocker\"\n[sandbox.remotedocker]\ndocker_host = \"ssh://u@h\"\n"), "sandbox.toml")
	require.NoError(t, err)
	require.Len(t, cfg.Warnings, 1, "%q", cfg.Warnings)
	assert.Contains(t, cfg.Warnings[0], "$OPENSAGE_REMOTE_DOCKER_CACHE_DIR")
	cfg, err = builtinRegistry().ParseConfig([]byte("[sandbox]\nbackend = \"native\"\n"), "sandbox.toml")
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings, "the variable of another backend")
}

// The shared data as OpenSage reads it: a relative absolute_shared_data_path
// resolves against the working directory (not the config's folder), and
// shared data that does not exist is a warning naming the key and the path
// (the launch goes on with an empty /shared), not an error.
func TestSharedDataAsOpenSage(t *testing.T) {
	unsetenv(t, EnvProjectRoot)
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, ".git"), 0o755))
	cfgDir := filepath.Join(root, "agent")
	wd := filepath.Join(root, "run")
	for _, d := range []string{cfgDir, filepath.Join(wd, "data")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(wd, "data", "seed.tar.gz"), nil, 0o644))
	t.Chdir(wd)
	for _, tt := range []struct {
		name, text, path, warning string
	}{
		{"relative absolute key: the working directory", `absolute_shared_data_path = "data/seed.tar.gz"`,
			filepath.Join(wd, "data", "seed.tar.gz"), ""},
		{"relative absolute key, missing", `absolute_shared_data_path = "data/gone.tar.gz"`,
			filepath.Join(wd, "data", "gone.tar.gz"),
			"sandbox.absolute_shared_data_path: shared data " + filepath.Join(wd, "data", "gone.tar.gz") + " does not exist (relative to the working directory " + wd + ", as in OpenSage): nothing is copied and /shared starts empty, as in OpenSage"},
		{"absolute key, missing", `absolute_shared_data_path = "/nonexistent/sbx-seed"`,
			"/nonexistent/sbx-seed",
			"sandbox.absolute_shared_data_path: shared data /nonexistent/sbx-seed does not exist: nothing is copied and /shared starts empty, as in OpenSage"},
		{"project key, missing", `project_relative_shared_data_path = "seed.tar.gz"`,
			filepath.Join(root, "seed.tar.gz"),
			"sandbox.project_relative_shared_data_path: shared data " + filepath.Join(root, "seed.tar.gz") + " does not exist (relative to the project root " + root},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := testRegistry(nil).ParseConfig([]byte("[sandbox]\n"+tt.text+"\n"), filepath.Join(cfgDir, "sandbox.toml"))
			require.NoError(t, err)
			assert.Equal(t, tt.path, cfg.SharedDataPath())
			require.NoError(t, cfg.CheckHostPaths())
			var warned []string
			for _, w := range cfg.Warnings {
				if strings.Contains(w, "shared_data_path") {
					warned = append(warned, w)
				}
			}
			if tt.warning == "" {
				assert.Empty(t, warned)
				return
			}
			require.Len(t, warned, 1)
			assert.Contains(t, warned[0], tt.warning)
		})
	}
}
