package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// OpenSandbox's snapshot API over the backend's snapshots
// (backend.Snapshotter, backend.SnapshotManager):
//
//	POST   /v1/sandboxes/{id}/snapshots {name?}  202, the snapshot (Ready: the
//	                                             backend's snapshot is taken
//	                                             before the answer)
//	GET    /v1/snapshots?sandboxId=&state=&page=&pageSize=
//	GET    /v1/snapshots/{snapshotId}
//	DELETE /v1/snapshots/{snapshotId}            204
//
// and a create with snapshotId starts the sandbox from one. A snapshot
// belongs to the conversation whose sandbox it was taken of; its API ID,
// name and sandbox are labels of the backend's snapshot.

// Labels of snapshots taken through the OpenSandbox API. The server's
// own labels (LabelInstance, LabelConversation) are the sandbox's, which
// backends may clear on its snapshots (native does, so that a sandbox
// started from one is not taken for the first): a snapshot carries its
// owner in labels of its own.
const (
	LabelOSBSnapshotID       = "sandboxkit.osb.snapshot-id"
	LabelOSBSnapshotName     = "sandboxkit.osb.snapshot-name"
	LabelOSBSnapshotOf       = "sandboxkit.osb.snapshot-of"
	LabelOSBSnapshotInstance = "sandboxkit.osb.snapshot-instance"
	LabelOSBSnapshotOwner    = "sandboxkit.osb.snapshot-owner"
)

// osbSnapshotJSON is snap as the API shows it.
func osbSnapshotJSON(snap backend.Snapshot) map[string]any {
	m := map[string]any{
		"id":        snap.Labels[LabelOSBSnapshotID],
		"sandboxId": snap.Labels[LabelOSBSnapshotOf],
		"status": map[string]any{
			"state": "Ready", "reason": "snapshot_ready", "lastTransitionAt": osbTime(snap.CreatedAt),
		},
		"createdAt": osbTime(snap.CreatedAt),
	}
	if name := snap.Labels[LabelOSBSnapshotName]; name != "" {
		m["name"] = name
	}
	return m
}

// osbSnapshotManager is the backend's SnapshotManager, or an error saying
// the backend has none.
func (s *Server) osbSnapshotManager() (backend.SnapshotManager, error) {
	sm, ok := backend.AsBackend[backend.SnapshotManager](s.opts.Backend)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend takes no snapshots", errors.ErrUnsupported, s.opts.Backend.Name())
	}
	return sm, nil
}

// osbSnapshots lists conv's snapshots taken through the API, those with
// ID id only when id is not "".
func (s *Server) osbSnapshots(ctx context.Context, conv, id string) ([]backend.Snapshot, error) {
	sm, err := s.osbSnapshotManager()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{LabelOSBSnapshotInstance: s.opts.Instance, LabelOSBSnapshotOwner: OwnerKey(conv)}
	if id != "" {
		labels[LabelOSBSnapshotID] = id
	}
	snaps, err := sm.ListSnapshots(ctx, backend.Filter{Labels: labels})
	if err != nil {
		return nil, err
	}
	snaps = slices.DeleteFunc(snaps, func(s backend.Snapshot) bool { return s.Labels[LabelOSBSnapshotID] == "" })
	slices.SortFunc(snaps, func(a, b backend.Snapshot) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Ref, b.Ref)
	})
	return snaps, nil
}

// osbSnapshot is conv's snapshot id, or a 404 error.
func (s *Server) osbSnapshot(ctx context.Context, conv, id string) (backend.Snapshot, error) {
	snaps, err := s.osbSnapshots(ctx, conv, id)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if len(snaps) == 0 {
		return backend.Snapshot{}, errSnapshotGone{id}
	}
	return snaps[0], nil
}

// errSnapshotGone is a snapshot the caller cannot see.
type errSnapshotGone struct{ id string }

func (e errSnapshotGone) Error() string { return "snapshot " + e.id + " not found" }

