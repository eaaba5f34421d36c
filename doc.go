// Package sandboxkit gives programs (AI agents above all) isolated places to
// run code, and lets them switch where those places live by changing one
// TOML key. This root package holds the registry of backends and the TOML
// config; the contract every backend implements is in package backend, and
// each backend is a package of its own under backends/.
//
// # Config
//
// [LoadConfig] finds the config file: the path given; else $SBX_CONFIG;
// else ./sandbox.toml if it exists; else a built-in default with one "main"
// sandbox on the local backend. [ParseConfig] parses file contents.
//
// The layout is OpenSage's, so an OpenSage config file loads unchanged:
//
//	DEFAULT_IMAGE = "ubuntu:24.04"   # template variables: top-level UPPERCASE keys
//	JOERN_PORT = 18087
//	task_name = "triage"             # not [sandbox]: the embedding program's, ignored
//
//	[sandbox]
//	backend = "local"                # which backend; default "local"
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
// error. config.example.toml in the repository documents every key.
//
// Each [sandbox.sandboxes.NAME] table is an [Entry], kept as written;
// [Config.Spec] turns one into the [backend.Spec] a backend creates.
//
// # Registry
//
// A [Registry] maps backend names to a [BackendFactory]: how to make the
// backend's settings struct (decoded strictly from [sandbox.NAME]) and how
// to open it. The default registry holds the built-in backends, wired by one
// explicit list in registry.go; the package-level functions use it:
//
//	cfg, err := sandboxkit.LoadConfig("")
//	if err != nil { ... }
//	for _, w := range cfg.Warnings { log.Print(w) }
//	b, err := sandboxkit.Open(ctx, cfg, logger)  // the backend cfg names
//	if err != nil { ... }
//	defer b.Close()
//	spec, err := cfg.Spec("main")
//	if err != nil { ... }
//	sb, err := b.Create(ctx, spec)
//
// Programs that wire their own backends (and tests) build a registry with
// [NewRegistry] and call its methods instead. Registering a name twice
// panics, as database/sql.Register does; an unknown name is an error listing
// the known ones. Backends that OpenSage or this project's roadmap know but
// this version does not build in (native, remotedocker, opensandbox, k8s,
// lite, and OpenSage's agentdocker-lite and nitrobox) load from a file with
// a warning and fail only when opened.
//
// All config errors wrap [backend.ErrInvalidConfig] and name the file and
// key; a Spec option this version cannot carry out wraps
// [errors.ErrUnsupported].
package sandboxkit
