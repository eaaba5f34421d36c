package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// execd's files and directories API over a backend sandbox: contents move
// through sbfiles.ReadFile and WriteFile (sbxd's file calls where it
// runs), everything else is a short sh script using POSIX tools (stat, find,
// mv, chmod, chown, rm, mkdir: coreutils or busybox).

// Exit codes of the scripts.
const (
	exitMissing = 44 // a path does not exist
	exitExists  = 45 // the destination exists
	exitIsDir   = 46 // a directory where a file is needed
	exitSymlink = 47 // a symlink where a directory is needed
	exitNotDir  = 48 // not a directory
)

// osbStatFormat is stat -c's format for execd's file info (lstat: no -L).
const osbStatFormat = "%f %s %Y %U %G"

// osbStatScript stats "$@" after checking each exists ($1: the batch
// script, $2: the format).
const osbStatScript = `s=$1 f=$2
shift 2
for p do [ -e "$p" ] || [ -L "$p" ] || { printf '%s\n' "$p" >&2; exit 44; }; done
exec sh -c "$s" sh "$f" "$@"`

// script runs an sh script with args in the sandbox.
func (x *osbExecd) script(ctx context.Context, script string, args ...string) (backend.ExecResult, error) {
	return x.sb.Exec(ctx, backend.ExecRequest{Cmd: append([]string{"sh", "-c", script, "sh"}, args...), Timeout: 5 * time.Minute})
}

// scriptFailed answers for a script that did not exit 0.
func scriptFailed(w http.ResponseWriter, what string, res backend.ExecResult) {
	msg := strings.TrimSpace(string(res.Stderr))
	switch res.ExitCode {
	case exitMissing:
		osbExecdError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found: %s", msg)
	case exitExists:
		osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "destination path already exists: %s", msg)
	case exitIsDir:
		osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "path is a directory: %s", msg)
	case exitSymlink:
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "path is a symbolic link: %s", msg)
	case exitNotDir:
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "path is not a directory: %s", msg)
	default:
		osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "%s failed (exit %d): %s", what, res.ExitCode, msg)
	}
}

// fileJSON is execd's FileInfo from a stat record ("%f %s %Y %U %G PATH").
func fileJSON(record string) (map[string]any, error) {
	f := strings.SplitN(record, " ", 6)
	if len(f) != 6 {
		return nil, fmt.Errorf("unexpected stat output %q", record)
	}
	raw, err1 := strconv.ParseUint(f[0], 16, 32)
	size, err2 := strconv.ParseInt(f[1], 10, 64)
	mtime, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("unexpected stat output %q: %w", record, err)
	}
	mode := sbfiles.ModeFromUnix(uint32(raw))
	typ := "other"
	switch {
	case mode&fs.ModeSymlink != 0:
		typ = "symlink"
	case mode.IsDir():
		typ = "directory"
	case mode.IsRegular():
		typ = "file"
	}
	perm, _ := strconv.Atoi(strconv.FormatUint(uint64(mode.Perm()), 8))
	t := time.Unix(mtime, 0).UTC().Format(time.RFC3339Nano)
	return map[string]any{
		"path": f[5], "type": typ, "size": size, "modified_at": t, "created_at": t,
		"owner": f[3], "group": f[4], "mode": perm,
	}, nil
}

// stats runs a script printing stat records and returns them as FileInfo.
func (x *osbExecd) stats(ctx context.Context, w http.ResponseWriter, what, script string, args ...string) ([]map[string]any, bool) {
	res, err := x.script(ctx, script, args...)
	if err != nil {
		osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "%s: %v", what, err)
		return nil, false
	}
	if res.ExitCode != 0 {
		scriptFailed(w, what, res)
		return nil, false
	}
	records, _ := sbfiles.StatRecords(res.Stdout)
	out := []map[string]any{}
	for _, rec := range records {
		fi, err := fileJSON(rec)
		if err != nil {
			osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "%s: %v", what, err)
			return nil, false
		}
		out = append(out, fi)
	}
	return out, true
}

func requireQuery(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	v := r.URL.Query().Get(name)
	if v == "" {
		osbExecdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter '%s'", name)
	}
	return v, v != ""
}

