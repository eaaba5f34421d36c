package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/internal/hostfs"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

func (s *Server) handleStat(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("path")
	stat := os.Stat
	if r.URL.Query().Get("lstat") == "1" {
		stat = os.Lstat
	}
	fi, err := stat(name)
	if err != nil {
		writeError(w, "stat", name, err)
		return
	}
	writeJSON(w, sbxdwire.FileInfoOf(fi))
}

func (s *Server) handleReadDir(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("path")
	entries, err := os.ReadDir(name)
	if err != nil {
		writeError(w, "readdir", name, err)
		return
	}
	infos := make([]sbxdwire.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		infos = append(infos, sbxdwire.FileInfoOf(fi))
	}
	writeJSON(w, infos)
}

// readRange is what part of a file the read route sends.
type readRange struct {
	offset, length int64 // bytes; length < 0: to the end
	line, lines    int   // 1-based first line and count (0: to the end); line 0: no line range
}

func parseRange(q map[string][]string) (readRange, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	rr := readRange{length: -1}
	var err error
	num := func(k string, dst *int64) {
		if v := get(k); v != "" && err == nil {
			*dst, err = strconv.ParseInt(v, 10, 64)
			if err == nil && *dst < 0 && k != "length" {
				err = fmt.Errorf("%s must not be negative", k)
			}
		}
	}
	var line, lines int64
	num("offset", &rr.offset)
	num("length", &rr.length)
	num("line", &line)
	num("lines", &lines)
	if err != nil {
		return rr, errors.Join(sbxdwire.ErrInvalid, err)
	}
	rr.line, rr.lines = int(line), int(lines)
	if rr.line > 0 && (rr.offset != 0 || rr.length >= 0) {
		return rr, fmt.Errorf("%w: a byte range and a line range cannot be combined", sbxdwire.ErrInvalid)
	}
	return rr, nil
}

func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("path")
	rr, err := parseRange(r.URL.Query())
	if err != nil {
		writeError(w, "read", name, err)
		return
	}
	// Regular files only: a named pipe would hold the call (and a thread
	// of the agent, blocked in open) until a writer came.
	f, fi, err := hostfs.OpenRegular("read", name)
	if err != nil {
		writeError(w, "read", name, err)
		return
	}
	defer f.Close()
	var src io.Reader = f
	if rr.offset > 0 {
		if _, err := f.Seek(rr.offset, io.SeekStart); err != nil {
			// Not seekable (a pipe): skip by reading.
			if _, err := io.CopyN(io.Discard, f, rr.offset); err != nil && err != io.EOF {
				writeError(w, "read", name, err)
				return
			}
		}
	}
	if rr.length >= 0 {
		src = io.LimitReader(src, rr.length)
	}
	if fi.Mode().IsRegular() && rr.line == 0 {
		size := fi.Size() - rr.offset
		if rr.length >= 0 {
			size = min(size, rr.length)
		}
		w.Header().Set(sbxdwire.HdrSize, strconv.FormatInt(max(size, 0), 10))
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if rr.line > 0 {
		sbxdwire.CopyLines(w, f, rr.line, rr.lines)
		return
	}
	sbxdwire.CopyBuffered(w, src)
}

