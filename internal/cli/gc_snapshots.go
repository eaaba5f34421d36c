package cli

import (
	"context"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// gcSnapshots removes the snapshots whose TTL has run out (sbx snapshot
// --ttl), and those whose making was cut short, on a backend with
// snapshots. It goes through the backend's SnapshotManager, so that every
// backend's snapshots go the same way (native's images as well as lite's
// and local's folders).
func (a *app) gcSnapshots(ctx context.Context, b backend.Backend, dryRun bool) ([]gcResult, bool, error) {
	m, ok := backend.AsBackend[backend.SnapshotManager](b)
	if !ok {
		return nil, false, nil
	}
	snaps, err := m.ListSnapshots(ctx, backend.Filter{})
	if err != nil {
		return nil, false, err
	}
	now := time.Now()
	var results []gcResult
	failed := false
	for _, sn := range snaps {
		reason := snapshotReapReason(sn, now)
		if reason == "" {
			continue
		}
		r := gcResult{Kind: "snapshot", ID: sn.Ref, Reason: reason}
		ok, err := a.gcRemove(ctx, &r, dryRun, "the snapshot "+sn.Ref, "snapshot "+sn.Ref, func() error { return m.RemoveSnapshot(ctx, sn.Ref) })
		if err != nil {
			return results, failed, err
		}
		failed = failed || !ok
		results = append(results, r)
	}
	return results, failed, nil
}

// snapshotReapReason says why gc removes a snapshot, or "" to keep it.
// A snapshot still being taken carries backend.LabelCreator, naming its
// maker, until the backend's Snapshot returns it: one whose maker is gone
// was never handed to anyone, complete or not.
func snapshotReapReason(sn backend.Snapshot, now time.Time) string {
	if !sn.ExpiresAt.IsZero() && !now.Before(sn.ExpiresAt) {
		return "expired " + sn.ExpiresAt.Local().Format(time.DateTime)
	}
	if c := sn.Labels[backend.LabelCreator]; c != "" {
		if alive, known := owner.Alive(c); known && !alive {
			return "its making was cut short: its maker " + c + " is gone"
		}
	}
	return ""
}