// info describes paths without following symlinks.
func (x *osbExecd) info(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	paths := r.URL.Query()["path"]
	if len(paths) == 0 {
		osbExecdError(w, http.StatusBadRequest, "MISSING_QUERY", "missing query parameter 'path'")
		return
	}
	infos, ok := x.stats(ctx, w, "stat", osbStatScript, append([]string{sbfiles.StatBatchScript, osbStatFormat}, paths...)...)
	if !ok {
		return
	}
	resp := map[string]any{}
	for _, fi := range infos {
		for _, p := range paths {
			if fi["path"] == p {
				resp[p] = fi
			}
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// pathComponents orders paths as a depth-first walk with sorted names does.
func pathComponents(a, b map[string]any) int {
	return slices.Compare(strings.Split(a["path"].(string), "/"), strings.Split(b["path"].(string), "/"))
}

// list lists a directory to depth levels, without following symlinks.
func (x *osbExecd) list(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	p, ok := requireQuery(w, r, "path")
	if !ok {
		return
	}
	depth := 1
	if d := r.URL.Query().Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "depth must be a non-negative integer")
			return
		}
		depth = n
	}
	infos, ok := x.stats(ctx, w, "list", `s=$1 f=$2 p=$3 d=$4
[ -L "$p" ] && { printf '%s\n' "$p" >&2; exit 47; }
[ -e "$p" ] || { printf '%s\n' "$p" >&2; exit 44; }
[ -d "$p" ] || { printf '%s\n' "$p" >&2; exit 48; }
[ "$d" -gt 0 ] || exit 0
exec find "$p" -mindepth 1 -maxdepth "$d" -exec sh -c "$s" sh "$f" {} +`, sbfiles.StatBatchScript, osbStatFormat, p, strconv.Itoa(depth))
	if !ok {
		return
	}
	slices.SortFunc(infos, pathComponents)
	writeJSON(w, http.StatusOK, infos)
}

// search lists the files below path whose base name matches pattern.
func (x *osbExecd) search(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	p, ok := requireQuery(w, r, "path")
	if !ok {
		return
	}
	pattern := r.URL.Query().Get("pattern")
	if pattern == "" || pattern == "**" {
		pattern = "*"
	}
	if _, err := path.Match(pattern, ""); err != nil {
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "invalid pattern %s: %v", pattern, err)
		return
	}
	infos, ok := x.stats(ctx, w, "search", `s=$1 f=$2 p=$3 n=$4
[ -e "$p" ] || { printf '%s\n' "$p" >&2; exit 44; }
exec find "$p" ! -type d -name "$n" -exec sh -c "$s" sh "$f" {} +`, sbfiles.StatBatchScript, osbStatFormat, p, pattern)
	if !ok {
		return
	}
	slices.SortFunc(infos, pathComponents)
	writeJSON(w, http.StatusOK, infos)
}

// fileFailed answers for a failed file call.
func fileFailed(w http.ResponseWriter, what string, err error) {
	if errors.Is(err, fs.ErrNotExist) {
		osbExecdError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found. %v", err)
		return
	}
	osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "%s: %v", what, err)
}

// byteRange parses a single "bytes=" range against size: start and length,
// or ok false when it cannot be satisfied.
func byteRange(h string, size int64) (start, n int64, ok bool) {
	spec, found := strings.CutPrefix(h, "bytes=")
	if !found || strings.Contains(spec, ",") {
		return 0, 0, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, 0, false
	}
	if a == "" { // the last b bytes
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k <= 0 || size == 0 {
			return 0, 0, false
		}
		k = min(k, size)
		return size - k, k, true
	}
	s, err := strconv.ParseInt(a, 10, 64)
	if err != nil || s < 0 || s >= size {
		return 0, 0, false
	}
	end := size - 1
	if b != "" {
		e, err := strconv.ParseInt(b, 10, 64)
		if err != nil || e < s {
			return 0, 0, false
		}
		end = min(e, size-1)
	}
	return s, end - s + 1, true
}

