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
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
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
// over p, so a reader sees the old or the new content, never a mix.
func WriteFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

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
// filter, sorted by ID. Records that cannot be read (a sandbox being
// created or destroyed right now, or damaged) are skipped. Errors are
// *backend.OpError naming backendName.
func List[M any](root, backendName string, filter backend.Filter, info func(*M) backend.Info) ([]backend.Info, error) {
	ids, err := IDs(root)
	if err != nil {
		return nil, &backend.OpError{Op: "list", Backend: backendName, Err: err}
	}
	var out []backend.Info
	for _, id := range ids {
		m, err := Read[M](filepath.Join(root, id))
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
