// Package statedir keeps the on-disk records of backends whose sandboxes
// live in host folders (local, lite): one folder per sandbox named by a
// random ID, holding a meta.json that Get and List read, so the backend
// finds its sandboxes again after the host program restarts.
package statedir

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/atomicfile"
)

// MetaFile is the record's name inside a sandbox's folder.
const MetaFile = "meta.json"

// NewID returns a random 12-hex-digit sandbox ID.
func NewID() (string, error) {
	var buf [6]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf[:]), nil
}

// ValidID reports whether id has NewID's shape, so an ID from a caller can
// be joined to a path without walking out of the state dir.
func ValidID(id string) bool {
	if len(id) != 12 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// Read decodes the record (of type M) in the sandbox folder dir. A missing
// record is backend.ErrNotFound.
func Read[M any](dir string) (*M, error) {
	p := filepath.Join(dir, MetaFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, backend.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	m := new(M)
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	settle(filepath.Dir(dir), m)
	return m, nil
}

// Get is a backend's Get for the sandboxes under root: it returns the
// folder of sandbox id once its record (of type M) reads. An ID of another
// shape, or without a record, is backend.ErrNotFound. Errors are
// *backend.OpError naming backendName.
func Get[M any](root, backendName, id string) (string, error) {
	if !ValidID(id) {
		return "", &backend.OpError{Op: "get", Backend: backendName, Sandbox: id, Err: backend.ErrNotFound}
	}
	dir := filepath.Join(root, id)
	if _, err := Read[M](dir); err != nil {
		if _, half := HalfInfo(dir, backendName); half && errors.Is(err, backend.ErrNotFound) {
			return dir, nil // half made or removed: Destroy finishes it
		}
		return "", &backend.OpError{Op: "get", Backend: backendName, Sandbox: id, Err: err}
	}
	return dir, nil
}

// Labels is what Info reports as the labels of the sandbox i describes:
// those it was made with (extra) and sandboxkit's, from i's ID and Backend
// and, when set, its Name, Session, Owner and ExpiresAt.
func Labels(extra map[string]string, i backend.Info) map[string]string {
	labels := maps.Clone(extra)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[backend.LabelID] = i.ID
	labels[backend.LabelBackend] = i.Backend
	set := func(k, v string) {
		if v != "" {
			labels[k] = v
		}
	}
	set(backend.LabelName, i.Name)
	set(backend.LabelSession, i.Session)
	set(backend.LabelOwner, i.Owner)
	if !i.ExpiresAt.IsZero() {
		labels[backend.LabelExpiresAt] = i.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return labels
}

// WriteMeta replaces dir's record with v atomically.
func WriteMeta(dir string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, MetaFile), data)
}

// WriteFileAtomic writes data to a temporary file beside p and renames it
// over p, so a reader sees the old or the new content, never a mix (see
// package atomicfile, which the agent's egress enforcer shares).
func WriteFileAtomic(p string, data []byte) error { return atomicfile.Write(p, data) }

// IDs lists the sandbox folders under root, sorted.
func IDs(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// List is a backend's List for the sandboxes under root: it reads the
// record (of type M) of each and returns info of those whose Info matches
// filter, sorted by ID. Folders without a record are half made or half
// removed: listed as removing (HalfInfo) once older than HalfGrace.
// Records that cannot be read (damaged) are skipped. Errors are
// *backend.OpError naming backendName.
func List[M any](root, backendName string, filter backend.Filter, info func(*M) backend.Info) ([]backend.Info, error) {
	ids, err := IDs(root)
	if err != nil {
		return nil, &backend.OpError{Op: "list", Backend: backendName, Err: err}
	}
	var out []backend.Info
	for _, id := range ids {
		m, err := Read[M](filepath.Join(root, id))
		if errors.Is(err, backend.ErrNotFound) {
			if i, half := HalfInfo(filepath.Join(root, id), backendName); half && filter.Match(i) {
				out = append(out, i)
			}
			continue
		}
		if err != nil {
			continue
		}
		if i := info(m); filter.Match(i) {
			out = append(out, i)
		}
	}
	slices.SortFunc(out, func(a, b backend.Info) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Lifecycle is the part of a record that says where the sandbox is in its
// life, shared by every backend using this package; embed it in the
// record. The protocol that keeps half-made and half-removed sandboxes
// visible (so List, Get, Destroy, sbx rm and sbx gc finish them):
//
//   - Create writes the record, with Creator set, before it makes anything
//     else, and clears Creator once the sandbox is complete;
//   - Destroy marks the record Removing first (MarkRemoving), removes
//     everything else, and the record last (RemoveDir);
//   - a folder with no record at all (a Create killed before its first
//     write, or a Destroy killed between its last two steps) is listed as
//     removing once it is older than HalfGrace, and Get finds it.
type Lifecycle struct {
	// Creator is the process creating the sandbox (an owner string) while
	// Create runs; "" once the sandbox is complete.
	Creator string `json:"creator,omitempty"`
	// Removing says Destroy began.
	Removing bool `json:"removing,omitempty"`
	// Batch, with Creator, names the batch of sandboxes made together
	// that HandOver hands over at once (see handover.go); "" otherwise.
	Batch string `json:"batch,omitempty"`
}

func (l *Lifecycle) lifecycle() *Lifecycle { return l }

// State is the backend.State the lifecycle says, or "" when the sandbox is
// complete (the backend then tells running from exited).
func (l Lifecycle) State() backend.State {
	switch {
	case l.Removing:
		return backend.StateRemoving
	case l.Creator != "":
		return backend.StateCreating
	}
	return ""
}

// Label adds the lifecycle's labels to labels (LabelCreator while
// creating).
func (l Lifecycle) Label(labels map[string]string) {
	if l.Creator != "" && !l.Removing {
		labels[backend.LabelCreator] = l.Creator
	}
}

// HalfGrace is how old a sandbox folder without a record must be before
// List shows it (as removing): younger, it may be a Create between making
// the folder and writing the record.
const HalfGrace = 10 * time.Second

// MarkRemoving sets Removing in dir's record, whatever the record's type,
// under Update's lock. A folder without a record is left as it is.
func MarkRemoving(dir string) error {
	unlock, err := lock(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	p := filepath.Join(dir, MetaFile)
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if rec["removing"] == true {
		return nil
	}
	rec["removing"] = true
	return WriteMeta(dir, rec)
}

// RemoveDir removes a sandbox folder with its record last, so that until
// the very end the sandbox stays visible: remove (RemoveAll when nil) is
// called on each other entry, then the record and the folder go.
func RemoveDir(dir string, remove func(string) error) error {
	// A process of the sandbox that was dying as it was killed (or a
	// host-side writer finishing for one) can still create a file while
	// the folder is removed: go over it again a few times.
	var err error
	for try := 0; try < 5; try++ {
		if err = removeDirOnce(dir, remove); !errors.Is(err, syscall.ENOTEMPTY) {
			return err
		}
	}
	return err
}

func removeDirOnce(dir string, remove func(string) error) error {
	if remove == nil {
		remove = os.RemoveAll
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == MetaFile {
			continue
		}
		if err := remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, MetaFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// HalfInfo describes a folder without a record: a sandbox half made or
// half removed, which Destroy finishes. ok is false for a folder too young
// to tell (see HalfGrace) or that is gone.
func HalfInfo(dir, backendName string) (backend.Info, bool) {
	fi, err := os.Stat(dir)
	if err != nil || time.Since(fi.ModTime()) < HalfGrace {
		return backend.Info{}, false
	}
	i := backend.Info{ID: filepath.Base(dir), Backend: backendName, State: backend.StateRemoving, CreatedAt: fi.ModTime()}
	i.Labels = Labels(nil, i)
	return i, true
}

// Update changes sandbox id's record (of type M) under root with fn,
// holding an exclusive lock on the sandbox's folder, so that concurrent
// read-modify-write updates from any process (SetLabels, Claim) never lose
// one another's changes. fn's error leaves the record as it was. An ID of
// another shape, or without a record, is backend.ErrNotFound.
func Update[M any](root, id string, fn func(*M) error) error {
	if !ValidID(id) {
		return backend.ErrNotFound
	}
	dir := filepath.Join(root, id)
	unlock, err := lock(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return backend.ErrNotFound
	}
	if err != nil {
		return err
	}
	defer unlock()
	m, err := Read[M](dir)
	if err != nil {
		return err
	}
	if err := fn(m); err != nil {
		return err
	}
	return WriteMeta(dir, m)
}

// lock takes the exclusive lock on the sandbox folder dir that every
// read-modify-write of its record holds (an flock, so it works across
// processes and ends with the process). It is not reentrant: a second
// lock of the same folder waits for the first, in this process too.
func lock(dir string) (unlock func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// SetLabels is a Labeler's SetLabels for the sandboxes under root: it
// changes the labels of sandbox id's record (an empty value removes one)
// through labelsOf, which returns the record's label map (allocating it
// when nil). sandboxkit's own labels kept as record fields cannot be set.
func SetLabels[M any](root, backendName, id string, set map[string]string, labelsOf func(*M) *map[string]string) error {
	opErr := func(err error) error {
		return &backend.OpError{Op: "set labels", Backend: backendName, Sandbox: id, Err: err}
	}
	for k := range set {
		switch k {
		case backend.LabelID, backend.LabelBackend, backend.LabelName, backend.LabelSession,
			backend.LabelOwner, backend.LabelExpiresAt, backend.LabelCreator:
			return opErr(fmt.Errorf("%w: label %s is kept by the backend itself", backend.ErrInvalidConfig, k))
		}
	}
	err := Update(root, id, func(m *M) error {
		labels := labelsOf(m)
		if *labels == nil {
			*labels = map[string]string{}
		}
		for k, v := range set {
			if v == "" {
				delete(*labels, k)
			} else {
				(*labels)[k] = v
			}
		}
		return nil
	})
	if err != nil {
		return opErr(err)
	}
	return nil
}

// ClaimFields are the parts of a record a claim changes.
type ClaimFields struct {
	Labels         *map[string]string
	Owner, Session *string
	ExpiresAt      *time.Time
	Removing       bool // the record says the sandbox is being removed
	Info           func() backend.Info
}

// Claim is a backend.Claimer's Claim for the sandboxes under root: under
// Update's lock it checks the member's pool state and applies c to the
// fields fields returns, then reports the record's Info.
func Claim[M any](root, backendName, id string, c backend.Claim, fields func(*M) ClaimFields) (backend.Info, error) {
	var info backend.Info
	err := Update(root, id, func(m *M) error {
		f := fields(m)
		if f.Removing {
			return backend.ErrClaimed
		}
		if err := backend.ApplyClaim(f.Labels, f.Owner, f.Session, f.ExpiresAt, c, time.Now()); err != nil {
			return err
		}
		info = f.Info()
		return nil
	})
	if err != nil {
		return backend.Info{}, &backend.OpError{Op: "claim", Backend: backendName, Sandbox: id, Err: err}
	}
	return info, nil
}
