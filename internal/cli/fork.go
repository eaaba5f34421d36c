package cli

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
	// The IDs are written before the backend hands the forks over (see
	// backend.ForkRequest.Made): a sbx killed before the write leaves
	// forks still being made by it, which sbx gc removes, never complete
	// forks no one was told of.
	return withCapability(ctx, a, ref, "fork sandboxes", func(b backend.Backend, sb backend.Sandbox, f backend.Forker) error {
		req.Made = func(ids []string) error {
			var out []byte
			if a.json {
				list := make([]forkJSON, len(ids))
				for i, id := range ids {
					list[i] = forkJSON{ID: id, ForkOf: sb.ID(), Backend: b.Name()}
				}
				out = jsonBytes(list)
			} else {
				for _, id := range ids {
					out = fmt.Appendln(out, id)
				}
			}
			if _, err := a.stdout.Write(out); err != nil {
				return fmt.Errorf("writing the forks made: %w; they were removed, since no one could learn of them", err)
			}
			return nil
		}
		// The backend's own Forker rather than the agent client's: a
		// client starts each fork's agent after the hand-over, which
		// sbx fork does not need.
		_, err := innermostForker(f).Fork(ctx, req)
		return err
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
