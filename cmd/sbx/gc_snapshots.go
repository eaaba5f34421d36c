package main

import (
	"context"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// gcSnapshots removes the snapshots whose TTL has run out (sbx snapshot
// --ttl), on a backend with snapshots. It goes through the backend's
// SnapshotManager, so that every backend's expired snapshots go the same
// way (native's images as well as lite's and local's folders).
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
		if sn.ExpiresAt.IsZero() || now.Before(sn.ExpiresAt) {
			continue
		}
		r := gcResult{Kind: "snapshot", ID: sn.Ref, Reason: "expired " + sn.ExpiresAt.Local().Format(time.DateTime)}
		ok, err := a.gcRemove(ctx, &r, dryRun, "the snapshot "+sn.Ref, "snapshot "+sn.Ref, func() error { return m.RemoveSnapshot(ctx, sn.Ref) })
		if err != nil {
			return results, failed, err
		}
		failed = failed || !ok
		results = append(results, r)
	}
	return results, failed, nil
}
