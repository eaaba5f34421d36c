package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/config"
	"github.com/sandboxkit/sandboxkit/initializers"
	"github.com/sandboxkit/sandboxkit/session"
)

func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the config",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check [FILE]",
		Short: "Load and validate a config file",
		Long: `Check loads FILE (default: the config sbx would use) as sbx would, checks
that its backend is known, that every sandbox entry converts to a sandbox
spec and that its initializer settings (type, extra, dependencies) are valid,
that the host files a launch reads exist (the shared data, each Dockerfile
and its build context), and prints its warnings, the project root that
project_relative_* keys resolve against, with where it came from, and each
entry whose type has no initializer (it runs as a plain sandbox from its
keys, as in OpenSage). Then it opens the backend and asks it about every
entry as create would (its capabilities, a runtime its engine lacks, ...),
and prints each entry's isolation; a backend it cannot open is reported
as a warning, with the entries left unchecked by it. It makes nothing.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(cmd, "want at most one FILE, got %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := a.configPath
			if len(args) == 1 {
				path = args[0]
			}
			return a.configCheck(cmd.Context(), path)
		},
	})
	return cmd
}

type configCheckResult struct {
	OK              bool     `json:"ok"`
	Path            string   `json:"path"`
	Backend         string   `json:"backend"`
	ProjectRoot     string   `json:"project_root"`
	ProjectRootFrom string   `json:"project_root_from"`
	Sandboxes       []string `json:"sandboxes"`
	// BashTools and SandboxScripts are the host folders that fill a
	// session's volumes ("" for none), with where each came from.
	BashTools          string   `json:"bash_tools,omitempty"`
	BashToolsFrom      string   `json:"bash_tools_from,omitempty"`
	SandboxScripts     string   `json:"sandbox_scripts,omitempty"`
	SandboxScriptsFrom string   `json:"sandbox_scripts_from,omitempty"`
	Warnings           []string `json:"warnings"`
	// Notes say which entries have no initializer of their type.
	Notes []string `json:"notes"`
	// Isolation is each entry's isolation, as the backend gives it (none
	// when the backend could not be opened: see Warnings).
	Isolation map[string]backend.Isolation `json:"isolation,omitempty"`
}

func (a *app) configCheck(ctx context.Context, path string) error {
	cfg, err := a.loadConfig(path)
	if err != nil {
		return err
	}
	names := cfg.SandboxNames()
	for _, name := range names {
		if _, err := cfg.CheckSpec(name); err != nil {
			return err
		}
	}
	// Each entry's initializer settings and dependencies, as sbx up checks
	// them.
	if err := session.CheckEntries(cfg, nil); err != nil {
		return err
	}
	if err := cfg.CheckHostPaths(); err != nil {
		return err
	}
	// OpenSage's [extra] is a free map: keys nothing selected reads are
	// named, not refused.
	extraWarnings := session.EntryWarnings(cfg, nil)
	isolation, err := checkWithBackend(ctx, cfg, names, a.logger)
	if err != nil {
		if !errors.Is(err, errNotOpened) {
			return err
		}
		extraWarnings = append(extraWarnings, err.Error())
	}
	bashTools, bashToolsFrom, scripts, scriptsFrom := cfg.ToolFolders()
	where := cfg.Path
	if where == "" {
		where = "built-in default config"
	}
	if a.json {
		return printJSON(a.stdout, configCheckResult{
			OK: true, Path: cfg.Path, Backend: cfg.Sandbox.Backend,
			ProjectRoot: cfg.ProjectRoot, ProjectRootFrom: cfg.ProjectRootFrom,
			BashTools: bashTools, BashToolsFrom: bashToolsFrom, SandboxScripts: scripts, SandboxScriptsFrom: scriptsFrom,
			Sandboxes: append([]string{}, names...), Warnings: slices.Concat([]string{}, cfg.Warnings, extraWarnings),
			Notes: plainSandboxes(cfg, names), Isolation: isolation,
		})
	}
	for _, w := range extraWarnings {
		fmt.Fprintf(a.stderr, "warning: %s\n", w)
	}
	if len(names) == 0 {
		// Valid (an agent that uses no sandbox), but say so.
		fmt.Fprintf(a.stdout, "ok: %s (backend %s, nothing to launch: no [sandbox.sandboxes.NAME] entries)\n", where, cfg.Sandbox.Backend)
	} else {
		fmt.Fprintf(a.stdout, "ok: %s (backend %s, %d %s: %s)\n", where, cfg.Sandbox.Backend,
			len(names), plural(len(names), "sandbox", "sandboxes"), strings.Join(names, ", "))
	}
	fmt.Fprintf(a.stdout, "project root: %s (from %s)\n", cfg.ProjectRoot, cfg.ProjectRootFrom)
	for _, f := range []struct{ what, dir, from string }{{"bash tools", bashTools, bashToolsFrom}, {"sandbox scripts", scripts, scriptsFrom}} {
		if f.dir != "" {
			fmt.Fprintf(a.stdout, "%s: %s (from %s)\n", f.what, f.dir, f.from)
		}
	}
	if len(isolation) > 0 {
		var each []string
		for _, name := range names {
			each = append(each, name+" "+string(isolation[name]))
		}
		fmt.Fprintf(a.stdout, "isolation: %s\n", strings.Join(each, ", "))
	}
	for _, n := range plainSandboxes(cfg, names) {
		fmt.Fprintln(a.stdout, n)
	}
	return nil
}

// errNotOpened: config check could not open the backend, so it did not ask
// it about the entries.
var errNotOpened = errors.New("the backend was not opened")

// checkWithBackend asks the config's backend about every entry as Create
// would (backend.CheckSpec), and returns each entry's isolation. A backend
// that cannot be opened (no daemon here) is an error wrapping errNotOpened,
// worth a warning only.
func checkWithBackend(ctx context.Context, cfg *config.Config, names []string, logger *slog.Logger) (map[string]backend.Isolation, error) {
	b, err := cfg.Open(ctx, logger)
	if err != nil {
		return nil, fmt.Errorf("%w: the entries were not checked against backend %s, which could not be opened here: %v", errNotOpened, cfg.Sandbox.Backend, err)
	}
	defer b.Close()
	caps := b.Capabilities()
	out := map[string]backend.Isolation{}
	for _, name := range names {
		// Made again now that the backend is known (backend = "auto", and
		// [secure_runtime]'s engine names, depend on it).
		spec, err := cfg.CheckSpec(name)
		if err != nil {
			return nil, err
		}
		if err := backend.CheckSpec(ctx, b, spec); err != nil {
			return nil, fmt.Errorf("sandbox %s: %w", name, err)
		}
		out[name] = caps.Isolation
		if spec.Runtime != "" {
			out[name] = backend.RuntimeIsolation(spec.Runtime)
		}
	}
	return out, nil
}

// plainSandboxes says which entries' types have no initializer, so get the
// generic one (Registry.Lookup's fallback): a plain sandbox from the
// entry's keys, with nothing provisioned, probed or published, as OpenSage
// treats names such as pdb_mcp. (An explicit type naming no initializer is
// an error, reported by session.CheckEntries before this runs.)
func plainSandboxes(cfg *config.Config, names []string) []string {
	notes := []string{}
	for _, name := range names {
		e, err := cfg.Entry(name)
		if err != nil {
			continue
		}
		typ := cmp.Or(e.Type, name)
		if _, fallback, err := initializers.Default().Lookup(typ); err == nil && fallback {
			notes = append(notes, fmt.Sprintf("sandbox %s: type %s has no initializer; it runs as a plain sandbox from its keys", name, typ))
		}
	}
	return notes
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
