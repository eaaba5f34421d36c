package statedir

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
)

// Several sandboxes made by one call (a fork of n) are handed to the
// caller together: a process killed while it clears their Creator one
// record at a time must not leave some complete (kept by sbx gc) and the
// rest being made (reaped), so that the caller, who got none of them,
// finds half. Each record of such a call carries the same Lifecycle.Batch
// from the start; HandOver first creates the batch's mark (one file, the
// single step that hands all of them over), then clears Creator and Batch
// in each record, then removes the mark. Read treats a record whose
// batch is marked as complete, so a kill anywhere leaves all of the batch
// being made or all of it complete.

// handedPrefix starts a mark's name: a file beside the sandbox folders
// (IDs takes only folders named by an ID), so that no folder is left
// behind once the last mark goes.
const handedPrefix = ".handed-"

func handedMark(root, batch string) string { return filepath.Join(root, handedPrefix+batch) }

// NewBatch returns a new batch token for Lifecycle.Batch.
func NewBatch() (string, error) { return NewID() }

// HandOver makes the records of ids under root, all written with
// Lifecycle.Batch batch, complete together (see above). A batch of one
// record needs no token (batch ""): its Creator is cleared.
func HandOver[M any](root, batch string, ids []string) error {
	if batch == "" && len(ids) == 1 {
		return Update(root, ids[0], func(m *M) error {
			if l, ok := any(m).(interface{ lifecycle() *Lifecycle }); ok {
				l.lifecycle().Creator = ""
			}
			return nil
		})
	}
	if !ValidID(batch) {
		return errors.New("statedir: hand-over of a batch with a malformed token " + batch)
	}
	if err := WriteFileAtomic(handedMark(root, batch), nil); err != nil {
		return err
	}
	for _, id := range ids {
		// Read clears Creator and Batch now that the mark exists; Update
		// writes that down.
		if err := Update(root, id, func(*M) error { return nil }); err != nil && !errors.Is(err, backend.ErrNotFound) {
			return err
		}
	}
	if err := os.Remove(handedMark(root, batch)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// settle clears the Creator and Batch of record m, read from the folder
// of a sandbox under root, when its batch was handed over.
func settle(root string, m any) {
	l, ok := m.(interface{ lifecycle() *Lifecycle })
	if !ok {
		return
	}
	lc := l.lifecycle()
	if lc.Batch == "" || lc.Creator == "" || !ValidID(lc.Batch) {
		return
	}
	if _, err := os.Lstat(handedMark(root, lc.Batch)); err == nil {
		lc.Creator, lc.Batch = "", ""
	}
}

// PruneBatches removes the marks that no record's batch names any more
// (a HandOver killed after it rewrote every record); with dryRun it only
// names them.
func PruneBatches(root string, dryRun bool) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids, err := IDs(root)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{}
	for _, id := range ids {
		// The record as written: Read would hide the batch once marked.
		data, err := os.ReadFile(filepath.Join(root, id, MetaFile))
		if err != nil {
			continue
		}
		var rec struct {
			Batch string `json:"batch"`
		}
		if json.Unmarshal(data, &rec) == nil && rec.Batch != "" {
			named[rec.Batch] = true
		}
	}
	var names []string
	for _, e := range entries {
		batch, ok := strings.CutPrefix(e.Name(), handedPrefix)
		if !ok || e.IsDir() || named[batch] {
			continue
		}
		names = append(names, "hand-over mark "+batch)
		if dryRun {
			continue
		}
		if err := os.Remove(filepath.Join(root, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return names, err
		}
	}
	return names, nil
}
