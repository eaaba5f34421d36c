package session

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
)

// A session without an owner (sbx up) outlives the process that launched
// it, so a reaper cannot tell a finished launch from one that was killed
// halfway by the launcher being gone. Such a session holds a lease while it
// launches: every sandbox carries LabelLauncher, and the last step of a
// successful launch records completion where the backend lets it:
// LabelLaunched on each sandbox (backends with a Labeler), else a marker
// volume (backends with a VolumeManager: Docker's labels cannot change).
// Backends with neither get no lease; their abandoned launches go at the
// TTL.

// markerVolume names a session's launched-marker volume.
func markerVolume(id string) string { return "sbx-" + id + "-launched" }

// canMarkLaunched reports whether b can record a completed launch.
func canMarkLaunched(b backend.Backend) bool {
	if _, ok := backend.AsBackend[backend.VolumeManager](b); ok {
		return true
	}
	_, ok := backend.AsBackend[backend.Labeler](b)
	return ok
}

// markLaunched records that s's launch completed: with labels where the
// backend can change them (no extra resource), else with a marker volume.
func markLaunched(ctx context.Context, s *Session, ms []*member, ownerLabel string) error {
	if lb, ok := backend.AsBackend[backend.Labeler](s.backend); ok {
		for _, m := range ms {
			if err := lb.SetLabels(ctx, m.sb.ID(), map[string]string{LabelLaunched: "true"}); err != nil {
				return fmt.Errorf("sandbox %q: %w", m.name, err)
			}
		}
		return nil
	}
	vm, ok := backend.AsBackend[backend.VolumeManager](s.backend)
	if !ok {
		return nil
	}
	ttl := time.Duration(0)
	for _, m := range ms {
		ttl = max(ttl, m.spec.TTL)
	}
	labels := map[string]string{LabelLaunched: "true"}
	if ownerLabel != "" {
		labels[backend.LabelOwner] = ownerLabel
	}
	_, err := vm.CreateVolume(ctx, backend.VolumeSpec{Name: markerVolume(s.ID), Session: s.ID, Labels: labels, TTL: ttl})
	return err
}

// LaunchState says how far a session's launch got, as far as the backend
// can tell.
type LaunchState string

const (
	// Launched: the launch completed, or the session has an owner of its
	// own (sbx run, sbx serve) or no lease (a backend that cannot record
	// completion).
	Launched LaunchState = "launched"
	// Launching: the launcher still runs.
	Launching LaunchState = "launching"
	// Abandoned: the launcher is gone and the launch never completed; sbx
	// gc removes the session.
	Abandoned LaunchState = "abandoned"
	// LaunchUnknown: the launcher runs on another host.
	LaunchUnknown LaunchState = "unknown"
)

// LaunchStateOf tells the state of the launch of session id from its
// sandboxes (infos, as b.List returned them for the session) and, where the
// backend has volumes, its marker volume.
func LaunchStateOf(ctx context.Context, b backend.Backend, id string, infos []backend.Info) (LaunchState, error) {
	launcher := ""
	for _, info := range infos {
		if info.Session != id {
			continue
		}
		if info.Labels[LabelLaunched] != "" {
			return Launched, nil
		}
		if l := info.Labels[LabelLauncher]; l != "" {
			launcher = l
		}
	}
	if launcher == "" {
		return Launched, nil
	}
	if vm, ok := backend.AsBackend[backend.VolumeManager](b); ok {
		vols, err := vm.ListVolumes(ctx, backend.Filter{Session: id})
		if err != nil {
			return LaunchUnknown, err
		}
		for _, v := range vols {
			if v.Labels[LabelLaunched] != "" {
				return Launched, nil
			}
		}
	}
	switch alive, known := owner.Alive(launcher); {
	case !known:
		return LaunchUnknown, nil
	case alive:
		return Launching, nil
	}
	return Abandoned, nil
}
