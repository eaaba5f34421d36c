package opensandboxtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// abs resolves a path as execd does: relative to execd's own directory.
func (sb *sandbox) abs(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(sb.dir, p)
}

// fileError answers for a failed file operation as execd's
// handleFileError does.
func fileError(w http.ResponseWriter, err error) {
	if errors.Is(err, fs.ErrNotExist) {
		writeExecdError(w, http.StatusNotFound, codeFileNotFound, fmt.Sprintf("file not found. %v", err))
		return
	}
	writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error accessing file: %v", err))
}

func fileType(fi os.FileInfo) string {
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return "symlink"
	case fi.IsDir():
		return "directory"
	case fi.Mode().IsRegular():
		return "file"
	}
	return "other"
}

// octal writes a permission as execd does: octal digits read as decimal.
func octal(m fs.FileMode) int {
	n, _ := strconv.Atoi(strconv.FormatUint(uint64(m.Perm()), 8))
	return n
}

func fileInfoJSON(p string, fi os.FileInfo) map[string]any {
	owner, group := "", ""
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner, group = strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
		if g, err := user.LookupGroupId(group); err == nil {
			group = g.Name
		}
	}
	return map[string]any{
		"path": p, "type": fileType(fi), "size": fi.Size(),
		"modified_at": fi.ModTime().Format(time.RFC3339Nano), "created_at": fi.ModTime().Format(time.RFC3339Nano),
		"owner": owner, "group": group, "mode": octal(fi.Mode()),
	}
}

// filesInfo describes paths without following symlinks (execd uses
// os.Lstat).
func (sb *sandbox) filesInfo(w http.ResponseWriter, r *http.Request) {
	resp := map[string]any{}
	for _, p := range r.URL.Query()["path"] {
		fi, err := os.Lstat(sb.abs(p))
		if err != nil {
			fileError(w, err)
			return
		}
		resp[p] = fileInfoJSON(sb.abs(p), fi)
	}
	writeJSON(w, http.StatusOK, resp)
}

func (sb *sandbox) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeExecdError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	f, err := os.Open(sb.abs(p))
	if err != nil {
		fileError(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error getting file stat info: %s. %v", p, err))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
}

type fileMeta struct {
	Path  string `json:"path"`
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

// upload reads metadata/file part pairs. Like execd (which reads the parts
// as form files), it ignores a metadata part without a filename.
func (sb *sandbox) upload(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeExecdError(w, http.StatusBadRequest, codeInvalidFile, "multipart form is empty")
		return
	}
	var meta *fileMeta
	files := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			writeExecdError(w, http.StatusBadRequest, codeInvalidFile, "reading the multipart form: "+err.Error())
			return
		}
		if part.FileName() == "" {
			continue // a form value, not a file
		}
		switch part.FormName() {
		case "metadata":
			var m fileMeta
			if err := json.NewDecoder(part).Decode(&m); err != nil {
				writeExecdError(w, http.StatusBadRequest, codeInvalidFileMD, fmt.Sprintf("invalid metadata format. %v", err))
				return
			}
			if m.Path == "" {
				writeExecdError(w, http.StatusBadRequest, codeInvalidFileMD, "metadata path is empty")
				return
			}
			meta = &m
		case "file":
			if meta == nil {
				writeExecdError(w, http.StatusBadRequest, codeInvalidFileMD, "metadata file is missing")
				return
			}
			if status, code, msg := sb.writeUpload(*meta, part); status != 0 {
				writeExecdError(w, status, code, msg)
				return
			}
			meta = nil
			files++
		}
	}
	if files == 0 {
		writeExecdError(w, http.StatusBadRequest, codeInvalidFileMD, "metadata file is missing")
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (sb *sandbox) writeUpload(meta fileMeta, content io.Reader) (int, string, string) {
	target := sb.abs(meta.Path)
	if err := os.MkdirAll(filepath.Dir(target), os.ModePerm); err != nil {
		return http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error creating target directory %s. %v", filepath.Dir(target), err)
	}
	dst, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.ModePerm)
	if err != nil {
		return http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error opening destination file %s. %v", target, err)
	}
	if _, err := io.Copy(dst, content); err != nil {
		dst.Close()
		return http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error copying file %s. %v", target, err)
	}
	dst.Close()
	if err := chmodFile(target, meta.Mode, meta.Owner, meta.Group); err != nil {
		return http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error chmoding file %s. %v", target, err)
	}
	return 0, "", ""
}

