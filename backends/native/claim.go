package native

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Pool members (backend.Claimer). A container's labels are fixed at
// create, so a claim is kept beside the container, in two places:
//
//  1. A claim record: a volume named sbx-claim-<sandbox ID>, never
//     mounted, whose labels are the sandbox's labels after the claim
//     (backend.ApplyClaim's owner, session, expiry, pool state and labels)
//     plus labelClaim (the sandbox ID) and labelClaimNonce (which claimer
//     made it). Making it is the claim's one atomic step. The engine
//     creates volumes under a lock per name, and creating a name that
//     exists answers with the existing volume and the labels it was made
//     with (moby volume/service/store.go: VolumeStore.Create holds
//     s.locks.Lock(name); create returns the stored volume, "TODO: there
//     could be some inconsistent details such as labels here"). Podman
//     4.3's compat API answers the same. So of any number of claimers, in
//     any process or on any host, exactly one gets its own nonce back.
//  2. The container's name: the winner renames the container from its
//     ready name (sbx-<session>-<name>-<id>) to that name + "-claimed",
//     in the background once Claim has returned (the rename is the
//     slowest step; Close waits for it).
//     The name lives in the container, so a claimed member never reads as
//     ready again, even when its record is lost (docker volume prune
//     removes unused named volumes on Docker before 23, and on Podman). It
//     then reads as claimed with its keeper as owner (labelClaim says
//     "lost"), and sbx gc reaps it once the keeper is gone.
//
// The rename is not the lock, and comes second, for two reasons. First,
// the order: a claimer that dies between rename and record would leave a
// member that is claimed with nothing saying by whom or since when, which
// gc cannot tell from a claim in progress; with the record first, a
// claimer that dies before renaming leaves a complete claim. Second,
// Podman: moby's daemon/rename.go (Docker 23 and current moby, checked)
// re-reads the name under the container's lock and refuses a rename to the
// current name ("Renaming a container with the same name as its current
// name", 400), so racing renames to one name have one winner on Docker
// (the others get that or 404, the old name being gone), while renames to
// different names would all succeed; Podman 4.3 answers 204 to a rename to
// the current name, so a claimer that looked the container up by its old
// name before the winner renamed it would win too.
//
// A keeper makes a member in state backend.PoolMaking and, once it is
// provisioned, claims it from making to ready: that writes a ready record,
// a volume named sbx-ready-<sandbox ID> made the same way (its labels are
// the member's labels when ready, plus labelClaim and labelClaimNonce),
// with no rename. A claim record, when there is one, wins over the ready
// record, which wins over the container's labels.
//
// Claims back from claimed to ready (Claim.Expect = PoolClaimed) are not
// supported: returning a used container to a pool is not provably clean.
const (
	labelClaim      = "sandboxkit.native.claim"
	labelClaimNonce = "sandboxkit.native.claim.nonce"
	claimPrefix     = "sbx-claim-"
	readyPrefix     = "sbx-ready-"
	claimedSuffix   = "-claimed"
	// claimLost is labelClaim on a claimed member whose record is gone.
	claimLost = "lost"
)

var _ backend.Claimer = (*Backend)(nil)

// claimVolume is the name of sandbox id's claim record.
func claimVolume(id string) string { return claimPrefix + id }

// readyVolume is the name of sandbox id's ready record.
func readyVolume(id string) string { return readyPrefix + id }

// claimedName is the name a claimed member's container gets: derived
// from its ready name only, so that a second rename can never succeed
// where the first did (see above).
func claimedName(ready string) string { return ready + claimedSuffix }

// isClaimedName reports whether a pool member's container name (as the
// engine reports it, with or without a leading "/") says it was claimed.
// Ready names end in the sandbox's hex ID.
func isClaimedName(name string) bool { return strings.HasSuffix(name, claimedSuffix) }

