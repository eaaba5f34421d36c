package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
)

func (a *app) rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID|NAME...",
		Short: "Remove sandboxes",
		Long: `Rm removes each sandbox named by ID (or by entry name, when one live
sandbox has it) and prints its ID. A sandbox that cannot be found or removed is
reported and the others are still removed; sbx then exits 1.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(cmd, "missing sandbox ID")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.rm(cmd.Context(), args)
		},
	}
}

func (a *app) rm(ctx context.Context, refs []string) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	failed := false
	for _, ref := range refs {
		sb, err := resolve(ctx, b, ref)
		if err == nil {
			if err = sb.Destroy(ctx); err == nil {
				fmt.Fprintln(a.stdout, sb.ID())
				continue
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.printError(err)
		failed = true
	}
	if failed {
		return &exitCode{exitError}
	}
	return nil
}
