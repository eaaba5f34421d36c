package opensandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/ctxio"
)

// File access goes through execd's file API, so fileops needs no tools in
// the image. Two of execd's habits shape it: /files/info does not follow
// symlinks (Stat of a symlink falls back to sbfiles.Stat's Exec path, by
// returning errors.ErrUnsupported), and /files/replace replaces every
// occurrence (edit_file reads and writes whole files instead, keeping its
// uniqueness rule).

// info returns execd's description of one path (not following symlinks).
func (x *execd) info(ctx context.Context, p string) (fileInfoJSON, error) {
	var m map[string]fileInfoJSON
	if err := x.json(ctx, http.MethodGet, "/files/info", url.Values{"path": {p}}, nil, &m); err != nil {
		return fileInfoJSON{}, err
	}
	if fi, ok := m[p]; ok {
		return fi, nil
	}
	for _, fi := range m {
		return fi, nil
	}
	return fileInfoJSON{}, fmt.Errorf("%s: /files/info answered nothing for %s", ServiceExecd, p)
}

// upload writes r to p with execd's multipart upload, which creates missing
// parent directories: a part named "metadata" (with a filename, or execd
// ignores it) holding {path, mode, owner}, then the part named "file".
func (x *execd) upload(ctx context.Context, p string, r io.Reader, perm fs.FileMode, owner string) error {
	meta, err := json.Marshal(fileMetadata{Path: p, Mode: octalMode(uint32(perm.Perm())), Owner: owner})
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
			h.Set("Content-Type", "application/json")
			w, err := mw.CreatePart(h)
			if err != nil {
				return err
			}
			if _, err := w.Write(meta); err != nil {
				return err
			}
			h = textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, path.Base(p)))
			h.Set("Content-Type", "application/octet-stream")
			if w, err = mw.CreatePart(h); err != nil {
				return err
			}
			if _, err := io.Copy(w, ctxio.Reader(ctx, r)); err != nil {
				return err
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, err := x.request(ctx, http.MethodPost, "/files/upload", nil, pr)
	if err != nil {
		pr.CloseWithError(err)
		return err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := x.do(req)
	pr.CloseWithError(io.ErrClosedPipe) // stops the writer if execd answered early
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	drain(resp.Body)
	return nil
}

// rename moves src to dest (which must not exist).
func (x *execd) rename(ctx context.Context, src, dest string) error {
	return x.json(ctx, http.MethodPost, "/files/mv", nil, []renameItem{{Src: src, Dest: dest}}, nil)
}

// downloadRange copies up to n bytes of p from offset off to w and returns
// how many it copied. A file that does not exist yet, or has nothing past
// off, gives 0 and no error.
func (x *execd) downloadRange(ctx context.Context, p string, off, n int64, w io.Writer) (int64, error) {
	req, err := x.request(ctx, http.MethodGet, "/files/download", url.Values{"path": {p}}, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	resp, err := x.do(req, http.StatusRequestedRangeNotSatisfiable)
	if errors.Is(err, backend.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	// Read to the end of small remainders, so the connection is reused.
	defer drain(resp.Body)
	body := io.Reader(resp.Body)
	switch resp.StatusCode {
	case http.StatusRequestedRangeNotSatisfiable:
		return 0, nil
	case http.StatusPartialContent:
	default:
		// The whole file (an empty one, or a server ignoring Range).
		if _, err := io.CopyN(io.Discard, body, off); err != nil {
			return 0, nil
		}
	}
	return io.Copy(w, io.LimitReader(body, n))
}

// abs resolves a sandbox path as Exec does: relative to the working
// directory.
func (s *Sandbox) abs(ctx context.Context, name string) (string, error) {
	if path.IsAbs(name) {
		return path.Clean(name), nil
	}
	p, err := s.probe(ctx)
	if err != nil {
		return "", err
	}
	return path.Join(p.workDir, name), nil
}

// pathError turns an execd failure on name into an *fs.PathError wrapping
// fs.ErrNotExist, fs.ErrPermission, syscall.ENOTDIR or syscall.EISDIR where
// execd's answer says so.
func pathError(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if pe, ok := errors.AsType[*fs.PathError](err); ok && pe.Path == name {
		return err
	}
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Service == ServiceExecd {
		msg := strings.ToLower(ae.Message)
		switch {
		case ae.Code == "FILE_NOT_FOUND":
			err = fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
		case ae.Status == http.StatusNotFound:
			// Not execd's answer about a file: the proxy's about the
			// sandbox, or a route this execd lacks. Keep it.
		case strings.Contains(msg, "permission denied"):
			err = fmt.Errorf("%w (%v)", fs.ErrPermission, err)
		case strings.Contains(msg, "not a directory"):
			err = fmt.Errorf("%w (%v)", syscall.ENOTDIR, err)
		case strings.Contains(msg, "is a directory"):
			err = fmt.Errorf("%w (%v)", syscall.EISDIR, err)
		case strings.Contains(msg, "no such file or directory"):
			err = fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
		case strings.Contains(msg, "too many levels of symbolic links"):
			err = fmt.Errorf("%w (%v)", syscall.ELOOP, err)
		}
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// inKernelFS reports whether p is in /proc, /sys or /dev, whose files
// report sizes that are not their content's.
func inKernelFS(p string) bool {
	for _, k := range []string{"/proc", "/sys", "/dev"} {
		if p == k || strings.HasPrefix(p, k+"/") {
			return true
		}
	}
	return false
}

// fileError is pathError after checking whether a failure to reach execd
// means the sandbox is gone.
func (s *Sandbox) fileError(ctx context.Context, op, name string, err error) error {
	if err == nil {
		return nil
	}
	return pathError(op, name, s.gone(ctx, err))
}

// routeMissing reports a 404 that is not execd's FILE_NOT_FOUND: an execd
// too old to have the route.
func routeMissing(err error) bool {
	ae, ok := errors.AsType[*APIError](err)
	return ok && (ae.Status == http.StatusNotFound && ae.Code == "" || ae.Status == http.StatusMethodNotAllowed)
}

// ReadFile opens a file for reading with execd's download.
func (s *Sandbox) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	p, x, err := s.fileTarget(ctx, name)
	if err != nil {
		return nil, s.fileError(ctx, "read", name, err)
	}
	fi, err := x.info(ctx, p)
	if err != nil {
		return nil, s.fileError(ctx, "read", name, err)
	}
	switch {
	case fi.Type == "directory":
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.EISDIR}
	case fi.Type == "symlink", inKernelFS(p):
		// execd's info does not follow a link (which may lead to a named
		// pipe, or loop), and a /proc file says it is empty: the read
		// through Exec resolves them, refuses what is not a regular
		// file and reads /proc to its end.
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: read through Exec", errors.ErrUnsupported)}
	case fi.Type != "file" && fi.Type != "":
		// A named pipe, socket or device: refused at once (execd's
		// download would block on a pipe).
		return nil, &fs.PathError{Op: "read", Path: name, Err: backend.ErrNotRegular}
	}
	req, err := x.request(ctx, http.MethodGet, "/files/download", url.Values{"path": {p}}, nil)
	if err != nil {
		return nil, s.fileError(ctx, "read", name, err)
	}
	resp, err := x.do(req)
	if err != nil {
		return nil, s.fileError(ctx, "read", name, err)
	}
	return resp.Body, nil
}

// WriteFile creates or replaces a file with execd's upload, which creates
// missing parents and follows a symlink at name. The file is owned by
// execd's user, or by the sandbox's default user when that is a name.
func (s *Sandbox) WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	p, x, err := s.fileTarget(ctx, name)
	if err != nil {
		return s.fileError(ctx, "write", name, err)
	}
	fi, err := x.info(ctx, p)
	switch {
	case err == nil && fi.Type == "directory":
		return &fs.PathError{Op: "write", Path: name, Err: syscall.EISDIR}
	case err != nil && !errors.Is(pathError("write", name, err), fs.ErrNotExist):
		return s.fileError(ctx, "write", name, err)
	}
	owner := ""
	if u, _, _ := strings.Cut(s.user, ":"); u != "" && !digitsRE().MatchString(u) {
		owner = u
	}
	return s.fileError(ctx, "write", name, x.upload(ctx, p, r, perm, owner))
}

// Stat describes name. execd does not follow symlinks, nor tell special
// files apart, so a symlink or a special file is reported with
// errors.ErrUnsupported and sbfiles.Stat asks the sandbox.
func (s *Sandbox) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	p, x, err := s.fileTarget(ctx, name)
	if err != nil {
		return nil, s.fileError(ctx, "stat", name, err)
	}
	fi, err := x.info(ctx, p)
	if err != nil {
		return nil, s.fileError(ctx, "stat", name, err)
	}
	switch fi.Type {
	case "symlink":
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fmt.Errorf("%w: execd does not follow symlinks", errors.ErrUnsupported)}
	case "file", "directory", "":
	default:
		// A named pipe, socket or device: execd does not say which.
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fmt.Errorf("%w: execd does not tell special files apart", errors.ErrUnsupported)}
	}
	return fileInfoOf(fi), nil
}

