package main

import (
	"context"
	"errors"
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
	// The IDs are written before the backend is closed: a sbx killed
	// between the forks' hand-over and the write leaves forks no one
	// knows of, so that span is kept short.
	return withCapability(ctx, a, ref, "fork sandboxes", func(b backend.Backend, sb backend.Sandbox, f backend.Forker) error {
		// The backend's own Forker rather than the agent client's: a
		// client starts each fork's agent once the backend has handed the
		// forks over (the same span). Writing their IDs needs no client.
		forks, err := innermostForker(f).Fork(ctx, req)
		if err != nil {
			return err
		}
		var out []byte
		if a.json {
			list := make([]forkJSON, len(forks))
			for i, fk := range forks {
				list[i] = forkJSON{ID: fk.ID(), ForkOf: sb.ID(), Backend: b.Name()}
			}
			out = jsonBytes(list)
		} else {
			for _, fk := range forks {
				out = fmt.Appendln(out, fk.ID())
			}
		}
		return handOver(ctx, a.stdout, out, "forks", func(ctx context.Context) error {
			var errs []error
			for _, fk := range forks {
				errs = append(errs, fk.Destroy(ctx))
			}
			return errors.Join(errs...)
		})
	})
}

// innermostForker is the Forker deepest in the chain of sandboxes f
// wraps (f itself when it wraps none that forks).
func innermostForker(f backend.Forker) backend.Forker {
	var cur any = f
	for {
		w, ok := cur.(backend.Wrapper)
		if !ok {
			return f
		}
		inner := w.Unwrap()
		if inner == nil {
			return f
		}
		if g, ok := inner.(backend.Forker); ok {
			f = g
		}
		cur = inner
	}
}
