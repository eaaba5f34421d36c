package cli

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) lsCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"ps", "list"},
		Short:   "List the backend's sandboxes",
		Long: `Ls lists the backend's sandboxes. Ready members of warm pools (see sbx pool),
and those their keepers are making, are left out and counted on the last
line; --all lists them too.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.ls(cmd.Context(), all)
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "also list the ready sandboxes of warm pools")
	return cmd
}

// sandboxJSON is how sbx ls --json shows a sandbox.
type sandboxJSON struct {
	ID        string            `json:"id"`
	Backend   string            `json:"backend"`
	Name      string            `json:"name"`
	Session   string            `json:"session,omitempty"`
	Image     string            `json:"image,omitempty"`
	State     backend.State     `json:"state"`
	Owner     string            `json:"owner,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	Expired   bool              `json:"expired"`
	WorkDir   string            `json:"workdir,omitempty"`
	// Isolation is what separates the sandbox from the host: none,
	// container, gvisor or vm.
	Isolation backend.Isolation `json:"isolation"`
}

// isolationOf returns what a sandbox's Info says its isolation is, else
// the backend's (asked once: an engine's capabilities may cost a call).
func isolationOf(b backend.Backend) func(backend.Info) backend.Isolation {
	var def backend.Isolation
	return func(i backend.Info) backend.Isolation {
		if i.Isolation != "" {
			return i.Isolation
		}
		if def == "" {
			def = b.Capabilities().Isolation
		}
		return def
	}
}

func (a *app) ls(ctx context.Context, all bool) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := b.List(ctx, backend.Filter{})
	if err != nil {
		return err
	}
	hidden := 0
	if !all {
		infos = slices.DeleteFunc(infos, func(i backend.Info) bool {
			st := i.Labels[backend.LabelPoolState]
			ready := st == backend.PoolReady || st == backend.PoolMaking
			if ready {
				hidden++
			}
			return ready
		})
	}
	now := time.Now()
	isolation := isolationOf(b)
	if a.json {
		out := make([]sandboxJSON, 0, len(infos))
		for _, info := range infos {
			s := sandboxJSON{
				ID: info.ID, Backend: info.Backend, Name: info.Name, Session: info.Session,
				Image: info.Image, State: info.State, Owner: info.Owner, Labels: info.Labels,
				CreatedAt: info.CreatedAt, Expired: info.Expired(now), WorkDir: info.WorkDir,
				Isolation: isolation(info),
			}
			if !info.ExpiresAt.IsZero() {
				s.ExpiresAt = &info.ExpiresAt
			}
			out = append(out, s)
		}
		return printJSON(a.stdout, out)
	}
	t := newTable(a.stdout, "ID", "NAME", "SESSION", "STATE", "ISOLATION", "AGE", "EXPIRES")
	for _, info := range infos {
		age := "-"
		if !info.CreatedAt.IsZero() {
			age = shortDuration(now.Sub(info.CreatedAt))
		}
		state := string(info.State)
		if p := info.Labels[backend.LabelPoolState]; p != "" {
			state += " (pool " + p + ")"
		}
		t.row(info.ID, orDash(info.Name), orDash(info.Session), state, string(isolation(info)), age, expires(info, now))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if hidden > 0 {
		fmt.Fprintf(a.stderr, "%d ready pool sandboxes not shown (sbx ls --all)\n", hidden)
	}
	return nil
}

func expires(info backend.Info, now time.Time) string {
	switch {
	case info.ExpiresAt.IsZero():
		return "never"
	case info.Expired(now):
		return "expired"
	}
	return "in " + shortDuration(info.ExpiresAt.Sub(now))
}
