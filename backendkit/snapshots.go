package backendkit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/procfs"
	"github.com/sandboxkit/sandboxkit/internal/statedir"
)

// SnapshotPrefix starts the image reference of a snapshot: Spec.Image
// "snapshot:NAME" starts a sandbox from snapshot NAME.
const SnapshotPrefix = "snapshot:"

// SnapshotTempPrefix begins the name of a file or folder that a Snapshot
// fills before renaming it into place: .snapshot-<pid>.<start>-, naming
// its maker (process ID and start time), so that a backend's PruneCaches
// can remove what a Snapshot killed on the way left (SnapshotTempGone),
// at any age, and leave what a live one is still writing.
const SnapshotTempPrefix = ".snapshot-"

// SnapshotTempPattern is the pattern (for os.MkdirTemp or os.CreateTemp)
// of a snapshot temporary made by this process.
func SnapshotTempPattern() string {
	start, _ := procfs.StartTime(os.Getpid())
	return fmt.Sprintf("%s%d.%d-", SnapshotTempPrefix, os.Getpid(), start)
}

// SnapshotTempGone reports whether name is a snapshot temporary whose
// maker is gone. Other names (an older sandboxkit's temporaries, which
// named no maker) are not.
func SnapshotTempGone(name string) bool {
	rest, ok := strings.CutPrefix(name, SnapshotTempPrefix)
	maker, _, ok2 := strings.Cut(rest, "-")
	pidStr, startStr, ok3 := strings.Cut(maker, ".")
	pid, err1 := strconv.Atoi(pidStr)
	start, err2 := strconv.ParseUint(startStr, 10, 64)
	if !ok || !ok2 || !ok3 || err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	return !procfs.Alive(pid, start)
}

// SnapshotName is the name in a snapshot reference (ref without
// SnapshotPrefix).
func SnapshotName(ref string) string { return strings.TrimPrefix(ref, SnapshotPrefix) }

// SnapshotRecord is a snapshot name's record: what the name points at (Key:
// the backend's folder or archive of the snapshot's files) and what
// ListSnapshots reports.
type SnapshotRecord struct {
	Name      string            `json:"name"`
	Key       string            `json:"key"`
	Base      string            `json:"base,omitempty"`
	Size      int64             `json:"size"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
}

// Snapshot is the record as the contract reports it.
func (r *SnapshotRecord) Snapshot() backend.Snapshot {
	return backend.Snapshot{Ref: SnapshotPrefix + r.Name, Base: r.Base, Size: r.Size,
		Labels: maps.Clone(r.Labels), CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}

// SnapshotNames is a folder of snapshot name records, one JSON file per
// name, named by the SHA-256 of the name (a name may hold any character).
// Each write replaces a record atomically, so a reader sees the old record
// or the new one, and a kill at any moment leaves one of them.
type SnapshotNames string

// Path is the file of name's record.
func (d SnapshotNames) Path(name string) string {
	h := sha256.Sum256([]byte(name))
	return filepath.Join(string(d), hex.EncodeToString(h[:])+".json")
}

// Read returns name's record, or an error wrapping backend.ErrNotFound.
func (d SnapshotNames) Read(name string) (*SnapshotRecord, error) {
	data, err := os.ReadFile(d.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: image %q: no such snapshot", backend.ErrNotFound, SnapshotPrefix+name)
	}
	if err != nil {
		return nil, err
	}
	var r SnapshotRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("snapshot %q: %w", name, err)
	}
	return &r, nil
}

// Write creates or replaces r.Name's record, making the folder if needed.
func (d SnapshotNames) Write(r *SnapshotRecord) error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return statedir.WriteFileAtomic(d.Path(r.Name), data)
}

// Remove removes name's record; a missing one is not an error.
func (d SnapshotNames) Remove(name string) error {
	if err := os.Remove(d.Path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// All returns every readable record (files that are not records, or that
// a crash left unreadable, are passed over).
func (d SnapshotNames) All() ([]*SnapshotRecord, error) {
	entries, err := os.ReadDir(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*SnapshotRecord
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(string(d), e.Name()))
		if err != nil {
			continue
		}
		var r SnapshotRecord
		if json.Unmarshal(data, &r) == nil && r.Name != "" {
			out = append(out, &r)
		}
	}
	return out, nil
}

// List is ListSnapshots for the backend named backendName: the snapshots
// whose labels match filter.
func (d SnapshotNames) List(backendName string, filter backend.Filter) ([]backend.Snapshot, error) {
	recs, err := d.All()
	if err != nil {
		return nil, &backend.OpError{Op: "list snapshots", Backend: backendName, Err: err}
	}
	var out []backend.Snapshot
	for _, r := range recs {
		if filter.MatchLabels(r.Labels) {
			out = append(out, r.Snapshot())
		}
	}
	return out, nil
}

// NewSnapshotRecord is the record of snapshot name (its files under key)
// of sandbox id, taken at now by backend backendName for req: req's labels
// and the backend's own (which sandbox, backend and session it came from,
// and when it expires when req has a TTL), which win on clashes.
func NewSnapshotRecord(backendName, id, session, name, key string, now time.Time, req backend.SnapshotRequest) *SnapshotRecord {
	r := &SnapshotRecord{Name: name, Key: key, CreatedAt: now, Labels: maps.Clone(req.Labels)}
	if r.Labels == nil {
		r.Labels = map[string]string{}
	}
	r.Labels[backend.LabelSnapshotOf] = id
	r.Labels[backend.LabelBackend] = backendName
	if session != "" {
		r.Labels[backend.LabelSession] = session
	}
	if req.TTL > 0 {
		r.ExpiresAt = now.Add(req.TTL)
		r.Labels[backend.LabelExpiresAt] = r.ExpiresAt.Format(time.RFC3339)
	}
	return r
}
