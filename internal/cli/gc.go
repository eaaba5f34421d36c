package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/session"
)

func (a *app) gcCmd() *cobra.Command {
	var dryRun bool
	grace := volumeGrace
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Remove expired sandboxes and volumes, and those whose owner is gone",
		Long: `Gc removes every sandbox of the backend whose TTL has run out, and every
sandbox owned by a process that no longer runs (an sbx run that was killed
before it could clean up), every sandbox whose maker died before handing
it over (an sbx fork killed before it printed its forks), and every
sandbox of a session whose launch was
cut short (an sbx up killed before the session was ready). Sandboxes owned by processes on other hosts are
left to their TTL. A pool member counts as owned by its keeper until it is
claimed, and by its claimer after (on Docker, by its claim record: a member
whose record was lost stays its keeper's).

On backends with shared volumes it then removes the volumes whose TTL has run
out, and those of a session that has no sandboxes left (once the volume is
older than 10 minutes, so a session being launched keeps its volumes).
Volumes still mounted by a sandbox are kept. Then it removes the snapshots
whose TTL has run out (sbx snapshot --ttl), and those whose maker died
before handing them over (an sbx snapshot killed before it printed the
reference). Last it removes caches and
records nothing uses any more (native: the agent's volumes of other sbx
builds, the claim records of pool members that are gone, and the temporary
tags of snapshots whose maker died after giving them their reference; lite:
the folders of snapshots whose maker died while filling them).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if grace < 0 {
				return usageError(cmd, "--grace %s: want a duration of 0 or more", grace)
			}
			return a.gc(cmd.Context(), dryRun, grace)
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	cmd.Flags().DurationVar(&grace, "grace", volumeGrace, "how old the volumes and networks of a session without sandboxes must be before they go (a session makes them before its sandboxes); images loaded for a restore are kept a minute, or this grace when shorter")
	return cmd
}

type gcResult struct {
	Kind    string `json:"kind"` // "sandbox", "volume", "network", "snapshot" (ID is its reference) or "cache" (ID is its name)
	ID      string `json:"id"`
	Name    string `json:"name"`
	Reason  string `json:"reason"`
	Removed bool   `json:"removed"`
	Error   string `json:"error,omitempty"`
}

func (a *app) gc(ctx context.Context, dryRun bool, grace time.Duration) error {
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	infos, err := b.List(ctx, backend.Filter{})
	if err != nil {
		return err
	}
	abandoned, err := abandonedLaunches(ctx, b, infos)
	if err != nil {
		return err
	}
	now := time.Now()
	results := []gcResult{}
	failed := false
	for _, info := range infos {
		reason := reapReason(info, now)
		if ready := info.Labels[backend.LabelPoolState] == backend.PoolReady; ready && reason != "" && !info.Expired(now) {
			// A dead keeper's ready members serve other claimers until
			// they are older than the grace period.
			if now.Sub(info.CreatedAt) < grace {
				continue
			}
			reason = "ready pool member of keeper " + info.Owner + ", which is gone"
		}
		if reason == "" && abandoned[info.Session] {
			reason = "the launch of session " + info.Session + " was cut short: its launcher " + info.Labels[session.LabelLauncher] + " is gone"
		}
		if reason == "" {
			continue
		}
		r := gcResult{Kind: "sandbox", ID: info.ID, Name: info.Name, Reason: reason}
		ok, err := a.gcRemove(ctx, &r, dryRun, info.ID, fmt.Sprintf("%s (%s)", r.ID, orDash(r.Name)),
			func() error { return reap(ctx, b, info) })
		if err != nil {
			return err
		}
		failed = failed || !ok
		results = append(results, r)
	}
	snaps, snapsFailed, err := a.gcSnapshots(ctx, b, dryRun)
	if err != nil {
		return err
	}
	results = append(results, snaps...)
	failed = failed || snapsFailed
	// Caches after the snapshots (lite's and local's caches include
	// snapshot folders nothing uses, which the snapshot pass names as
	// snapshots) and before volumes and networks: native's egress
	// enforcers whose sandboxes are gone (a create killed halfway) are
	// among them, and one of them on a session's network keeps the
	// network in use.
	caches, err := a.gcCaches(backend.WithPruneGrace(ctx, grace), b, dryRun)
	if err != nil {
		return err
	}
	results = append(results, caches...)
	// Volumes and networks go after the sandboxes that used them.
	shared, sharedFailed, err := a.gcShared(ctx, b, infos, results, dryRun, grace)
	if err != nil {
		return err
	}
	results = append(results, shared...)
	failed = failed || sharedFailed
	// Bundles' temporary folders of sbx processes that died.
	temps, err := session.PruneTemp(dryRun)
	for _, p := range temps {
		results = append(results, a.gcReport(gcResult{Kind: "temp", ID: p, Reason: "left by an sbx snapshot -o, restore or move that is gone", Removed: !dryRun}, dryRun))
	}
	if err != nil {
		return err
	}
	if a.json {
		if err := printJSON(a.stdout, results); err != nil {
			return err
		}
	}
	if failed {
		return &exitCode{exitError}
	}
	return nil
}

// gcCaches removes the backend's caches that nothing uses any more (native's
// sbxd volumes of other builds of the agent, and its claim records of
// sandboxes that are gone).
func (a *app) gcCaches(ctx context.Context, b backend.Backend, dryRun bool) ([]gcResult, error) {
	cp, ok := backend.AsBackend[backend.CachePruner](b)
	if !ok {
		return nil, nil
	}
	names, err := cp.PruneCaches(ctx, dryRun)
	var results []gcResult
	for _, name := range names {
		results = append(results, a.gcReport(gcResult{Kind: "cache", ID: name, Reason: "nothing uses it any more", Removed: !dryRun}, dryRun))
	}
	return results, err
}

// gcReport prints r (without --json) and returns it.
func (a *app) gcReport(r gcResult, dryRun bool) gcResult {
	if !a.json {
		verb := "removed"
		if dryRun {
			verb = "would remove"
		}
		fmt.Fprintf(a.stdout, "%s %s %s: %s\n", verb, r.Kind, r.ID, r.Reason)
	}
	return r
}

// volumeGrace is how old a volume or network of a session without
// sandboxes must be, by default, before gc removes it: a session makes them
// before its sandboxes.
const volumeGrace = 10 * time.Minute

// sharedResource is a volume or a network a backend made for sessions.
type sharedResource struct {
	kind   string // "volume", "network"
	info   backend.VolumeInfo
	remove func(ctx context.Context, name string) error
}

// gcShared removes the volumes and networks volumeReapReason names, after
// the sandboxes were reaped (removed holds what the sandbox pass did).
func (a *app) gcShared(ctx context.Context, b backend.Backend, infos []backend.Info, removed []gcResult, dryRun bool, grace time.Duration) ([]gcResult, bool, error) {
	var res []sharedResource
	if vm, ok := backend.AsBackend[backend.VolumeManager](b); ok {
		vols, err := vm.ListVolumes(ctx, backend.Filter{})
		if err != nil {
			return nil, false, err
		}
		for _, v := range vols {
			res = append(res, sharedResource{"volume", v, vm.RemoveVolume})
		}
	}
	if nm, ok := backend.AsBackend[backend.NetworkManager](b); ok {
		nets, err := nm.ListNetworks(ctx, backend.Filter{})
		if err != nil {
			return nil, false, err
		}
		for _, n := range nets {
			v := backend.VolumeInfo(n)
			res = append(res, sharedResource{"network", v, nm.RemoveNetwork})
		}
	}
	gone := map[string]bool{}
	for _, r := range removed {
		gone[r.ID] = r.Removed || dryRun
	}
	live := map[string]bool{}
	for _, info := range infos {
		if !gone[info.ID] {
			live[info.Session] = true
		}
	}
	now := time.Now()
	var results []gcResult
	failed := false
	for _, sr := range res {
		reason := volumeReapReason(sr.info, live, now, grace)
		if reason == "" {
			continue
		}
		r := gcResult{Kind: sr.kind, ID: sr.info.Name, Reason: reason}
		name := sr.kind + " " + sr.info.Name
		ok, err := a.gcRemove(ctx, &r, dryRun, name, name, func() error { return sr.remove(ctx, sr.info.Name) })
		if err != nil {
			return nil, false, err
		}
		failed = failed || !ok
		results = append(results, r)
	}
	return results, failed, nil
}

// gcRemove runs remove for r unless dryRun, records the outcome in r,
// names a failure (what: "volume x") and prints the line (line: how it names
// r) unless --json. ok is false when the removal failed; err is the
// context's error when it ended meanwhile.
func (a *app) gcRemove(ctx context.Context, r *gcResult, dryRun bool, what, line string, remove func() error) (ok bool, err error) {
	if !dryRun {
		err := remove()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if err != nil {
			r.Error = err.Error()
			a.printError(fmt.Errorf("removing %s: %w", what, err))
			return false, nil
		}
		r.Removed = true
	}
	if !a.json {
		verb := "removed"
		if dryRun {
			verb = "would remove"
		}
		fmt.Fprintf(a.stdout, "%s %s: %s\n", verb, line, r.Reason)
	}
	return true, nil
}

// volumeReapReason says why gc removes a volume (or network), or "" to
// keep it. live holds the sessions that still have sandboxes.
func volumeReapReason(v backend.VolumeInfo, live map[string]bool, now time.Time, grace time.Duration) string {
	if !v.ExpiresAt.IsZero() && !now.Before(v.ExpiresAt) {
		return "expired " + shortDuration(now.Sub(v.ExpiresAt)) + " ago"
	}
	if v.Session != "" && !live[v.Session] && !v.CreatedAt.IsZero() && now.Sub(v.CreatedAt) >= grace {
		return "session " + v.Session + " has no sandboxes left"
	}
	return ""
}

// abandonedLaunches finds the sessions whose launcher died before the
// launch completed (see session.LaunchStateOf).
func abandonedLaunches(ctx context.Context, b backend.Backend, infos []backend.Info) (map[string]bool, error) {
	leased := map[string][]backend.Info{}
	for _, info := range infos {
		if info.Session != "" && info.Labels[session.LabelLauncher] != "" {
			leased[info.Session] = append(leased[info.Session], info)
		}
	}
	abandoned := map[string]bool{}
	for id, members := range leased {
		state, err := session.LaunchStateOf(ctx, b, id, members)
		if err != nil {
			return nil, err
		}
		abandoned[id] = state == session.Abandoned
	}
	return abandoned, nil
}

// reapReason says why gc removes a sandbox, or "" to keep it.
func reapReason(info backend.Info, now time.Time) string {
	if info.Expired(now) {
		return "expired " + shortDuration(now.Sub(info.ExpiresAt)) + " ago"
	}
	if info.State == backend.StateRemoving {
		return "its removal was cut short"
	}
	if c := info.Labels[backend.LabelCreator]; c != "" && info.State == backend.StateCreating {
		if alive, known := owner.Alive(c); known && !alive {
			return "its creation was cut short: its creator " + c + " is gone"
		}
	}
	if info.Owner == "" {
		return ""
	}
	if alive, known := owner.Alive(info.Owner); known && !alive {
		return "owner " + info.Owner + " is gone"
	}
	return ""
}

func reap(ctx context.Context, b backend.Backend, info backend.Info) error {
	if info.Labels[backend.LabelPoolState] == backend.PoolReady {
		// Claimed first, so that no task is handed a member being removed.
		if cl, ok := backend.AsBackend[backend.Claimer](b); ok {
			_, err := cl.Claim(ctx, info.ID, backend.Claim{Owner: owner.Self(), Session: info.Session, TTL: time.Hour})
			if errors.Is(err, backend.ErrClaimed) || errors.Is(err, backend.ErrNotFound) {
				return nil // a task took it, or it is gone
			}
			if err != nil {
				return err
			}
		}
	}
	sb, err := b.Get(ctx, info.ID)
	if errors.Is(err, backend.ErrNotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	return sb.Destroy(ctx)
}