// writeTarget resolves where a write of name lands: a symlink is followed
// (a dangling one too: the write creates its target); a directory there is
// an error; missing parents are made.
func writeTarget(name string) (string, error) {
	p, err := hostfs.FollowLinks("write", name)
	if err != nil {
		return "", err
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return "", &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

func (s *Server) handlePrepare(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.PrepareRequest
	if !readJSON(w, r, "write", &req) {
		return
	}
	target, err := writeTarget(req.Path)
	if err != nil {
		writeError(w, "write", req.Path, err)
		return
	}
	var b [6]byte
	rand.Read(b[:])
	tmp := filepath.Join(filepath.Dir(target), "."+filepath.Base(target)+".sbxd-"+hex.EncodeToString(b[:]))
	writeJSON(w, sbxdwire.PrepareResult{Target: target, Tmp: tmp})
}

// writeFileAtomic replaces name with r's bytes: a temporary file in the same
// directory is renamed over it, so a reader never sees half a file. A
// symlink at name is followed; missing parents are made.
func writeFileAtomic(name string, r io.Reader, perm fs.FileMode) error {
	p, err := writeTarget(name)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(p)+".sbxd-*")
	if err != nil {
		return err
	}
	_, err = sbxdwire.CopyBuffered(tmp, r)
	if err == nil {
		err = tmp.Chmod(perm.Perm())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

func (s *Server) handleWrite(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("path")
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if err != nil || name == "" {
		writeError(w, "write", name, fmt.Errorf("%w: want path and an octal mode", sbxdwire.ErrInvalid))
		return
	}
	if err := writeFileAtomic(name, r.Body, fs.FileMode(mode)); err != nil {
		writeError(w, "write", name, err)
		return
	}
	writeJSON(w, struct{}{})
}

func (s *Server) handleMkdir(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.MkdirRequest
	if !readJSON(w, r, "mkdir", &req) {
		return
	}
	mode := req.Mode.Perm()
	if mode == 0 {
		mode = 0o755
	}
	var err error
	if req.Parents {
		err = os.MkdirAll(req.Path, mode)
	} else {
		err = os.Mkdir(req.Path, mode)
	}
	if err != nil {
		writeError(w, "mkdir", req.Path, err)
		return
	}
	writeJSON(w, struct{}{})
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.RemoveRequest
	if !readJSON(w, r, "remove", &req) {
		return
	}
	_, err := os.Lstat(req.Path)
	if err == nil {
		if req.Recursive {
			err = os.RemoveAll(req.Path)
		} else {
			err = os.Remove(req.Path)
		}
	}
	if err != nil {
		writeError(w, "remove", req.Path, err)
		return
	}
	writeJSON(w, struct{}{})
}

func (s *Server) handleMove(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.MoveRequest
	if !readJSON(w, r, "move", &req) {
		return
	}
	if _, err := os.Lstat(req.From); err != nil {
		writeError(w, "move", req.From, err)
		return
	}
	if !req.Overwrite {
		if _, err := os.Lstat(req.To); err == nil {
			writeError(w, "move", req.To, &fs.PathError{Op: "move", Path: req.To, Err: fs.ErrExist})
			return
		}
	}
	if err := os.Rename(req.From, req.To); err != nil {
		writeError(w, "move", req.From, err)
		return
	}
	writeJSON(w, struct{}{})
}

// maxEditSize bounds the files Edit changes (they are held in memory).
const maxEditSize = 64 << 20

// editFile replaces old with new in name: exactly one occurrence, or all of
// them with all. The file keeps its mode; a symlink keeps pointing at it.
func editFile(name, old, new string, all bool) (int, error) {
	if old == "" {
		return 0, fmt.Errorf("%w: the old string is empty", sbxdwire.ErrInvalid)
	}
	if old == new {
		return 0, fmt.Errorf("%w: the old and new strings are identical", sbxdwire.ErrInvalid)
	}
	p := name
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	f, fi, err := hostfs.OpenRegular("edit", p)
	if err != nil {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			pe.Path = name
		}
		return 0, err
	}
	defer f.Close()
	if fi.Size() > maxEditSize {
		return 0, fmt.Errorf("%w: %s is larger than %d MiB", sbxdwire.ErrInvalid, name, maxEditSize>>20)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxEditSize+1))
	if err != nil {
		return 0, err
	}
	if len(data) > maxEditSize {
		return 0, fmt.Errorf("%w: %s is larger than %d MiB", sbxdwire.ErrInvalid, name, maxEditSize>>20)
	}
	n := bytes.Count(data, []byte(old))
	switch {
	case n == 0:
		return 0, sbxdwire.ErrEditNoMatch
	case n > 1 && !all:
		return n, &sbxdwire.NotUniqueError{Count: n}
	}
	limit := 1
	if all {
		limit = -1
	}
	out := strings.Replace(string(data), old, new, limit)
	return n, writeFileAtomic(p, strings.NewReader(out), fi.Mode())
}

func (s *Server) handleEdit(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.EditRequest
	if !readJSON(w, r, "edit", &req) {
		return
	}
	n, err := editFile(req.Path, req.Old, req.New, req.ReplaceAll)
	if err != nil {
		writeError(w, "edit", req.Path, err)
		return
	}
	writeJSON(w, sbxdwire.EditResult{Replaced: n})
}
