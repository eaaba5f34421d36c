package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) downCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "down SESSION-ID",
		Short: "End a session: remove its sandboxes, volumes and network",
		Long: `Down removes everything labelled with the session ID: its sandboxes first,
then the shared volumes and the session network. Sandboxes that are gone
already (removed by hand, reaped) are not an error.`,
		Args: exactArgs(1, "a session ID (see sbx status)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.down(cmd.Context(), args[0])
		},
	}
}

func (a *app) down(ctx context.Context, id string) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := b.List(ctx, backend.Filter{Session: id})
	if err != nil {
		return err
	}
	if err := sandboxkit.DestroySession(ctx, b, id); err != nil {
		return err
	}
	if a.json {
		return printJSON(a.stdout, map[string]any{"session": id, "removed_sandboxes": len(infos)})
	}
	fmt.Fprintf(a.stdout, "session %s: removed %d sandbox(es) and the session's volumes and network\n", id, len(infos))
	return nil
}
