package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
)

func (a *app) egressCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "egress",
		Short: "Show or change what a sandbox may reach on the network",
		Long: `A sandbox made from an entry with an egress policy reaches only what the policy
allows (egress = { default = "deny", allow = [...], deny = [...] } in the
entry). Its enforcer runs outside the sandbox: a DNS resolver that answers only
allowed names and a TCP proxy that lets a connection through by its TLS name
(SNI) or HTTP Host only towards an address the resolver gave for that name, or
by an address rule. Everything else is dropped and recorded.

Rules: "example.com", "*.example.com" (names under it), "10.1.2.3",
"10.0.0.0/8", each optionally with ":PORT" or ":LOW-HIGH"; deny rules win over
allow rules, and the default decides the rest.

sbx egress show lists a sandbox's policy and its latest denied attempts;
sbx egress set replaces its policy while it runs (it applies at once, and
open connections it no longer allows are closed).`,
	}
	cmd.AddCommand(a.egressShowCmd(), a.egressSetCmd())
	return cmd
}

func (a *app) egressShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "show ID|NAME",
		Short:   "Show a sandbox's egress policy and its latest denied attempts",
		Example: "  sbx egress show main\n  sbx --json egress show 3f9c2a",
		Args:    exactArgs(1, "a sandbox ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st backend.EgressStatus
			err := a.withEgress(cmd.Context(), args[0], func(ec backend.EgressController, id string) (err error) {
				st, err = ec.EgressStatus(cmd.Context(), id)
				return err
			})
			if err != nil {
				return err
			}
			if a.json {
				if st.Denials == nil {
					st.Denials = []backend.EgressDenial{}
				}
				return printJSON(a.stdout, st)
			}
			printEgress(a, st)
			return nil
		},
	}
}

func printEgress(a *app, st backend.EgressStatus) {
	def := st.Policy.Default
	if def == "" {
		def = "deny"
	}
	fmt.Fprintf(a.stdout, "default: %s\nallow:   %s\ndeny:    %s\n", def, listOrNone(st.Policy.Allow), listOrNone(st.Policy.Deny))
	if !slices.ContainsFunc(st.Denials, func(d backend.EgressDenial) bool { return d.Kind == "" }) {
		fmt.Fprintln(a.stdout, "\nno denied attempts")
	}
	if len(st.Denials) == 0 {
		return
	}
	fmt.Fprintln(a.stdout)
	t := newTable(a.stdout, "TIME", "PROTO", "DEST", "PORT", "NAME", "REASON")
	for _, d := range st.Denials {
		port := "-"
		if d.Port != 0 {
			port = fmt.Sprint(d.Port)
		}
		reason := d.Reason
		if d.Kind == backend.EgressKindCredential {
			// Let through: what it was, and the server's answer.
			reason = fmt.Sprintf("%s %s -> %d: %s", d.Method, d.Path, d.Status, d.Reason)
		}
		t.row(d.Time.Local().Format(time.TimeOnly), d.Proto, d.Dest, port, orDash(d.Name), reason)
	}
	t.flush()
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, ", ")
}

func (a *app) egressSetCmd() *cobra.Command {
	var p backend.Egress
	cmd := &cobra.Command{
		Use:   "set ID|NAME [--default deny|allow] [--allow RULE]... [--deny RULE]...",
		Short: "Replace a running sandbox's egress policy",
		Long: `Set replaces the sandbox's whole policy with the one the flags give (a rule left
out is dropped); it applies at once. Only a sandbox made with a policy has an
enforcer, so one made without cannot get a policy later.`,
		Example: `  sbx egress set main --allow pypi.org:443 --allow '*.pythonhosted.org:443'
  sbx egress set main --default allow --deny 169.254.0.0/16`,
		Args: exactArgs(1, "a sandbox ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if p.Default != "" && p.Default != "deny" && p.Default != "allow" {
				return usageError(cmd, `--default must be "deny" or "allow", got %q`, p.Default)
			}
			return a.withEgress(cmd.Context(), args[0], func(ec backend.EgressController, id string) error {
				return ec.SetEgress(cmd.Context(), id, p)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Default, "default", "deny", `what no rule matches: "deny" or "allow"`)
	f.StringArrayVar(&p.Allow, "allow", nil, "an allow rule (repeatable)")
	f.StringArrayVar(&p.Deny, "deny", nil, "a deny rule (repeatable)")
	return cmd
}

// withEgress opens the config's backend, finds sandbox ref and runs do
// with the backend's egress controls.
func (a *app) withEgress(ctx context.Context, ref string, do func(backend.EgressController, string) error) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	sb, err := resolve(ctx, b, ref)
	if err != nil {
		return err
	}
	ec, ok := backend.AsBackend[backend.EgressController](b)
	if !ok {
		return fmt.Errorf("sandbox %s: the %s backend does not enforce egress policies (lite does): %w", sb.ID(), b.Name(), errors.ErrUnsupported)
	}
	return do(ec, sb.ID())
}
