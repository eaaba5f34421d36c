// Package config loads sandboxkit's TOML config: the [sandbox] table of a
// file whose layout is OpenSage's, with ${VAR} templating, strict decoding
// (a misspelt key is an error naming it), and the parsing of volume, port,
// size and command values. [Config.Spec] turns an entry into the
// [backend.Spec] a backend creates; the checks behind `sbx config check`
// live here too.
//
// This package imports no backend. What it knows of backends comes from the
// [Registry] a program hands it: each backend package exports a
// [backend.Factory] (local.Factory, native.Factory, ...) that owns the
// backend's [sandbox.NAME] table, the [extra] keys it reads and how it opens.
// sandboxkit's root package keeps the registry of every built-in backend
// (sandboxkit.LoadConfig uses it); a program that wants to link fewer
// backends builds its own:
//
//	reg := config.NewRegistry()
//	reg.Register(local.Factory)
//	cfg, err := reg.LoadConfig("")      // path, else $SBX_CONFIG, else ./sandbox.toml, else the default
//	if err != nil { ... }
//	for _, w := range cfg.Warnings { log.Print(w) }
//	b, err := cfg.Open(ctx, logger)     // the backend cfg names, through reg
//	if err != nil { ... }
//	defer b.Close()
//	spec, err := cfg.Spec("main")
//	if err != nil { ... }
//	sb, err := b.Create(ctx, spec)
//
// Registering a name twice panics, as database/sql.Register does; an unknown
// name is an error listing the known ones. Backends a registry knows only by
// name ([Registry.Plan]; OpenSage's nitrobox) load from a file with a
// warning and fail only when opened.
//
// [Registry.LoadConfig] finds the config file: the path given; else $SBX_CONFIG;
// else ./sandbox.toml if it exists; else a built-in default with one "main"
// sandbox on the local backend. [Registry.ParseConfig] parses file contents.
//
// The layout is OpenSage's, so an OpenSage config file loads unchanged:
//
//	DEFAULT_IMAGE = "ubuntu:24.04"   # template variables: top-level UPPERCASE keys
//	JOERN_PORT = 18087
//	task_name = "triage"             # not [sandbox]: the embedding program's, ignored
//
//	[sandbox]
//	backend = "native"               # which backend; default "native" (OpenSage's)
//	default_image = "${DEFAULT_IMAGE}"
//
//	[sandbox.local]                  # the backend's own settings, checked strictly
//	state_dir = "~/.cache/sbx"
//
//	[sandbox.sandboxes.joern]        # one entry per sandbox of a session
//	mem_limit = "8g"
//	command = ""                     # the image's own command
//	volumes = ["./src:/src:ro", "cache:/root/.cache"]
//	[sandbox.sandboxes.joern.ports]
//	"8081/tcp" = "${JOERN_PORT}"     # coerced to a number: the key wants one
//
// Only [sandbox] is sandboxkit's. Inside it every key is checked, and a
// misspelt one is an error naming its full path, with a suggestion:
//
//	config sandbox.toml: unknown key "sandbox.sandboxes.main.imgae" (did you mean "image"?)
//
// ${VAR} in any string inside [sandbox] is replaced by the environment
// variable VAR, else the file's top-level key VAR; a variable defined in
// neither is an error. Values are then converted to what each key wants, so
// "${PORT}" is a number for a port and text in an environment value.
//
// Volume specs "host:sandbox[:ro|rw]" expand "~" and resolve relative host
// paths against the config file's folder. A host path that does not exist is
// skipped with a message in [Config.Warnings] (show them to the user), so one
// file serves machines that lack an optional folder; a malformed spec is an
// error. The project_relative_* keys (shared data, Dockerfiles) resolve
// against [Config.ProjectRoot] instead, as OpenSage resolves them against
// its project's root; [Config.CheckHostPaths] checks that what they name
// exists. config.example.toml in the repository documents every key.
//
// Each [sandbox.sandboxes.NAME] table is an [Entry], kept as written;
// [Config.Spec] turns one into the [backend.Spec] a backend creates.
//
// All config errors wrap [backend.ErrInvalidConfig] and name the file and
// key; a Spec option this version cannot carry out wraps
// [errors.ErrUnsupported].
package config
