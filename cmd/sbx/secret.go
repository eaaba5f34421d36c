package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) secretCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Brokered credentials: secrets the sandbox never holds",
		Long: `An entry's credentials ([sandbox.sandboxes.NAME.credentials.KEY]) are added by
the sandbox's egress enforcer to its HTTPS requests to their hosts: the sandbox
holds a placeholder and trusts a certificate authority made for it.

sbx secret rotate reads a running sandbox's credentials from their sources
again (from_env, from_file, from_command) and gives them to its enforcer;
requests from then on carry the new values.`,
	}
	cmd.AddCommand(a.secretRotateCmd())
	return cmd
}

func (a *app) secretRotateCmd() *cobra.Command {
	var entry string
	cmd := &cobra.Command{
		Use:     "rotate ID|NAME",
		Short:   "Read a sandbox's credentials again and hand them to its enforcer",
		Example: "  OPENAI_API_KEY=sk-new sbx secret rotate main\n  sbx secret rotate --entry main 3f9c2a",
		Args:    exactArgs(1, "a sandbox ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			cfg, b, err := a.open(ctx)
			if err != nil {
				return err
			}
			defer b.Close()
			sb, err := resolve(ctx, b, args[0])
			if err != nil {
				return err
			}
			info, err := sb.Info(ctx)
			if err != nil {
				return err
			}
			name := cmp.Or(entry, info.Name)
			spec, err := cfg.Spec(name)
			if err != nil {
				return fmt.Errorf("sandbox %s: its entry %q: %w (name the entry it was made from with --entry)", sb.ID(), name, err)
			}
			if len(spec.Credentials) == 0 {
				return fmt.Errorf("sandbox %s: entry %q declares no credentials ([sandbox.sandboxes.%s.credentials.KEY])", sb.ID(), name, name)
			}
			rot, ok := backend.AsBackend[backend.CredentialRotator](b)
			if !ok {
				return fmt.Errorf("sandbox %s: the %s backend cannot rotate credentials while a sandbox runs (native, remotedocker and k8s can): %w", sb.ID(), b.Name(), errors.ErrUnsupported)
			}
			if err := rot.RotateCredentials(ctx, sb.ID(), spec.Credentials); err != nil {
				return err
			}
			names := make([]string, len(spec.Credentials))
			for i, c := range spec.Credentials {
				names[i] = c.Name
			}
			if a.json {
				return printJSON(a.stdout, map[string]any{"sandbox": sb.ID(), "rotated": names})
			}
			fmt.Fprintf(a.stdout, "rotated %s of sandbox %s\n", strings.Join(names, ", "), sb.ID())
			return nil
		},
	}
	cmd.Flags().StringVar(&entry, "entry", "", "the config entry the sandbox was made from (default: its name)")
	return cmd
}