// osbSnapshotFail answers for a failed snapshot call.
func (s *Server) osbSnapshotFail(w http.ResponseWriter, err error, code string) {
	var gone errSnapshotGone
	if errors.As(err, &gone) {
		osbError(w, http.StatusNotFound, "SANDBOX::SNAPSHOT_NOT_FOUND", "%v", err)
		return
	}
	s.osbFail(w, err, code)
}

func (s *Server) osbCreateSnapshot(w http.ResponseWriter, r *http.Request, conv string) {
	var req struct {
		Name string `json:"name"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSmallBody)).Decode(&req); err != nil {
			osbValidation(w, []any{"body"}, "JSON decode error: "+err.Error())
			return
		}
	}
	id := r.PathValue("id")
	var snap backend.Snapshot
	err := s.withBox(r.Context(), conv, id, func(ctx context.Context, b *box) error {
		sn, ok := backend.As[backend.Snapshotter](b.sb)
		if !ok {
			return fmt.Errorf("%w: the %s backend takes no snapshots", errors.ErrUnsupported, s.opts.Backend.Name())
		}
		var err error
		snap, err = sn.Snapshot(ctx, backend.SnapshotRequest{Labels: map[string]string{
			LabelOSBSnapshotInstance: s.opts.Instance, LabelOSBSnapshotOwner: OwnerKey(conv),
			LabelOSBSnapshotID: newCommandID()[:24], LabelOSBSnapshotName: req.Name, LabelOSBSnapshotOf: id,
		}})
		return err
	})
	if err != nil {
		s.osbFail(w, err, "SANDBOX::SNAPSHOT_FAILED")
		return
	}
	writeJSON(w, http.StatusAccepted, osbSnapshotJSON(snap))
}

func (s *Server) osbGetSnapshot(w http.ResponseWriter, r *http.Request, conv string) {
	snap, err := s.osbSnapshot(r.Context(), conv, r.PathValue("snapshotId"))
	if err != nil {
		s.osbSnapshotFail(w, err, "SANDBOX::SNAPSHOT_QUERY_FAILED")
		return
	}
	writeJSON(w, http.StatusOK, osbSnapshotJSON(snap))
}

func (s *Server) osbDeleteSnapshot(w http.ResponseWriter, r *http.Request, conv string) {
	snap, err := s.osbSnapshot(r.Context(), conv, r.PathValue("snapshotId"))
	if err == nil {
		var sm backend.SnapshotManager
		if sm, err = s.osbSnapshotManager(); err == nil {
			err = sm.RemoveSnapshot(r.Context(), snap.Ref)
		}
	}
	if err != nil {
		s.osbSnapshotFail(w, err, "SANDBOX::SNAPSHOT_DELETE_FAILED")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) osbListSnapshots(w http.ResponseWriter, r *http.Request, conv string) {
	q := r.URL.Query()
	page, pageSize, ok := osbPage(w, q, 0)
	if !ok {
		return
	}
	snaps, err := s.osbSnapshots(r.Context(), conv, "")
	if err != nil {
		s.osbFail(w, err, "SANDBOX::SNAPSHOT_QUERY_FAILED")
		return
	}
	states := q["state"]
	items := []map[string]any{}
	for _, snap := range snaps {
		if sb := q.Get("sandboxId"); sb != "" && snap.Labels[LabelOSBSnapshotOf] != sb {
			continue
		}
		if len(states) > 0 && !slices.ContainsFunc(states, func(st string) bool { return strings.EqualFold(st, "Ready") }) {
			continue
		}
		items = append(items, osbSnapshotJSON(snap))
	}
	total := len(items)
	from := min((page-1)*pageSize, total)
	to := min(from+pageSize, total)
	pages := (total + pageSize - 1) / pageSize
	writeJSON(w, http.StatusOK, map[string]any{
		"items": items[from:to],
		"pagination": map[string]any{
			"page": page, "pageSize": pageSize, "totalItems": total, "totalPages": pages, "hasNextPage": page < pages,
		},
	})
}