// ReadDir lists a directory with execd's /directories/list (symlinks are
// listed, not followed). An execd without that route, or a name that is a
// symlink (which the route refuses), is reported with
// errors.ErrUnsupported so sbfiles.ReadDir lists through Exec.
func (s *Sandbox) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	p, x, err := s.fileTarget(ctx, name)
	if err != nil {
		return nil, s.fileError(ctx, "readdir", name, err)
	}
	var entries []fileInfoJSON
	err = x.json(ctx, http.MethodGet, "/directories/list", url.Values{"path": {p}, "depth": {"1"}}, nil, &entries)
	if routeMissing(err) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fmt.Errorf("%w: execd has no /directories/list", errors.ErrUnsupported)}
	}
	if ae, ok := errors.AsType[*APIError](err); ok && ae.Status == http.StatusBadRequest {
		// A symlink, or not a directory: tell which.
		fi, ierr := x.info(ctx, p)
		switch {
		case ierr == nil && fi.Type == "symlink":
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: fmt.Errorf("%w: execd does not list through symlinks", errors.ErrUnsupported)}
		case ierr == nil && fi.Type != "directory":
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
		}
	}
	if err != nil {
		return nil, s.fileError(ctx, "readdir", name, err)
	}
	infos := make([]fs.FileInfo, 0, len(entries))
	prefix := strings.TrimSuffix(p, "/") + "/"
	for _, e := range entries {
		if rel := strings.TrimPrefix(e.Path, prefix); strings.Contains(rel, "/") {
			continue // deeper than asked
		}
		infos = append(infos, fileInfoOf(e))
	}
	sbfiles.SortByName(infos)
	return infos, nil
}

func (s *Sandbox) fileTarget(ctx context.Context, name string) (string, *execd, error) {
	x, err := s.execd(ctx)
	if err != nil {
		return "", nil, s.gone(ctx, err)
	}
	p, err := s.abs(ctx, name)
	if err != nil {
		return "", nil, s.gone(ctx, err)
	}
	return p, x, nil
}

func fileInfoOf(fi fileInfoJSON) fs.FileInfo {
	mode := fs.FileMode(modeFromOctal(fi.Mode)).Perm()
	switch fi.Type {
	case "directory":
		mode |= fs.ModeDir
	case "symlink":
		mode |= fs.ModeSymlink
	case "file", "":
	default:
		mode |= fs.ModeIrregular
	}
	mtime := fi.ModifiedAt.Time
	if mtime.IsZero() {
		mtime = time.Unix(0, 0)
	}
	return backend.NewFileInfo(path.Base(fi.Path), fi.Size, mode, mtime)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