// claimErr is a claim's *backend.OpError. err is translated already: the
// contract's ErrClaimed must stay in the chain, which translate would
// flatten.
func claimErr(id string, err error) error {
	return &backend.OpError{Op: "claim", Backend: Name, Sandbox: id, Err: err}
}

// Claim hands pool member id to one claimer (backend.Claimer): it checks
// the member is ready, makes its claim record (the atomic step) and
// renames its container. Another claimer's win, or a member claimed
// already, gives an error wrapping backend.ErrClaimed and changes
// nothing; an unknown id wraps backend.ErrNotFound.
func (b *Backend) Claim(ctx context.Context, id string, c backend.Claim) (backend.Info, error) {
	fail := func(err error) (backend.Info, error) { return backend.Info{}, claimErr(id, err) }
	ready := c.Expected() == backend.PoolMaking && c.NewState() == backend.PoolReady
	claim := (c.Expected() == backend.PoolReady || c.Expected() == backend.PoolMaking) && c.NewState() == backend.PoolClaimed
	if !ready && !claim {
		return fail(fmt.Errorf("%w: claim from %s to %s: Docker containers are only claimed from %s to %s and from %s or %s to %s (a used container does not go back to its pool)",
			errors.ErrUnsupported, c.Expected(), c.NewState(), backend.PoolMaking, backend.PoolReady, backend.PoolMaking, backend.PoolReady, backend.PoolClaimed))
	}
	// The container and its ready record, looked up at once.
	var rr map[string]string
	var rerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		rr, rerr = b.record(ctx, readyVolume(id), id)
	}()
	ctr, err := b.summary(ctx, id)
	<-done
	if err != nil {
		return fail(err)
	}
	name := strings.TrimPrefix(firstName(ctr.Names), "/")
	switch {
	case ctr.Labels[backend.LabelPool] == "":
		return fail(fmt.Errorf("%w: sandbox %s is no pool member", backend.ErrClaimed, id))
	case isClaimedName(name):
		return fail(fmt.Errorf("%w: container %s was claimed already", backend.ErrClaimed, name))
	}
	// The member's labels now: its ready record's, once it has one.
	base := ctr.Labels
	if rerr != nil {
		return fail(rerr)
	}
	if rr != nil {
		base = rr
	}
	labels, err := claimedLabels(base, c, time.Now())
	if err != nil {
		return fail(err)
	}
	nonce := newID()
	rec := maps.Clone(labels)
	delete(rec, labelClaimNonce)
	rec[labelClaim], rec[labelClaimNonce] = id, nonce
	if ready {
		if err := b.makeRecord(ctx, readyVolume(id), rec); err != nil {
			return fail(err)
		}
		return infoFrom(labels, ctr.Image, ctr.State, time.Unix(ctr.Created, 0), cmp(labels[labelWorkDir], "/")), nil
	}
	if err := b.makeRecord(ctx, claimVolume(id), rec); err != nil {
		return fail(err)
	}
	// The claim is made: the rename that keeps it should the record be
	// lost follows in the background (it is the slowest step, and the
	// task's first command should not wait for it); Close waits for it.
	b.renames.Go(func() {
		rctx, cancel := cleanupCtx(context.WithoutCancel(ctx))
		defer cancel()
		if err := b.cli.ContainerRename(rctx, ctr.ID, claimedName(name)); err != nil {
			err = b.translate(err)
			if !errors.Is(err, backend.ErrNotFound) { // removed meanwhile: nothing to keep
				b.log.Warn("renaming a claimed pool member failed; its claim record alone keeps it claimed",
					"sandbox", id, "container", ctr.ID, "err", err)
			}
		}
	})
	b.log.Debug("claimed pool member", "id", id, "container", ctr.ID, "pool", labels[backend.LabelPool], "session", c.Session)
	return infoFrom(labels, ctr.Image, ctr.State, time.Unix(ctr.Created, 0), cmp(labels[labelWorkDir], "/")), nil
}

