package cli

import (
	"cmp"
	"context"
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

sbx secret ls lists a sandbox's credentials (names, hosts, where each goes,
the variable holding its placeholder; never values). sbx secret rotate reads
a running sandbox's credentials from their sources
again (from_env, from_file, from_command) and gives them to its enforcer;
requests from then on carry the new values.`,
	}
	cmd.AddCommand(a.secretLsCmd(), a.secretRotateCmd())
	return cmd
}

// credentialsOf returns the credentials of the entry sandbox ref was made
// from (entry, else its name), with the open backend and the sandbox's ID.
func (a *app) credentialsOf(ctx context.Context, ref, entry string) (backend.Backend, string, string, []backend.Credential, error) {
	cfg, b, err := a.open(ctx)
	if err != nil {
		return nil, "", "", nil, err
	}
	sb, err := resolve(ctx, b, ref)
	if err != nil {
		b.Close()
		return nil, "", "", nil, err
	}
	info, err := sb.Info(ctx)
	if err != nil {
		b.Close()
		return nil, "", "", nil, err
	}
	name := cmp.Or(entry, info.Name)
	spec, err := cfg.Spec(name)
	if err != nil {
		b.Close()
		return nil, "", "", nil, fmt.Errorf("sandbox %s: its entry %q: %w (name the entry it was made from with --entry)", sb.ID(), name, err)
	}
	return b, sb.ID(), name, spec.Credentials, nil
}

func (a *app) secretLsCmd() *cobra.Command {
	var entry string
	cmd := &cobra.Command{
		Use:     "ls ID|NAME",
		Short:   "List a sandbox's brokered credentials: names, hosts, where they go (never values)",
		Example: "  sbx secret ls main\n  sbx --json secret ls --entry main 3f9c2a",
		Args:    exactArgs(1, "a sandbox ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, id, _, creds, err := a.credentialsOf(cmd.Context(), args[0], entry)
			if err != nil {
				return err
			}
			defer b.Close()
			type row struct {
				Name  string   `json:"name"`
				Hosts []string `json:"hosts"`
				Where string   `json:"where"`
				Env   string   `json:"env,omitempty"`
			}
			rows := []row{}
			for _, c := range creds {
				where := "header " + c.Header
				switch {
				case c.Query != "":
					where = "query " + c.Query
				case c.BasicUser != "":
					where = "basic auth as " + c.BasicUser
				}
				rows = append(rows, row{Name: c.Name, Hosts: c.Hosts, Where: where, Env: c.Env})
			}
			if a.json {
				return printJSON(a.stdout, map[string]any{"sandbox": id, "credentials": rows})
			}
			if len(rows) == 0 {
				fmt.Fprintf(a.stdout, "sandbox %s has no brokered credentials\n", id)
				return nil
			}
			t := newTable(a.stdout, "NAME", "HOSTS", "WHERE", "PLACEHOLDER IN")
			for _, r := range rows {
				t.row(r.Name, strings.Join(r.Hosts, ","), r.Where, cmp.Or(r.Env, "-"))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&entry, "entry", "", "the config entry the sandbox was made from (default: its name)")
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
			b, id, name, creds, err := a.credentialsOf(ctx, args[0], entry)
			if err != nil {
				return err
			}
			defer b.Close()
			if len(creds) == 0 {
				return fmt.Errorf("sandbox %s: entry %q declares no credentials ([sandbox.sandboxes.%s.credentials.KEY])", id, name, name)
			}
			rot, ok := backend.AsBackend[backend.CredentialRotator](b)
			if !ok {
				return fmt.Errorf("sandbox %s: the %s backend cannot rotate credentials while a sandbox runs (lite, native, remotedocker, k8s and opensandbox can): %w", id, b.Name(), errors.ErrUnsupported)
			}
			if err := rot.RotateCredentials(ctx, id, creds); err != nil {
				return err
			}
			names := make([]string, len(creds))
			for i, c := range creds {
				names[i] = c.Name
			}
			if a.json {
				return printJSON(a.stdout, map[string]any{"sandbox": id, "rotated": names})
			}
			fmt.Fprintf(a.stdout, "rotated %s of sandbox %s\n", strings.Join(names, ", "), id)
			return nil
		},
	}
	cmd.Flags().StringVar(&entry, "entry", "", "the config entry the sandbox was made from (default: its name)")
	return cmd
}
