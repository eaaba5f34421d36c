package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExampleConfigFile keeps config.example.toml honest: it loads cleanly
// with the built-in backends, every entry in it becomes a Spec, and every
// key of the config structs (and of each built-in backend's table) appears
// in it, so documentation cannot drift from the code.
func TestExampleConfigFile(t *testing.T) {
	data, err := os.ReadFile("../config.example.toml")
	require.NoError(t, err)
	cfg, err := builtinRegistry().ParseConfig(data, "../config.example.toml")
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings)
	for _, name := range cfg.SandboxNames() {
		_, err := cfg.Spec(name)
		assert.NoError(t, err, name)
	}

	documented := documentedKeys(string(data))
	var check func(t *testing.T, typ reflect.Type, table string)
	check = func(t *testing.T, typ reflect.Type, table string) {
		for _, f := range fieldsOf(elemType(typ)) {
			assert.True(t, documented[f.name], "key %s.%s is not in config.example.toml", table, f.name)
			ft, sub := elemType(f.typ), table+"."+f.name
			if ft.Kind() == reflect.Map {
				ft, sub = elemType(ft.Elem()), sub+".NAME"
			}
			if ft.Kind() == reflect.Struct && !isRaw(ft) {
				check(t, ft, sub)
			}
		}
	}
	check(t, reflect.TypeFor[SandboxConfig](), "sandbox")
	for _, name := range builtinRegistry().Names() {
		f, err := builtinRegistry().Lookup(name)
		require.NoError(t, err)
		if f.NewConfig == nil {
			continue
		}
		assert.True(t, documented[name], "backend table [sandbox.%s] is not in config.example.toml", name)
		check(t, reflect.TypeOf(f.NewConfig()), "sandbox."+name)
	}
}

var (
	exampleKeyRE    = regexp.MustCompile(`(?m)^\s*#?\s*"?([A-Za-z0-9_-]+)"?\s*=`)
	exampleHeaderRE = regexp.MustCompile(`(?m)^\s*#?\s*\[+([^\]]+)\]+`)
)

// documentedKeys returns the key names written in a TOML text, active or
// commented out, including the parts of table headers.
func documentedKeys(text string) map[string]bool {
	keys := map[string]bool{}
	for _, m := range exampleKeyRE.FindAllStringSubmatch(text, -1) {
		keys[m[1]] = true
	}
	for _, m := range exampleHeaderRE.FindAllStringSubmatch(text, -1) {
		for part := range strings.SplitSeq(m[1], ".") {
			keys[strings.Trim(strings.TrimSpace(part), `"`)] = true
		}
	}
	return keys
}
