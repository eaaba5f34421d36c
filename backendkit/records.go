package backendkit

import (
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/owner"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// A backend without a daemon keeps each sandbox in a folder of its state
// folder (ROOT/ID), with a record (meta.json, written atomically under
// the folder's lock) that Get, List, session resume and sbx gc work from.
// The record is any JSON type of the backend's that embeds Lifecycle (who
// is creating it, whether it is being removed), so that a sandbox whose
// creator died half-way, or whose Destroy was killed, shows in List and is
// finished by Destroy or sbx gc.

// Lifecycle is the part of a record that says whether the sandbox is
// being made (Creator: the owner string of the process making it, Self)
// or removed; embed it in your record type.
type Lifecycle = statedir.Lifecycle

// NewID returns a new sandbox ID (12 lowercase hex digits).
func NewID() (string, error) { return statedir.NewID() }

// Self is this process as an owner or creator string: sbx gc treats a
// sandbox whose owner or creator process is gone as abandoned.
func Self() string { return owner.Self() }

// WriteRecord writes a sandbox's record into its folder dir, atomically.
func WriteRecord(dir string, record any) error { return statedir.WriteMeta(dir, record) }

// ReadRecord reads the record in dir; a missing one is backend.ErrNotFound.
func ReadRecord[R any](dir string) (*R, error) { return statedir.Read[R](dir) }

// UpdateRecord applies fn to sandbox id's record under its lock.
func UpdateRecord[R any](root, id string, fn func(*R) error) error {
	return statedir.Update(root, id, fn)
}

// FindRecord returns the folder of sandbox id under root, or an error
// wrapping backend.ErrNotFound naming backendName.
func FindRecord[R any](root, backendName, id string) (string, error) {
	return statedir.Get[R](root, backendName, id)
}

// ListRecords lists the sandboxes under root that match filter, with info
// turning a record into backend.Info (half-made ones included, as
// StateCreating or StateRemoving).
func ListRecords[R any](root, backendName string, filter backend.Filter, info func(*R) backend.Info) ([]backend.Info, error) {
	return statedir.List(root, backendName, filter, info)
}

// MarkRemoving records that the sandbox in dir is being removed (the
// first step of Destroy): a Destroy killed from here on leaves a sandbox
// List shows as removing and another Destroy finishes.
func MarkRemoving(dir string) error { return statedir.MarkRemoving(dir) }

// RemoveFolder removes a sandbox's folder, its record last.
func RemoveFolder(dir string) error { return statedir.RemoveDir(dir, nil) }

// Labels returns a sandbox's labels for its Info: its own (extra) and the
// contract's (backend.LabelID, LabelName, ...) from i.
func Labels(extra map[string]string, i backend.Info) map[string]string {
	return statedir.Labels(extra, i)
}

// HalfInfo is the Info of a sandbox folder dir whose record is missing (a
// Create killed before writing it, a Destroy that removed it last but was
// killed before the folder went): it shows in List as removing, and
// Destroy finishes it. ok is false when dir is not such a folder.
func HalfInfo(dir, backendName string) (info backend.Info, ok bool) {
	return statedir.HalfInfo(dir, backendName)
}
