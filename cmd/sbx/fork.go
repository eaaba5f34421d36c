package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) forkCmd() *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "fork [flags] ID|NAME",
		Short: "Make sandboxes that start with a sandbox's files and print their IDs",
		Long: `Fork makes N sandboxes (-n, default 1) from a sandbox's files as they are now,
with its configuration (image, command, environment, working directory,
volumes, limits, name and session), and prints their IDs, one per line. From
then on each is independent: nothing a fork or the parent writes shows in
another. Processes are not carried over: each fork starts its command afresh.
The parent keeps running (it may be frozen while its files are copied).

Forks are labelled sandboxkit.fork-of=ID; sbx rm removes them. Until the
backend hands them over, just before their IDs are printed, they are sbx
fork's: forks of an sbx fork killed before then are removed by sbx gc. k8s
and opensandbox cannot fork.`,
		Example: `  sbx fork main
  sbx fork -n 8 3f9c2a`,
		Args: exactArgs(1, "a sandbox ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return usageError(cmd, "-n must be at least 1, got %d", n)
			}
			return a.fork(cmd.Context(), args[0], backend.ForkRequest{N: n})
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 1, "how many forks to make")
	return cmd
}

// forkJSON is a fork in --json output.
type forkJSON struct {
	ID      string `json:"id"`
	ForkOf  string `json:"fork_of"`
	Backend string `json:"backend"`
}

func (a *app) fork(ctx context.Context, ref string, req backend.ForkRequest) error {
	var forks []backend.Sandbox
	b, sb, err := withCapability(ctx, a, ref, "fork sandboxes", func(f backend.Forker) (err error) {
		forks, err = f.Fork(ctx, req)
		return err
	})
	if err != nil {
		return err
	}
	if a.json {
		out := make([]forkJSON, len(forks))
		for i, fk := range forks {
			out[i] = forkJSON{ID: fk.ID(), ForkOf: sb.ID(), Backend: b.Name()}
		}
		return printJSON(a.stdout, out)
	}
	for _, fk := range forks {
		fmt.Fprintln(a.stdout, fk.ID())
	}
	return nil
}