// claimedLabels applies c to a member's container labels (through
// backend.ApplyClaim) and returns the labels the member has afterwards,
// owner, session and expiry included.
func claimedLabels(ctrLabels map[string]string, c backend.Claim, now time.Time) (map[string]string, error) {
	labels := map[string]string{}
	for k, v := range ctrLabels {
		if k == labelClaim || k == labelClaimNonce {
			continue // a record's own
		}
		if v != "" || !strings.HasPrefix(k, backend.LabelPrefix) { // blanked, see containerConfig
			labels[k] = v
		}
	}
	owner, session := labels[backend.LabelOwner], labels[backend.LabelSession]
	expires, _ := time.Parse(time.RFC3339, labels[backend.LabelExpiresAt])
	if err := backend.ApplyClaim(&labels, &owner, &session, &expires, c, now); err != nil {
		return nil, err
	}
	set := func(k, v string) {
		if v != "" {
			labels[k] = v
		} else {
			delete(labels, k)
		}
	}
	set(backend.LabelOwner, owner)
	set(backend.LabelSession, session)
	if expires.IsZero() {
		delete(labels, backend.LabelExpiresAt)
	} else {
		labels[backend.LabelExpiresAt] = expires.Format(time.RFC3339)
	}
	return labels, nil
}

// makeRecord creates the claim or ready record name with labels rec; an
// existing record (another claimer's) wraps backend.ErrClaimed.
func (b *Backend) makeRecord(ctx context.Context, name string, rec map[string]string) error {
	v, err := b.cli.VolumeCreate(ctx, volume.CreateOptions{Name: name, Labels: rec})
	if err != nil {
		// The volume may exist all the same: the answer was lost, or an
		// engine refused a name another create was making at that moment.
		cctx, cancel := cleanupCtx(ctx)
		defer cancel()
		got, ierr := b.cli.VolumeInspect(cctx, name)
		switch {
		case ierr != nil:
			return fmt.Errorf("claim record %s: %w", name, b.translate(err))
		case got.Labels[labelClaimNonce] != rec[labelClaimNonce]:
			return fmt.Errorf("%w: another claimer made claim record %s first", backend.ErrClaimed, name)
		case ctx.Err() != nil:
			if rerr := b.cli.VolumeRemove(cctx, name, false); rerr != nil {
				b.log.Warn("removing the claim record of a cancelled claim failed", "volume", name, "err", rerr)
			}
			return ctx.Err()
		}
		v = got
	}
	if v.Labels[labelClaimNonce] != rec[labelClaimNonce] {
		return fmt.Errorf("%w: another claimer made claim record %s first", backend.ErrClaimed, name)
	}
	return nil
}

// cleanupCtx is for work that must finish when ctx is cancelled.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// claimRecordFilter finds every claim record on the engine.
func claimRecordFilter() filters.Args {
	return filters.NewArgs(filters.Arg("label", backend.LabelBackend+"="+Name), filters.Arg("label", labelClaim))
}

// claimRecords returns, by sandbox ID, the labels of every pool member's
// record on the engine: its claim record, else its ready record.
func (b *Backend) claimRecords(ctx context.Context) (map[string]map[string]string, error) {
	args := claimRecordFilter()
	resp, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return nil, b.translate(err)
	}
	recs := map[string]map[string]string{}
	for _, v := range resp.Volumes {
		id := v.Labels[labelClaim]
		if !matchLabels(v.Labels, args) {
			continue
		}
		switch v.Name {
		case claimVolume(id):
			recs[id] = v.Labels
		case readyVolume(id):
			if recs[id] == nil {
				recs[id] = v.Labels
			}
		}
	}
	return recs, nil
}

// claimRecord returns the labels of sandbox id's record: its claim
// record, else its ready record; nil when it has none.
func (b *Backend) claimRecord(ctx context.Context, id string) (map[string]string, error) {
	rec, err := b.record(ctx, claimVolume(id), id)
	if rec != nil || err != nil {
		return rec, err
	}
	return b.record(ctx, readyVolume(id), id)
}

