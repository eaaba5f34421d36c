package session

import (
	"cmp"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/k8s"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/native"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/remotedocker"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
)

// testRegistry has the real built-in backends, as sandboxkit's catalog
// (registry.go) wires them: this package's tests cannot import the root
// package, which imports this one.
func testRegistry() *config.Registry {
	r := config.NewRegistry()
	for _, f := range []backend.Factory{k8s.Factory, lite.Factory, local.Factory, native.Factory, opensandbox.Factory, remotedocker.Factory} {
		r.Register(f)
	}
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
// built-in initializer's keys stay strict.
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
	bad, err := testRegistry().ParseConfig([]byte("[sandbox.sandboxes.main.extra]\npakages = [\"requests\"]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	err = CheckEntries(bad, nil)
	if err == nil || !strings.Contains(err.Error(), "sandbox.sandboxes.main.extra.pakages") {
		t.Errorf("misspelt main key: %v, want an error naming it", err)
	}
	wrongType, err := testRegistry().ParseConfig([]byte("[sandbox.sandboxes.codeql.extra]\ninitializer_timeout_sec = \"soon\"\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckEntries(wrongType, nil); err == nil || !strings.Contains(err.Error(), "initializer_timeout_sec") {
		t.Errorf("a known key of the generic initializer is still type-checked: %v", err)
	}
}