// download sends a file, or the one range asked for.
func (x *osbExecd) download(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	p, ok := requireQuery(w, r, "path")
	if !ok {
		return
	}
	fi, err := sbfiles.Stat(ctx, x.sb, p)
	if err != nil {
		fileFailed(w, "error getting file stat info: "+p, err)
		return
	}
	if fi.IsDir() {
		osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "path is a directory: %s", p)
		return
	}
	size := fi.Size()
	start, n, status := int64(0), size, http.StatusOK
	if h := r.Header.Get("Range"); h != "" {
		var ok bool
		if start, n, ok = byteRange(h, size); !ok {
			w.Header().Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			osbExecdError(w, http.StatusRequestedRangeNotSatisfiable, "INVALID_RANGE", "range %q does not fit a file of %d bytes", h, size)
			return
		}
		status = http.StatusPartialContent
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+n-1, size))
	}
	rc, err := sbfiles.ReadFile(ctx, x.sb, p)
	if err != nil {
		fileFailed(w, "error opening "+p, err)
		return
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, start); err != nil {
		fileFailed(w, "error reading "+p, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Header().Set("Accept-Ranges", "bytes")
	w.WriteHeader(status)
	io.CopyN(w, rc, n) // a file that shrank meanwhile ends the answer short
}

// osbPerm is execd's permission: owner and group names, mode as octal
// digits written as a decimal number (755).
type osbPerm struct {
	Owner string `json:"owner"`
	Group string `json:"group"`
	Mode  int    `json:"mode"`
}

// fileMode converts the mode (0: def).
func (p osbPerm) fileMode(def fs.FileMode) (fs.FileMode, error) {
	if p.Mode == 0 {
		return def, nil
	}
	m, err := strconv.ParseUint(strconv.Itoa(p.Mode), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("mode %d: want octal digits such as 644 or 755", p.Mode)
	}
	return fs.FileMode(m), nil
}

// apply sets p on path q (mode when set, then owner and group when set).
func (x *osbExecd) apply(ctx context.Context, q string, p osbPerm) (backend.ExecResult, error) {
	mode := ""
	if p.Mode != 0 {
		m, err := p.fileMode(0)
		if err != nil {
			return backend.ExecResult{}, err
		}
		mode = strconv.FormatUint(uint64(m), 8)
	}
	owner := p.Owner
	if p.Group != "" {
		owner += ":" + p.Group
	}
	return x.script(ctx, `[ -e "$1" ] || [ -L "$1" ] || { printf '%s\n' "$1" >&2; exit 44; }
[ -z "$2" ] || chmod "$2" -- "$1" || exit
[ -z "$3" ] || chown -- "$3" "$1"`, q, mode, owner)
}

// upload writes metadata/file part pairs.
func (x *osbExecd) upload(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		osbExecdError(w, http.StatusBadRequest, "INVALID_FILE", "multipart form is empty")
		return
	}
	var meta *struct {
		Path string `json:"path"`
		osbPerm
	}
	files := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			osbExecdError(w, http.StatusBadRequest, "INVALID_FILE", "reading the multipart form: %v", err)
			return
		}
		if part.FileName() == "" {
			continue // a form value, not a file (as execd reads them)
		}
		switch part.FormName() {
		case "metadata":
			meta = &struct {
				Path string `json:"path"`
				osbPerm
			}{}
			if err := json.NewDecoder(part).Decode(meta); err != nil || meta.Path == "" {
				osbExecdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "invalid metadata format (a path is required). %v", err)
				return
			}
		case "file":
			if meta == nil {
				osbExecdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata file is missing")
				return
			}
			mode, err := meta.fileMode(0o755)
			if err != nil {
				osbExecdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "%v", err)
				return
			}
			if err := sbfiles.WriteFile(ctx, x.sb, meta.Path, part, mode); err != nil {
				fileFailed(w, "error writing "+meta.Path, err)
				return
			}
			if meta.Owner != "" || meta.Group != "" {
				res, err := x.apply(ctx, meta.Path, osbPerm{Owner: meta.Owner, Group: meta.Group})
				if err != nil || res.ExitCode != 0 {
					osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "error chowning %s: %v %s", meta.Path, err, res.Stderr)
					return
				}
			}
			meta = nil
			files++
		}
	}
	if files == 0 {
		osbExecdError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", "metadata file is missing")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// decodeBody decodes a JSON body or answers 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxJSONBodyBytes)).Decode(v); err != nil {
		osbExecdError(w, bodyStatus(err), "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. %v", err)
		return false
	}
	return true
}

// runEach runs script once per args, answering for the first failure.
func (x *osbExecd) runEach(ctx context.Context, w http.ResponseWriter, what, script string, args [][]string) bool {
	for _, a := range args {
		res, err := x.script(ctx, script, a...)
		if err != nil {
			osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "%s: %v", what, err)
			return false
		}
		if res.ExitCode != 0 {
			scriptFailed(w, what, res)
			return false
		}
	}
	return true
}

