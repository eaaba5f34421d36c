// Package initializers holds the typed kinds of sandbox a session launches:
// main (the agent's workspace), neo4j (a graph database), joern (a code
// property graph server), gdb_mcp (gdb behind an MCP server), codeql (a
// CodeQL call graph, staged for Neo4j), fuzz (an AFL++ build of an OSS-Fuzz
// project), coverage (a coverage build), and generic (a plain sandbox from
// its entry's keys, for every other entry name). codeql, fuzz and coverage
// run OpenSage's scripts from the session's sandbox_scripts folder, as
// OpenSage's initializers of the same names do; their doc comments say
// where they differ.
//
// A [sandbox.sandboxes.NAME] entry picks its initializer by type (default
// NAME). The initializer owns:
//
//   - a typed config, decoded from the entry's [extra] table (its keys
//     type-checked; OpenSage's [extra] is a free map, so other keys are
//     left to the backends and tools that read them, and the session
//     warns about those nothing reads, with a did-you-mean);
//   - a default backend.Spec (image, command, ports, environment), under
//     the entry's own keys, which win;
//   - DependsOn: which other sandboxes of the session must be ready before
//     it is provisioned;
//   - Provision: what runs in the sandbox once it and its dependencies are
//     up (pip install, a CPG import, starting an injected server);
//   - Ready: a readiness probe from package wait, with a deadline;
//   - Publish: the environment it exports to the session (NEO4J_URI, ...),
//     with addresses as seen from inside the session;
//   - optionally Handle: a typed value for the host program (see Neo4j).
//
// The session (package session: Launch) drives these steps; an
// initializer never creates or destroys sandboxes itself. Adding one is a
// Factory in a Registry: see the example.
package initializers

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/initializers/wait"
)

// Factory makes an Initializer from its decoded config.
type Factory struct {
	// NewConfig returns a pointer to the zero typed config; the entry's
	// [extra] table is decoded into it (its keys type-checked, other keys
	// left alone; see config.Config.ExtraWarnings). Defaults are best set
	// here. nil: the initializer takes no keys besides Common's.
	NewConfig func() any
	// New checks the decoded config (the pointer NewConfig returned) and
	// returns the initializer for one entry. Errors should name the key.
	New func(cfg any) (Initializer, error)
}

// Initializer is one kind of sandbox, configured for one entry.
type Initializer interface {
	// Spec is the default Spec; the session lays the entry's keys over it
	// and adds the session's volumes, network and labels.
	Spec() backend.Spec
	// DependsOn lists the sandboxes that must be ready before Provision.
	DependsOn() []Dependency
	// Provision runs once the sandbox is created and its dependencies are
	// ready. It should be idempotent: a sandbox started from a checkpoint
	// image runs it again.
	Provision(ctx context.Context, in *Instance) error
	// Ready is the readiness probe run after Provision; nil: ready once
	// provisioned.
	Ready() wait.Strategy
	// Publish is what the sandbox exports to the session: environment
	// variables every member gets (also written to /shared/bashrc). host
	// is how the other members reach this sandbox (its name on the
	// session network, or an address when there is none).
	Publish(host string) map[string]string
}

// ScriptsUser is implemented by initializers that run scripts from the
// session's sandbox_scripts folder (OpenSage's, paths relative to it): the
// session warns before launching when the folder will not have them.
type ScriptsUser interface {
	SandboxScripts() []string
}

// Planner is implemented by initializers that adapt to the Spec their
// sandbox is made from: the session calls Plan with it (Spec with the
// entry's keys laid over it) once, before Publish and Provision. gdb_mcp
// uses an image's own MCP server when the entry runs the image's command.
type Planner interface {
	Plan(spec backend.Spec)
}

// Handler is implemented by initializers that give the host program a
// typed handle (Neo4j.BoltURI, GDBMCP.URL, ...), built once the sandbox
// is ready.
type Handler interface {
	Handle(ctx context.Context, in *Instance) (any, error)
}

// Dependency names another sandbox of the session, by initializer type or
// entry name.
type Dependency struct {
	Name string
	// Optional: a session without such a sandbox is fine; one with it
	// waits for it.
	Optional bool
}

// Instance is one created sandbox of a session, as Provision and Handle
// see it.
type Instance struct {
	Name    string // entry name
	Type    string // initializer type
	Session string
	Sandbox backend.Sandbox
	// Paths are where the session's shared folders are inside the
	// sandbox ("" when the backend could not mount them).
	Shared, BashTools, SandboxScripts string
	// Env is the session's published environment (every member's
	// Publish), also in Shared/bashrc.
	Env map[string]string
	// Logger logs for this sandbox; never nil.
	Logger *slog.Logger
	// Status reports a provisioning sub-step ("pip install", ...) to the
	// session's progress; never nil.
	Status func(string)
}

// Endpoint returns the host address ("host:port") of a published TCP port
// of the sandbox.
func (in *Instance) Endpoint(ctx context.Context, port int) (string, error) {
	ep, ok := backend.As[backend.Endpointer](in.Sandbox)
	if !ok {
		return "", &backend.OpError{Op: "endpoint", Sandbox: in.Sandbox.ID(), Err: errUnsupportedEndpoint}
	}
	return ep.Endpoint(ctx, port)
}

// Common are the [extra] keys every initializer takes. Embed it (without a
// toml tag) in an initializer's config. (Keys that backends read from
// entries, such as k8s's namespace, are declared by the backends' factories
// and left to them when an initializer's config is decoded.)
type Common struct {
	// InitializerTimeout bounds provisioning plus readiness (OpenSage's
	// initializer_timeout_sec); 0: the initializer's default.
	InitializerTimeout Seconds `toml:"initializer_timeout_sec"`
}

// CommonConfig is implemented by configs that embed Common.
type CommonConfig interface{ common() *Common }

func (c *Common) common() *Common { return c }

// TimeoutOf returns cfg's initializer_timeout_sec (0 when it has none).
func TimeoutOf(cfg any) time.Duration {
	if c, ok := cfg.(CommonConfig); ok {
		return time.Duration(c.common().InitializerTimeout)
	}
	return 0
}

// Seconds is a duration written in TOML as a number of seconds.
type Seconds time.Duration

// UnmarshalTOML implements toml.Unmarshaler.
func (s *Seconds) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		if v < 0 {
			return errNegative
		}
		*s = Seconds(time.Duration(v) * time.Second)
		return nil
	case float64:
		if v < 0 {
			return errNegative
		}
		*s = Seconds(time.Duration(v * float64(time.Second)))
		return nil
	case string:
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return s.UnmarshalTOML(f)
		}
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errSeconds
		}
		*s = Seconds(d)
		return nil
	}
	return errSeconds
}
