// Package sandboxkit gives programs (AI agents above all) isolated places to
// run code, and lets them switch where those places live (this machine's
// Docker, a GPU server's Docker over SSH, an OpenSandbox deployment, a
// Kubernetes cluster, daemonless runc, plain host processes) by changing one
// TOML key.
//
// This root package is the catalog: registry.go wires every built-in
// backend's factory into the default registry, in one sorted list, and the
// package-level functions use it. It is the convenient API for programs
// that want every backend:
//
//	cfg, err := sandboxkit.LoadConfig("")    // path, else $SBX_CONFIG, else ./sandbox.toml, else the default
//	if err != nil { ... }
//	for _, w := range cfg.Warnings { log.Print(w) }
//	s, err := sandboxkit.Launch(ctx, cfg)   // every [sandbox.sandboxes.NAME] entry, as one session
//	if err != nil { ... }
//	defer s.Destroy(context.WithoutCancel(ctx))
//	sb, err := s.Sandbox("main")
//
// The work lives in packages of their own, which a program can use without
// this one (and so link only the backends it names):
//
//   - [github.com/sandboxkit/sandboxkit/backend]: the contract every backend
//     implements, its optional capabilities and errors, and backend.Factory.
//   - [github.com/sandboxkit/sandboxkit/backends/local] (and lite, native,
//     remotedocker, k8s, opensandbox): one package per backend, each
//     exporting its Factory.
//   - [github.com/sandboxkit/sandboxkit/config]: loading, templating and
//     strict decoding of the TOML file, through a config.Registry of
//     factories.
//   - [github.com/sandboxkit/sandboxkit/session]: sessions (the sandboxes of
//     one task, launched together, provisioned by initializers), resume,
//     checkpoint and destroy.
//
// The types and functions that lived here before those packages existed
// (Config, Launcher, Session, ...) remain as aliases; the migration section
// of docs/layout.md lists them.
package sandboxkit
