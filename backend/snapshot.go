package backend

import (
	"context"
	"time"
)

// Labels of snapshots and forks.
const (
	// LabelSnapshotOf is the ID of the sandbox a snapshot was taken of.
	LabelSnapshotOf = "sandboxkit.snapshot-of"
	// LabelForkOf is the ID of the sandbox a fork was made from.
	LabelForkOf = "sandboxkit.fork-of"
)

// SnapshotRequest says how to take a snapshot.
type SnapshotRequest struct {
	// Ref names the snapshot ("" lets the backend choose). What names a
	// backend takes is its own: an image reference on Docker, any name
	// on lite and local (which return it as "snapshot:NAME").
	Ref string
	// Labels are added to the backend's own (LabelSnapshotOf, LabelID,
	// LabelSession, LabelOwner, ... of the sandbox), which win on clashes.
	Labels map[string]string
	// TTL is how long the snapshot is kept before sbx gc may remove it
	// (zero: no expiry; it stays until RemoveSnapshot).
	TTL time.Duration
}

// Snapshot describes a snapshot: a sandbox's file system as an image the
// same backend starts sandboxes from.
type Snapshot struct {
	// Ref is what Spec.Image takes to start a sandbox from the snapshot.
	Ref string
	// Base is the image the snapshot adds its changes to ("" when it
	// stands alone, as local's folder archives do).
	Base string
	// Size is the size in bytes of what the snapshot adds to Base (lite:
	// its OCI layer; local: its archive; Docker: the image's own size),
	// -1 when the backend cannot tell.
	Size      int64
	Labels    map[string]string
	CreatedAt time.Time
	// ExpiresAt is when the snapshot's TTL runs out (zero: never).
	ExpiresAt time.Time
}

// Snapshotter is a sandbox whose file system can be saved as an image
// that its backend starts new sandboxes from (Spec.Image = Snapshot.Ref).
// What a snapshot keeps is what Create, Exec and the file capabilities can
// see: file contents, modes, owners, symlinks, and deletions of the
// image's files (a file of the image removed in the sandbox stays
// removed). Processes and memory are not kept: this host's CRIU cannot
// run, and memory snapshots are a capability of their own, later.
// Bind-mounted volumes are not part of a snapshot.
//
// Unlike Checkpointer, which returns only an image reference, a
// snapshot carries labels and a TTL, so that sbx gc reclaims the ones
// nobody removed, and a SnapshotManager lists and removes them.
//
// Backends whose platform cannot save a sandbox's file system (k8s,
// opensandbox) do not implement it: As[Snapshotter] fails, and callers
// say so, naming the backend.
type Snapshotter interface {
	// Snapshot saves the sandbox's file system. The sandbox keeps
	// running; its processes may be frozen while the snapshot is taken,
	// so that the snapshot is consistent.
	Snapshot(ctx context.Context, req SnapshotRequest) (Snapshot, error)
}

// SnapshotManager is implemented by backends (not sandboxes) whose
// sandboxes are Snapshotters.
type SnapshotManager interface {
	// ListSnapshots lists the snapshots this backend made that match
	// filter (Filter.Labels; Filter.Session against LabelSession;
	// Filter.Name is ignored).
	ListSnapshots(ctx context.Context, filter Filter) ([]Snapshot, error)
	// RemoveSnapshot removes a snapshot by Ref; removing one that is gone
	// returns nil. Sandboxes started from it keep running (each keeps
	// what it needs).
	RemoveSnapshot(ctx context.Context, ref string) error
}

// ForkRequest says how many forks to make and what sets them apart from
// the sandbox they are made from.
type ForkRequest struct {
	// N is how many forks to make (at least 1).
	N int
	// Name, Session and Owner of the forks; "" takes the parent's.
	Name    string
	Session string
	Owner   string
	// Labels are added to the parent's (LabelForkOf names the parent).
	Labels map[string]string
	// TTL of each fork; zero takes the parent's TTL (not its expiry: a
	// fork lives the parent's TTL from its own creation).
	TTL time.Duration
	// Made, when set, is called with the forks' IDs once all are made
	// and before they are handed over: until then each is recorded as
	// being made by this process, so that sbx gc removes them should it
	// die. A caller that tells someone of the forks does so here (sbx fork
	// prints their IDs), so that no fork is complete that no one was told
	// of; a process killed after Made and before the hand-over has told
	// of forks that gc removes. An error from Made drops the forks, and
	// Fork fails with it.
	Made func(ids []string) error
}

// TellMade calls r.Made, when set, with the forks' IDs (see Made).
func (r ForkRequest) TellMade(ids []string) error {
	if r.Made == nil {
		return nil
	}
	return r.Made(ids)
}

// Forker is a sandbox that makes new sandboxes from its file system's
// current state: each fork starts with the files the parent has at the
// time of the call, with the parent's configuration (image, command,
// environment, working directory, volumes, limits), and from then on is
// independent: no fork sees what another fork or the parent writes, nor
// they its writes. Forks share no writable data with the parent or each
// other (a backend may share unchanged data copy-on-write).
//
// Processes are not carried over: each fork starts its command afresh,
// as Create would. This host's CRIU cannot run, so memory is not copied;
// memory snapshots will be a capability of their own.
//
// Fork makes all N forks or none: when one fails, those already made are
// destroyed. The parent keeps running; it may be frozen while its files
// are copied, so that every fork sees one consistent state.
type Forker interface {
	Fork(ctx context.Context, req ForkRequest) ([]Sandbox, error)
}