func (x *osbExecd) move(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var items []struct {
		Src  string `json:"src"`
		Dest string `json:"dest"`
	}
	if !decodeBody(w, r, &items) {
		return
	}
	var args [][]string
	for _, it := range items {
		args = append(args, []string{it.Src, it.Dest})
	}
	if x.runEach(ctx, w, "rename", `[ -e "$1" ] || [ -L "$1" ] || { printf 'source path not found: %s\n' "$1" >&2; exit 44; }
{ [ -e "$2" ] || [ -L "$2" ]; } && { printf '%s\n' "$2" >&2; exit 45; }
mkdir -p -- "$(dirname -- "$2")" && exec mv -- "$1" "$2"`, args) {
		w.WriteHeader(http.StatusOK)
	}
}

func (x *osbExecd) chmod(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var req map[string]osbPerm
	if !decodeBody(w, r, &req) {
		return
	}
	for _, p := range slices.Sorted(maps.Keys(req)) {
		res, err := x.apply(ctx, p, req[p])
		if err != nil {
			osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "%s: %v", p, err)
			return
		}
		if res.ExitCode != 0 {
			scriptFailed(w, "error changing permissions for "+p, res)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// removeFiles removes files (not directories); missing ones are fine.
func (x *osbExecd) removeFiles(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	paths := r.URL.Query()["path"]
	if x.runEach(ctx, w, "remove", `for p do
  [ -e "$p" ] || [ -L "$p" ] || continue
  if [ -d "$p" ] && [ ! -L "$p" ]; then printf '%s\n' "$p" >&2; exit 46; fi
  rm -f -- "$p" || exit
done`, [][]string{paths}) {
		w.WriteHeader(http.StatusOK)
	}
}

// mkdirs makes directories with their parents; a new one gets the mode.
func (x *osbExecd) mkdirs(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var req map[string]osbPerm
	if !decodeBody(w, r, &req) {
		return
	}
	for _, p := range slices.Sorted(maps.Keys(req)) {
		perm := req[p]
		if _, err := perm.fileMode(0); err != nil {
			osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "%s: %v", p, err)
			return
		}
		res, err := x.script(ctx, `if [ -d "$1" ]; then exit 0; fi
mkdir -p -- "$1"`, p)
		if err == nil && res.ExitCode == 0 && (perm.Mode != 0 || perm.Owner != "" || perm.Group != "") {
			res, err = x.apply(ctx, p, perm)
		}
		if err != nil {
			osbExecdError(w, http.StatusInternalServerError, "RUNTIME_ERROR", "mkdir %s: %v", p, err)
			return
		}
		if res.ExitCode != 0 {
			scriptFailed(w, "mkdir "+p, res)
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (x *osbExecd) removeDirs(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	if x.runEach(ctx, w, "remove directories", `[ $# -eq 0 ] || exec rm -rf -- "$@"`, [][]string{r.URL.Query()["path"]}) {
		w.WriteHeader(http.StatusOK)
	}
}

// replace replaces every occurrence of old by new in each file.
func (x *osbExecd) replace(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	var req map[string]struct {
		Old string `json:"old"`
		New string `json:"new"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	// ?verbose=true answers how many occurrences each file had.
	verbose := r.URL.Query().Get("verbose") == "true"
	counts := map[string]map[string]int{}
	for _, p := range slices.Sorted(maps.Keys(req)) {
		rep := req[p]
		if rep.Old == "" {
			osbExecdError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "%s: the string to replace is empty", p)
			return
		}
		fi, err := sbfiles.Stat(ctx, x.sb, p)
		if err != nil {
			fileFailed(w, "replace in "+p, err)
			return
		}
		rc, err := sbfiles.ReadFile(ctx, x.sb, p)
		if err != nil {
			fileFailed(w, "replace in "+p, err)
			return
		}
		data, err := io.ReadAll(io.LimitReader(rc, MaxJSONBodyBytes+1))
		rc.Close()
		if err == nil && len(data) > MaxJSONBodyBytes {
			err = fmt.Errorf("the file is larger than %d bytes", MaxJSONBodyBytes)
		}
		if err != nil {
			fileFailed(w, "replace in "+p, err)
			return
		}
		n := strings.Count(string(data), rep.Old)
		counts[p] = map[string]int{"replacedCount": n}
		if n == 0 {
			continue
		}
		out := strings.ReplaceAll(string(data), rep.Old, rep.New)
		if err := sbfiles.WriteFile(ctx, x.sb, p, strings.NewReader(out), fi.Mode().Perm()); err != nil {
			fileFailed(w, "replace in "+p, err)
			return
		}
	}
	if verbose {
		writeJSON(w, http.StatusOK, counts)
		return
	}
	w.WriteHeader(http.StatusOK)
}
