package session

import (
	"cmp"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/catalog"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
)

// testRegistry has the real built-in backends, from the catalog (the one
// list; this package's tests cannot import the root package, which imports
// this one, but the catalog imports no session).
func testRegistry() *config.Registry {
	r := config.NewRegistry()
	catalog.Backends(r)
	return r
}

// documentedKeys returns the key names written in a TOML text, active or
// commented out.
func documentedKeys(text string) map[string]bool {
	keys := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*#?\s*"?([A-Za-z0-9_-]+)"?\s*=`).FindAllStringSubmatch(text, -1) {
		keys[m[1]] = true
	}
	return keys
}

// TestExampleConfigInitializers: every entry of config.example.toml passes
// the checks Launch makes before anything is made, and every key of every
// built-in initializer's config is documented there.
func TestExampleConfigInitializers(t *testing.T) {
	data, err := os.ReadFile("../config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := testRegistry().ParseConfig(data, "config.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEntries(cfg, nil); err != nil {
		t.Errorf("config.example.toml: %v", err)
	}
	documented := documentedKeys(string(data))
	reg := initializers.Default()
	for _, typ := range reg.Names() {
		hasEntry := slices.ContainsFunc(cfg.SandboxNames(), func(name string) bool {
			return cmp.Or(cfg.Sandbox.Sandboxes[name].Type, name) == typ
		})
		if !hasEntry && typ != initializers.GenericType {
			t.Errorf("initializer %s has no entry in config.example.toml", typ)
		}
		f, _, _ := reg.Lookup(typ)
		for _, key := range config.Keys(f.NewConfig()) {
			if !documented[key] {
				t.Errorf("key %s of initializer %s is not in config.example.toml", key, typ)
			}
		}
	}
}

func TestMergeSpec(t *testing.T) {
	cfg, err := testRegistry().ParseConfig([]byte(`
[sandbox]
default_image = "base:1"
[sandbox.sandboxes.neo4j]
environment = { NEO4J_AUTH = "neo4j/override-it" }
ports = { "7474" = 17474 }
[sandbox.sandboxes.gdb_mcp]
command = "sleep infinity"
`), "")
	if err != nil {
		t.Fatal(err)
	}
	l := &Launcher{Config: cfg}
	ms, err := l.plan(nil, "s1")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*member{}
	for _, m := range ms {
		byName[m.name] = m
	}
	neo := byName["neo4j"].spec
	if neo.Image != initializers.DefaultNeo4jImage {
		t.Errorf("neo4j image %q: the initializer's default beats default_image", neo.Image)
	}
	if neo.Env["NEO4J_AUTH"] != "neo4j/override-it" {
		t.Errorf("the entry's environment must win: %v", neo.Env)
	}
	if len(neo.Ports) != 2 || neo.Ports[0].Port != 7474 || neo.Ports[0].HostPort != 17474 {
		t.Errorf("ports: the entry's binding of 7474 wins, 7687 added: %+v", neo.Ports)
	}
	if !strings.Contains(neo.Command[2], "docker-entrypoint.sh") {
		t.Errorf("neo4j command: %q", neo.Command)
	}
	gdb := byName["gdb_mcp"].spec
	if gdb.Image != "base:1" || strings.Join(gdb.Command, " ") != "sleep infinity" {
		t.Errorf("gdb_mcp: image %q (want default_image), command %q", gdb.Image, gdb.Command)
	}
	if gdb.Labels[LabelMembers] != "gdb_mcp,neo4j" || gdb.Labels[LabelType] != "gdb_mcp" || gdb.Session != "s1" {
		t.Errorf("labels: %v, session %q", gdb.Labels, gdb.Session)
	}
}

// Cycles among initializers' dependencies are refused before anything is
// made.
func TestDependencyCycle(t *testing.T) {
	reg := initializers.NewRegistry()
	initializers.Builtins(reg)
	for typ, dep := range map[string]string{"a": "b", "b": "a"} {
		reg.Register(typ, initializers.Factory{New: func(any) (initializers.Initializer, error) { return dependsOn{name: dep}, nil }})
	}
	cfg, err := testRegistry().ParseConfig([]byte("[sandbox.sandboxes.a]\n[sandbox.sandboxes.b]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	err = CheckEntries(cfg, reg)
	if err == nil || !strings.Contains(err.Error(), "cycle: a -> b -> a") {
		t.Errorf("want a cycle error, got %v", err)
	}
}

type dependsOn struct {
	initializers.Generic
	name string
}

func (d dependsOn) DependsOn() []initializers.Dependency {
	return []initializers.Dependency{{Name: d.name}}
}

// An OpenSage file passes the session checks unchanged: entries without a
// built-in initializer (pdb_mcp) keep their own [extra] keys, while a
// built-in initializer's keys stay type-checked.
func TestOpenSageConfigInitializers(t *testing.T) {
	cfg, err := testRegistry().LoadConfig("../config/testdata/opensage.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEntries(cfg, nil); err != nil {
		t.Errorf("testdata/opensage.toml: %v", err)
	}
	if _, ok := cfg.Sandbox.Sandboxes["pdb_mcp"].Extra["pdb_threads"]; !ok {
		t.Fatal("the fixture lost its pdb_threads key")
	}
	wrongType, err := testRegistry().ParseConfig([]byte("[sandbox.sandboxes.codeql.extra]\ninitializer_timeout_sec = \"soon\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEntries(wrongType, nil); err == nil || !strings.Contains(err.Error(), "initializer_timeout_sec") {
		t.Errorf("a known key of the generic initializer is still type-checked: %v", err)
	}
}

// OpenSage's [extra] is a free map: a key that neither the selected backend
// nor the entry's initializer reads is a warning naming the key and who
// reads it, and the checks pass; only a value a reader of this launch takes
// is refused when malformed. Switching the backend changes which keys are
// warned about, nothing else.
func TestExtraKeysWarnNotRefuse(t *testing.T) {
	const entries = `
[sandbox.sandboxes.main]
image = "busybox"
[sandbox.sandboxes.main.extra]
NEO4J_dbms_mode = "SINGLE"
cached_rootfs_tar = "/tmp/cache/main.tar"
cpu_max = "50000 100000"
namespace = "agents"
initializer_timout_sec = 60
password = "not-mine-at-all"
opensandbox_timeout_sec = 600
[sandbox.sandboxes.worker.extra]
packages = ["requests"]
`
	for _, tt := range []struct {
		backend string
		want    []string
	}{
		{"native", []string{
			"sandbox.sandboxes.main.extra.NEO4J_dbms_mode: read by nothing in sandboxkit (ignored)",
			"sandbox.sandboxes.main.extra.cached_rootfs_tar: read by OpenSage's cache loader, not by sandboxkit (ignored)",
			"sandbox.sandboxes.main.extra.cpu_max: read by the lite backend, not by the native backend or the main initializer (ignored)",
			`sandbox.sandboxes.main.extra.initializer_timout_sec: read by nothing in sandboxkit (ignored) (did you mean "initializer_timeout_sec"?)`,
			"sandbox.sandboxes.main.extra.namespace: read by the k8s backend, not by the native backend or the main initializer (ignored)",
			"sandbox.sandboxes.main.extra.opensandbox_timeout_sec: read by the opensandbox backend, not by the native backend or the main initializer (ignored)",
			"sandbox.sandboxes.main.extra.password: read by the neo4j initializer, not by the native backend or the main initializer (ignored)",
			"sandbox.sandboxes.worker.extra.packages: read by the main initializer, not by the native backend or the generic initializer (ignored)",
		}},
		{"agentdocker-lite", []string{
			"sandbox.sandboxes.main.extra.NEO4J_dbms_mode: read by nothing in sandboxkit (ignored)",
			"sandbox.sandboxes.main.extra.cached_rootfs_tar: read by OpenSage's cache loader, not by sandboxkit (ignored)",
			`sandbox.sandboxes.main.extra.initializer_timout_sec: read by nothing in sandboxkit (ignored) (did you mean "initializer_timeout_sec"?)`,
			"sandbox.sandboxes.main.extra.namespace: read by the k8s backend, not by the lite backend or the main initializer (ignored)",
			"sandbox.sandboxes.main.extra.opensandbox_timeout_sec: read by the opensandbox backend, not by the lite backend or the main initializer (ignored)",
			"sandbox.sandboxes.main.extra.password: read by the neo4j initializer, not by the lite backend or the main initializer (ignored)",
			"sandbox.sandboxes.worker.extra.packages: read by the main initializer, not by the lite backend or the generic initializer (ignored)",
		}},
	} {
		cfg, err := testRegistry().ParseConfig([]byte("[sandbox]\nbackend = \""+tt.backend+"\"\n"+entries), "")
		if err != nil {
			t.Fatalf("%s: %v", tt.backend, err)
		}
		for _, name := range cfg.SandboxNames() {
			if _, err := cfg.CheckSpec(name); err != nil {
				t.Errorf("%s: %s: %v", tt.backend, name, err)
			}
		}
		if err := CheckEntries(cfg, nil); err != nil {
			t.Errorf("%s: %v", tt.backend, err)
		}
		if got := EntryWarnings(cfg, nil); !slices.Equal(got, tt.want) {
			t.Errorf("%s: warnings\n%s\nwant\n%s", tt.backend, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
	// A key the entry's initializer reads is still type-checked, and a
	// value the selected backend reads still has to be well formed.
	for _, tt := range []struct{ text, want string }{
		{"[sandbox.sandboxes.main.extra]\npackages = \"numpy\"\n", "sandbox.sandboxes.main.extra.packages"},
		{"[sandbox]\nbackend = \"lite\"\n[sandbox.sandboxes.main.extra]\ncpu_max = \"half\"\n", `sandbox.sandboxes.main.extra.cpu_max: want "QUOTA PERIOD"`},
	} {
		cfg, err := testRegistry().ParseConfig([]byte(tt.text), "")
		if err == nil {
			err = CheckEntries(cfg, nil)
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: want an error containing %q, got %v", tt.text, tt.want, err)
		}
	}
}

// The session's sandbox_scripts come from an OpenSage checkout at the
// project root when no key names a folder (config.Config.ToolFolders), and
// a launch warns beforehand about the OpenSage scripts its initializers
// will lack: all of them when nothing fills the folder, else those the
// folder does not have.
func TestScriptWarnings(t *testing.T) {
	t.Setenv(config.EnvProjectRoot, "")
	entries := "[build]\ncompile_command = \"make\"\n[sandbox.sandboxes.main]\n[sandbox.sandboxes.neo4j]\n[sandbox.sandboxes.codeql]\n[sandbox.sandboxes.fuzz]\n[sandbox.sandboxes.gdb_mcp]\n"

	plain := t.TempDir()
	os.WriteFile(filepath.Join(plain, "pyproject.toml"), nil, 0o644)
	cfg, err := testRegistry().ParseConfig([]byte(entries), filepath.Join(plain, "sandbox.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if bt, _, sc, _ := cfg.ToolFolders(); bt != "" || sc != "" {
		t.Errorf("no checkout: tool folders %q, %q", bt, sc)
	}
	want := "the session's sandbox_scripts folder starts empty (the project root " + plain + " is no OpenSage checkout with src/opensage/sandbox_scripts, " +
		"and neither [sandbox] sandbox_scripts_path nor sbx up --sandbox-scripts names one), so these lack their OpenSage scripts unless their images hold them in /sandbox_scripts: " +
		"codeql (callgraph/run_codeql.sh), fuzz (ossfuzz/compile_aflpp.sh)"
	if got := EntryWarnings(cfg, nil); !slices.Contains(got, want) {
		t.Errorf("no checkout: warnings %q, want %q", got, want)
	}

	// An OpenSage-shaped checkout (the corpus) whose scripts are partial.
	checkout := filepath.Join("..", "config", "testdata", "opensage-project")
	abs, _ := filepath.Abs(checkout)
	cfg, err = testRegistry().ParseConfig([]byte(entries), filepath.Join(abs, "examples", "agents", "x", "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	bt, btFrom, sc, scFrom := cfg.ToolFolders()
	if bt != filepath.Join(abs, "src/opensage/bash_tools") || sc != filepath.Join(abs, "src/opensage/sandbox_scripts") ||
		btFrom != scFrom || !strings.Contains(scFrom, "the OpenSage checkout at the project root "+abs) {
		t.Errorf("checkout: tool folders %q (%s), %q (%s)", bt, btFrom, sc, scFrom)
	}
	got := EntryWarnings(cfg, nil)
	for _, w := range []string{
		`sandbox "codeql" (type codeql) runs callgraph/run_codeql.sh from sandbox_scripts, which ` + sc + " (from " + scFrom + ") does not have",
		`sandbox "fuzz" (type fuzz) runs ossfuzz/compile_aflpp.sh from sandbox_scripts, which ` + sc + " (from " + scFrom + ") does not have",
	} {
		if !slices.Contains(got, w) {
			t.Errorf("checkout: warnings %q, want %q", got, w)
		}
	}
	if len(got) != 2 {
		t.Errorf("checkout: %d warnings, want the two scripts: %q", len(got), got)
	}
}