// chmodFile applies an execd permission: mode (skipped when 0), then owner
// and group by name (execd's own user when neither resolves).
func chmodFile(p string, mode int, owner, group string) error {
	if mode != 0 {
		m, err := strconv.ParseUint(strconv.Itoa(mode), 8, 32)
		if err != nil {
			return err
		}
		if err := os.Chmod(p, fs.FileMode(m)); err != nil {
			return err
		}
	}
	uid, gid := -1, -1
	if u, err := user.Lookup(owner); owner != "" && err == nil {
		uid, _ = strconv.Atoi(u.Uid)
	}
	if g, err := user.LookupGroup(group); group != "" && err == nil {
		gid, _ = strconv.Atoi(g.Gid)
	}
	if uid == -1 && gid == -1 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	return os.Chown(p, uid, gid)
}

func (sb *sandbox) rename(w http.ResponseWriter, r *http.Request) {
	var items []struct {
		Src  string `json:"src"`
		Dest string `json:"dest"`
	}
	if err := json.NewDecoder(r.Body).Decode(&items); err != nil {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	for _, it := range items {
		src, dest := sb.abs(it.Src), sb.abs(it.Dest)
		if _, err := os.Stat(src); err != nil {
			fileError(w, fmt.Errorf("source path not found: %s: %w", it.Src, err))
			return
		}
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			fileError(w, err)
			return
		}
		if _, err := os.Stat(dest); err == nil {
			fileError(w, fmt.Errorf("destination path already exists: %s", it.Dest))
			return
		}
		if err := os.Rename(src, dest); err != nil {
			fileError(w, err)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

type permission struct {
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

func (sb *sandbox) chmod(w http.ResponseWriter, r *http.Request) {
	var req map[string]permission
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	for p, perm := range req {
		if err := chmodFile(sb.abs(p), perm.Mode, perm.Owner, perm.Group); err != nil {
			writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error changing permissions for %s. %v", p, err))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (sb *sandbox) removeFiles(w http.ResponseWriter, r *http.Request) {
	for _, p := range r.URL.Query()["path"] {
		fi, err := os.Stat(sb.abs(p))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && fi.IsDir() {
			err = fmt.Errorf("path is a directory: %s", p)
		}
		if err == nil {
			err = os.Remove(sb.abs(p))
		}
		if err != nil {
			writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error removing file %s. %v", p, err))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// search lists regular files below path whose base name matches pattern.
func (sb *sandbox) search(w http.ResponseWriter, r *http.Request) {
	root := r.URL.Query().Get("path")
	if root == "" {
		writeExecdError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	root = sb.abs(root)
	if _, err := os.Stat(root); err != nil {
		fileError(w, err)
		return
	}
	pattern := r.URL.Query().Get("pattern")
	if pattern == "" || pattern == "**" {
		pattern = "*"
	}
	out := []map[string]any{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return nil
		}
		ok, err := filepath.Match(pattern, fi.Name())
		if err != nil {
			return fmt.Errorf("invalid pattern %s: %w", pattern, err)
		}
		if ok {
			out = append(out, fileInfoJSON(p, fi))
		}
		return nil
	})
	if err != nil {
		writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error searching files. %v", err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// listDir lists a directory to the given depth, in lexical order, without
// following symlinks; a path that is a symlink is refused.
func (sb *sandbox) listDir(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeExecdError(w, http.StatusBadRequest, codeMissingQuery, "missing query parameter 'path'")
		return
	}
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, "depth must be a non-negative integer")
			return
		}
		depth = n
	}
	root := sb.abs(p)
	fi, err := os.Lstat(root)
	switch {
	case err != nil:
		fileError(w, err)
		return
	case fi.Mode()&os.ModeSymlink != 0:
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("path is a symbolic link: %s", p))
		return
	case !fi.IsDir():
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("path is not a directory: %s", p))
		return
	}
	out := []map[string]any{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			full := filepath.Join(dir, e.Name())
			info, err := os.Lstat(full)
			if err != nil {
				continue
			}
			out = append(out, fileInfoJSON(full, info))
			if info.IsDir() && level < depth {
				if err := walk(full, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if depth > 0 {
		if err := walk(root, 1); err != nil {
			fileError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (sb *sandbox) makeDirs(w http.ResponseWriter, r *http.Request) {
	var req map[string]permission
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeExecdError(w, http.StatusBadRequest, codeInvalidRequest, fmt.Sprintf("error parsing request, MAYBE invalid body format. %v", err))
		return
	}
	for p, perm := range req {
		dir := sb.abs(p)
		_, statErr := os.Stat(dir)
		if err := os.MkdirAll(dir, os.ModePerm); err != nil {
			fileError(w, err)
			return
		}
		if statErr != nil {
			if err := chmodFile(dir, perm.Mode, perm.Owner, perm.Group); err != nil {
				fileError(w, err)
				return
			}
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (sb *sandbox) removeDirs(w http.ResponseWriter, r *http.Request) {
	for _, p := range r.URL.Query()["path"] {
		if err := os.RemoveAll(sb.abs(p)); err != nil {
			writeExecdError(w, http.StatusInternalServerError, codeRuntimeError, fmt.Sprintf("error removing directory %s. %v", p, err))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