// record returns the labels of sandbox id's record volume name; nil when
// there is none.
func (b *Backend) record(ctx context.Context, name, id string) (map[string]string, error) {
	v, err := b.cli.VolumeInspect(ctx, name)
	if err != nil {
		if err := b.translate(err); !errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("record %s: %w", name, err)
		}
		return nil, nil
	}
	if v.Labels[labelClaim] != id {
		return nil, nil
	}
	return v.Labels, nil
}

// withClaim returns the labels a sandbox has now, given its container's
// labels and name and its record (nil: none): a pool member's record's
// labels when it has one that agrees with its name; else, when its name
// says it was claimed, its labels marked claimed (the claim record is
// lost). Other sandboxes' are their container's.
func withClaim(labels map[string]string, name string, rec map[string]string) map[string]string {
	if labels[backend.LabelPool] == "" {
		return labels
	}
	claimed := isClaimedName(name)
	if rec != nil {
		l := maps.Clone(rec)
		delete(l, labelClaim)
		delete(l, labelClaimNonce)
		if !claimed || l[backend.LabelPoolState] == backend.PoolClaimed {
			return l
		}
		labels = l // a ready record, but the container was claimed
	}
	if claimed {
		l := maps.Clone(labels)
		l[backend.LabelPoolState] = backend.PoolClaimed
		l[labelClaim] = claimLost
		return l
	}
	return labels
}

// claimable reports whether a claim can set label k, so that List cannot
// leave matching it to the engine's filter on the container's labels.
func claimable(k string) bool {
	switch k {
	case backend.LabelID, backend.LabelBackend, backend.LabelName, backend.LabelPool:
		return false
	}
	return true
}

// pruneClaimRecords removes the claim records of sandboxes that are gone
// (a Destroy cut short between container and record, or a claim that
// raced a Destroy). The records are listed before the containers: a
// sandbox's container exists before its record, so a record whose
// container the later listing lacks is one no sandbox will use.
func (b *Backend) pruneClaimRecords(ctx context.Context, dryRun bool) ([]string, error) {
	args := claimRecordFilter()
	resp, err := b.cli.VolumeList(ctx, volume.ListOptions{Filters: args})
	if err != nil {
		return nil, b.translate(err)
	}
	type recordName struct{ id, volume string }
	var names []recordName
	for _, v := range resp.Volumes {
		id := v.Labels[labelClaim]
		if matchLabels(v.Labels, args) && (v.Name == claimVolume(id) || v.Name == readyVolume(id)) {
			names = append(names, recordName{id, v.Name})
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", backend.LabelBackend+"="+Name), filters.Arg("label", backend.LabelPool))})
	if err != nil {
		return nil, b.translate(err)
	}
	live := map[string]bool{}
	for _, c := range list {
		live[c.Labels[backend.LabelID]] = true
	}
	var pruned []string
	for _, name := range names {
		if live[name.id] {
			continue
		}
		if !dryRun {
			if err := b.cli.VolumeRemove(ctx, name.volume, false); err != nil {
				if err := b.translate(err); !errors.Is(err, backend.ErrNotFound) {
					return pruned, fmt.Errorf("removing record %s: %w", name.volume, err)
				}
			}
		}
		pruned = append(pruned, name.volume)
	}
	return pruned, nil
}

// summary returns the engine's list entry of sandbox id's container.
func (b *Backend) summary(ctx context.Context, id string) (container.Summary, error) {
	b.settle(ctx)
	if id == "" {
		return container.Summary{}, backend.ErrNotFound
	}
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", backend.LabelBackend+"="+Name),
		filters.Arg("label", backend.LabelID+"="+id),
	)})
	if err != nil {
		return container.Summary{}, b.translate(err)
	}
	if len(list) == 0 {
		return container.Summary{}, fmt.Errorf("%w: no sandbox %s", backend.ErrNotFound, id)
	}
	return list[0], nil
}

func firstName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
