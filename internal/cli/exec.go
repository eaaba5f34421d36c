package cli

import (
	"time"

	"github.com/sandboxkit/sandboxkit/backend"

	"github.com/spf13/cobra"
)

func (a *app) execCmd() *cobra.Command {
	var (
		timeout time.Duration
		stdin   bool
		tty     ttyOptions
		useTTY  bool
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] ID|NAME -- CMD [ARG...]",
		Short: "Run a command in an existing sandbox",
		Long: `Exec runs CMD in a sandbox made earlier (by sbx up or sbx run --keep) and
exits with CMD's exit code. NAME selects the one live sandbox made from that
config entry.`,
		Example: `  sbx exec main -- ls -la
  sbx exec --timeout 1m 3f9c2a -- make test
  sbx exec -it main -- python3`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(cmd, "missing sandbox ID or name and command")
			}
			if len(splitCommand(args[1:])) == 0 {
				return usageError(cmd, "missing command after %s", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTimeout(cmd, timeout); err != nil {
				return err
			}
			ctx := cmd.Context()
			argv := splitCommand(args[1:])
			_, b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			sb, err := resolve(ctx, b, args[0])
			if err != nil {
				return err
			}
			if useTTY {
				if timeout > 0 {
					return usageError(cmd, "--timeout does not combine with -t")
				}
				tty.ref = args[0]
				return a.interactive(ctx, sb, backend.TerminalRequest{Cmd: argv}, "", tty)
			}
			return a.execute(ctx, sb, argv, timeout, stdin)
		},
	}
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "kill the command after this long and exit 124 (default: no timeout)")
	cmd.Flags().BoolVarP(&stdin, "interactive", "i", false, "connect stdin to the command")
	ttyFlags(cmd, &useTTY, &tty)
	return cmd
}
