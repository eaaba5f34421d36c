package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// buildDefaulted is an initializer config taking compile_command from
// [build], as initializers.CodeQLConfig does.
type buildDefaulted struct {
	CompileCommand string `toml:"compile_command"`
}

func (b *buildDefaulted) DefaultCompileCommand(cmd string) { b.CompileCommand = cmd }

func TestBuildTable(t *testing.T) {
	unsetenv(t, "JOBS")
	cfg := mustParse(t, `
JOBS = 8
[build]
compile_command = "make -j${JOBS}"
run_command = "./run.sh"
target_binary = "/out/fuzzer"
[sandbox.sandboxes.codeql]
[sandbox.sandboxes.other]
[sandbox.sandboxes.other.extra]
compile_command = "ninja"
`)
	assert.Equal(t, BuildConfig{CompileCommand: "make -j8", RunCommand: "./run.sh", TargetBinary: "/out/fuzzer"}, cfg.Build())

	var fromBuild, own buildDefaulted
	require.NoError(t, cfg.DecodeExtra(cfg.Sandbox.Sandboxes["codeql"], &fromBuild))
	assert.Equal(t, "make -j8", fromBuild.CompileCommand, "[build] compile_command is the default")
	require.NoError(t, cfg.DecodeExtra(cfg.Sandbox.Sandboxes["other"], &own))
	assert.Equal(t, "ninja", own.CompileCommand, "the entry's own compile_command wins")

	assert.Equal(t, BuildConfig{}, mustParse(t, "[sandbox]\n").Build(), "no [build] table")
}

func TestBuildTableErrors(t *testing.T) {
	for name, tc := range map[string]struct{ text, want string }{
		"misspelt key":  {"[build]\ncompile_comand = \"make\"\n", `unknown key "build.compile_comand" (did you mean "compile_command"?)`},
		"wrong type":    {"[build]\ncompile_command = [\"make\"]\n", "build.compile_command"},
		"not a table":   {"build = \"make\"\n", "build: want a table"},
		"undefined var": {"[build]\ncompile_command = \"${NOPE_NOT_SET}\"\n", "NOPE_NOT_SET"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse(t, tc.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, errors.Is(err, backend.ErrInvalidConfig), "%v", err)
		})
	}
}
