package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/session"
)

func (a *app) downCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "down SESSION-ID",
		Short: "End a session: remove its sandboxes, volumes and network",
		Long: `Down removes everything labelled with the session ID: its sandboxes first,
then the shared volumes and the session network. Sandboxes that are gone
already (removed by hand, reaped) are not an error; a session of which
nothing is left (an unknown ID, or one already taken down) is.`,
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
	vols, nets, err := sessionResources(ctx, b, id)
	if err != nil {
		return err
	}
	if len(infos)+vols+nets == 0 {
		return fmt.Errorf("session %s not found: nothing on the %s backend carries its ID (removed already? sbx status lists the sessions): %w",
			id, b.Name(), backend.ErrNotFound)
	}
	if err := session.Destroy(ctx, b, id); err != nil {
		return err
	}
	if a.json {
		return printJSON(a.stdout, map[string]any{"session": id, "removed_sandboxes": len(infos), "removed_volumes": vols, "removed_networks": nets})
	}
	fmt.Fprintf(a.stdout, "session %s: removed %d sandbox(es), %d volume(s) and %d network(s)\n", id, len(infos), vols, nets)
	return nil
}

// sessionResources counts the volumes and networks labelled with session
// id, on a backend that has them.
func sessionResources(ctx context.Context, b backend.Backend, id string) (vols, nets int, err error) {
	if vm, ok := backend.AsBackend[backend.VolumeManager](b); ok {
		vs, err := vm.ListVolumes(ctx, backend.Filter{Session: id})
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return 0, 0, err
		}
		vols = len(vs)
	}
	if nm, ok := backend.AsBackend[backend.NetworkManager](b); ok {
		ns, err := nm.ListNetworks(ctx, backend.Filter{Session: id})
		if err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return 0, 0, err
		}
		nets = len(ns)
	}
	return vols, nets, nil
}
