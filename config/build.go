package config

import "github.com/BurntSushi/toml"

// BuildConfig is the root [build] table of an OpenSage file: how the target
// project is built and run. sandboxkit reads CompileCommand (the default
// build command of the codeql initializer); the other keys are OpenSage's,
// typed and kept for the embedding program. The table is decoded strictly:
// a misspelt key is an error naming it ("build.compile_comand").
type BuildConfig struct {
	CompileCommand string `toml:"compile_command"`
	RunCommand     string `toml:"run_command"`
	PocDir         string `toml:"poc_dir"`
	TargetType     string `toml:"target_type"`
	TargetBinary   string `toml:"target_binary"`
}

// Build returns the root [build] table (zero when the file has none).
func (c *Config) Build() BuildConfig { return c.build }

// decodeBuild decodes the root [build] table, with ${VAR} templates, into
// p.cfg.build.
func (p *parser) decodeBuild(doc map[string]any) {
	switch v := doc["build"].(type) {
	case nil:
	case map[string]any:
		p.decodeStrict(v, toml.Key{"build"}, &p.cfg.build, nil)
	default:
		p.errorf("build", "want a table, got %s", describeValue(v))
	}
}

// compileCommandDefault is implemented by initializer configs whose
// compile_command defaults to [build] compile_command
// (initializers.CodeQLConfig).
type compileCommandDefault interface{ DefaultCompileCommand(string) }

// applyBuildDefaults gives v the defaults it takes from [build], before
// its [extra] table is decoded over them (so the entry's own key wins).
func (c *Config) applyBuildDefaults(v any) {
	if d, ok := v.(compileCommandDefault); ok && c.build.CompileCommand != "" {
		d.DefaultCompileCommand(c.build.CompileCommand)
	}
}
