package sbxd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// The file operations resolve relative names against the sandbox's working
// directory (the agent's), as Exec does, and report *fs.PathError wrapping
// fs.ErrNotExist, fs.ErrExist, fs.ErrPermission, syscall.EISDIR or
// syscall.ENOTDIR. The four of backend.FileSystem fall back to the wrapped
// sandbox when there is no agent; the others then fail with an error
// wrapping errors.ErrUnsupported, so callers can take their own path.

// pathErr turns an agent's error about name into an *fs.PathError, and
// anything else into an *backend.OpError.
func (c *Client) pathErr(op, name string, err error) error {
	if re, ok := errors.AsType[*remoteError](err); ok {
		return &fs.PathError{Op: op, Path: name, Err: re.w.Cause()}
	}
	return c.opErr(op, err)
}

func (c *Client) noAgent(op string) error {
	return c.opErr(op, fmt.Errorf("%w: no sbxd agent in the sandbox (%v)", errors.ErrUnsupported, c.Fallback()))
}

// get sends a GET with query q and returns the response of a successful
// call.
func (c *Client) get(ctx context.Context, conn *agentConn, route string, q url.Values) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentURL+route+"?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	return c.sendOK(conn, req)
}

// send is conn.do that forgets a lost agent.
func (c *Client) send(conn *agentConn, req *http.Request) (*http.Response, error) {
	resp, err := conn.do(req)
	if errors.Is(err, ErrAgentLost) {
		c.forget(conn)
	}
	return resp, err
}

// sendOK is send that returns the response of a successful call, and the
// agent's error for any other.
func (c *Client) sendOK(conn *agentConn, req *http.Request) (*http.Response, error) {
	resp, err := c.send(conn, req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

func (c *Client) call(ctx context.Context, conn *agentConn, route string, in, out any) error {
	err := conn.postJSON(ctx, route, in, out)
	if errors.Is(err, ErrAgentLost) {
		c.forget(conn)
	}
	return err
}

// ReadFile opens name for reading.
func (c *Client) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return sbfiles.ReadFile(ctx, c.sb, name)
	}
	return c.read(ctx, conn, name, url.Values{})
}

// ReadFileRange opens length bytes of name from offset (length < 0: to
// the end).
func (c *Client) ReadFileRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: negative offset", backend.ErrInvalidConfig)}
	}
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		rc, err := sbfiles.ReadFile(ctx, c.sb, name)
		if err != nil {
			return nil, err
		}
		if _, err := io.CopyN(io.Discard, rc, offset); err != nil && err != io.EOF {
			rc.Close()
			return nil, err
		}
		if length < 0 {
			return rc, nil
		}
		return readCloser{io.LimitReader(rc, length), rc}, nil
	}
	q := url.Values{"offset": {strconv.FormatInt(offset, 10)}, "length": {strconv.FormatInt(length, 10)}}
	return c.read(ctx, conn, name, q)
}

// ReadLines opens n lines of name starting at line first (1-based; n 0:
// to the end), with their line endings.
func (c *Client) ReadLines(ctx context.Context, name string, first, n int) (io.ReadCloser, error) {
	if first < 1 || n < 0 {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%w: lines start at 1", backend.ErrInvalidConfig)}
	}
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		rc, err := sbfiles.ReadFile(ctx, c.sb, name)
		if err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(sbxdwire.CopyLines(pw, rc, first, n))
		}()
		return readCloser{pr, closeBoth{pr, rc}}, nil
	}
	q := url.Values{"line": {strconv.Itoa(first)}, "lines": {strconv.Itoa(n)}}
	return c.read(ctx, conn, name, q)
}

type readCloser struct {
	io.Reader
	io.Closer
}

type closeBoth struct{ a, b io.Closer }

func (c closeBoth) Close() error { c.a.Close(); return c.b.Close() }

func (c *Client) read(ctx context.Context, conn *agentConn, name string, q url.Values) (io.ReadCloser, error) {
	whole := len(q) == 0
	q.Set("path", name)
	resp, err := c.get(ctx, conn, sbxdwire.RouteFile, q)
	if err != nil {
		return nil, c.pathErr("read", name, err)
	}
	if size, err := strconv.ParseInt(resp.Header.Get(sbxdwire.HdrSize), 10, 64); whole && err == nil && c.isBulk(size) {
		if inner, ok := backend.As[backend.FileSystem](c.sb); ok {
			rc, err := inner.ReadFile(ctx, name)
			if !errors.Is(err, errors.ErrUnsupported) {
				resp.Body.Close()
				return rc, err
			}
		}
	}
	return resp.Body, nil
}

// isBulk reports whether size bytes move through the wrapped sandbox's
// own file access.
func (c *Client) isBulk(size int64) bool { return c.opts.bulk >= 0 && size >= c.opts.bulk }

// seekableSize returns how many bytes r has left when it can say so and
// can be rewound.
func seekableSize(r io.Reader) (int64, io.Seeker, bool) {
	switch v := r.(type) {
	case *strings.Reader:
		return int64(v.Len()), v, true
	case *bytes.Reader:
		return int64(v.Len()), v, true
	case *os.File:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, nil, false
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, nil, false
		}
		return fi.Size() - off, v, true
	}
	return 0, nil, false
}

// bulkWrite writes r through inner to a temporary name the agent chose
// beside the target, then has the agent move it over the target. ok is
// false when inner cannot write (r is then where it was).
func (c *Client) bulkWrite(ctx context.Context, conn *agentConn, inner backend.FileSystem, name string, r io.Reader, seeker io.Seeker, perm fs.FileMode) (ok bool, err error) {
	start, err := seeker.Seek(0, io.SeekCurrent)
	if err != nil {
		return false, nil
	}
	var prep sbxdwire.PrepareResult
	if err := c.call(ctx, conn, sbxdwire.RoutePrepare, sbxdwire.PrepareRequest{Path: name}, &prep); err != nil {
		return true, c.pathErr("write", name, err)
	}
	cleanup := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		c.call(rctx, conn, sbxdwire.RouteRemove, sbxdwire.RemoveRequest{Path: prep.Tmp}, nil)
	}
	if err := inner.WriteFile(ctx, prep.Tmp, r, perm); err != nil {
		cleanup()
		if errors.Is(err, errors.ErrUnsupported) {
			if _, serr := seeker.Seek(start, io.SeekStart); serr == nil {
				return false, nil
			}
		}
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			return true, &fs.PathError{Op: "write", Path: name, Err: pe.Err}
		}
		return true, err
	}
	if err := c.call(ctx, conn, sbxdwire.RouteMove, sbxdwire.MoveRequest{From: prep.Tmp, To: prep.Target, Overwrite: true}, nil); err != nil {
		cleanup()
		return true, c.pathErr("write", name, err)
	}
	return true, nil
}

// WriteFile atomically replaces name with r's bytes and mode perm,
// creating missing parent directories; a symlink at name is followed.
func (c *Client) WriteFile(ctx context.Context, name string, r io.Reader, perm fs.FileMode) error {
	conn, err := c.agent(ctx)
	if err != nil {
		return err
	}
	if conn == nil {
		return sbfiles.WriteFile(ctx, c.sb, name, r, perm)
	}
	if size, seeker, ok := seekableSize(r); ok && c.isBulk(size) {
		if inner, ok := backend.As[backend.FileSystem](c.sb); ok {
			if done, err := c.bulkWrite(ctx, conn, inner, name, r, seeker, perm); done {
				return err
			}
		}
	}
	q := url.Values{"path": {name}, "mode": {strconv.FormatUint(uint64(perm.Perm()), 8)}}
	body, small := smallBody(r)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, agentURL+sbxdwire.RouteFile+"?"+q.Encode(), body)
	if err != nil {
		return c.opErr("write", err)
	}
	// An early answer (an error) may leave a streamed body unread: such a
	// stream is not reused. A small body of known length is drained by
	// the agent's HTTP server, so its stream can be.
	req.Close = !small
	resp, err := c.sendOK(conn, req)
	if err != nil {
		return c.pathErr("write", name, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return nil
}

// Stat describes name, following symlinks.
func (c *Client) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	return c.stat(ctx, name, false)
}

// Lstat describes name without following a symlink.
func (c *Client) Lstat(ctx context.Context, name string) (fs.FileInfo, error) {
	return c.stat(ctx, name, true)
}

func (c *Client) stat(ctx context.Context, name string, lstat bool) (fs.FileInfo, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		if lstat {
			return nil, c.noAgent("lstat")
		}
		return sbfiles.Stat(ctx, c.sb, name)
	}
	q := url.Values{"path": {name}}
	if lstat {
		q.Set("lstat", "1")
	}
	var fi sbxdwire.FileInfo
	if err := c.getJSON(ctx, conn, sbxdwire.RouteStat, q, &fi); err != nil {
		return nil, c.pathErr("stat", name, err)
	}
	return fileInfoOf(fi), nil
}

func (c *Client) getJSON(ctx context.Context, conn *agentConn, route string, q url.Values, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, agentURL+route+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	err = conn.roundTrip(req, out)
	if errors.Is(err, ErrAgentLost) {
		c.forget(conn)
	}
	return err
}

// ReadDir lists a directory sorted by name, without following symlinks.
func (c *Client) ReadDir(ctx context.Context, name string) ([]fs.FileInfo, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return nil, err
	}
	if conn == nil {
		return sbfiles.ReadDir(ctx, c.sb, name)
	}
	var list []sbxdwire.FileInfo
	if err := c.getJSON(ctx, conn, sbxdwire.RouteReadDir, url.Values{"path": {name}}, &list); err != nil {
		return nil, c.pathErr("readdir", name, err)
	}
	out := make([]fs.FileInfo, len(list))
	for i, fi := range list {
		out[i] = fileInfoOf(fi)
	}
	return out, nil
}

// Mkdir makes the directory name (with its missing parents when parents
// is set; an existing directory is then no error).
func (c *Client) Mkdir(ctx context.Context, name string, perm fs.FileMode, parents bool) error {
	return c.simple(ctx, "mkdir", name, sbxdwire.RouteMkdir, sbxdwire.MkdirRequest{Path: name, Mode: perm, Parents: parents})
}

// Remove removes name (and everything below it when recursive is set).
// A missing name is an error wrapping fs.ErrNotExist.
func (c *Client) Remove(ctx context.Context, name string, recursive bool) error {
	return c.simple(ctx, "remove", name, sbxdwire.RouteRemove, sbxdwire.RemoveRequest{Path: name, Recursive: recursive})
}

// Move renames from to to; an existing to is replaced only with overwrite
// (otherwise the error wraps fs.ErrExist).
func (c *Client) Move(ctx context.Context, from, to string, overwrite bool) error {
	return c.simple(ctx, "move", from, sbxdwire.RouteMove, sbxdwire.MoveRequest{From: from, To: to, Overwrite: overwrite})
}

func (c *Client) simple(ctx context.Context, op, name, route string, in any) error {
	conn, err := c.agent(ctx)
	if err != nil {
		return err
	}
	if conn == nil {
		return c.noAgent(op)
	}
	if err := c.call(ctx, conn, route, in, nil); err != nil {
		if re, ok := errors.AsType[*remoteError](err); ok && re.w.Path != "" {
			name = re.w.Path
		}
		return c.pathErr(op, name, err)
	}
	return nil
}

// Edit replaces old with new in the file name and returns how many
// occurrences it replaced: exactly one, unless all is set. When old does
// not occur the error wraps ErrEditNoMatch; when it occurs more than once
// without all, it wraps a *NotUniqueError with the count. The file keeps
// its mode; the write is atomic.
func (c *Client) Edit(ctx context.Context, name, old, new string, all bool) (int, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return 0, err
	}
	if conn == nil {
		return 0, c.noAgent("edit")
	}
	var res sbxdwire.EditResult
	if err := c.call(ctx, conn, sbxdwire.RouteEdit, sbxdwire.EditRequest{Path: name, Old: old, New: new, ReplaceAll: all}, &res); err != nil {
		return 0, c.pathErr("edit", name, err)
	}
	return res.Replaced, nil
}

// Entry is a file a walk or glob found.
type Entry struct {
	Path string // absolute when the root was
	Info fs.FileInfo
}

// WalkFiles calls fn for every entry below root that is not a directory,
// depth first in lexical order: root is followed if it is a symlink,
// nothing below it is. maxDepth > 0 limits the depth (1: root's children).
// Directories named in skip (a name, or an absolute path) are not
// entered. Directories below root that cannot be read are skipped. It is
// the fileops.FileWalker capability.
func (c *Client) WalkFiles(ctx context.Context, root string, maxDepth int, skip []string, fn func(path string, info fs.FileInfo) error) error {
	return c.walk(ctx, "walk", root, sbxdwire.RouteWalk, sbxdwire.WalkRequest{Root: root, MaxDepth: maxDepth, Skip: skip}, fn)
}

// Glob returns the files (not directories) below dir whose path relative
// to dir matches pattern: path.Match syntax per segment, "**" for any
// number of directories, {a,b} alternatives. An absolute pattern ignores
// dir. Walks from "/" skip /proc, /sys and /dev.
func (c *Client) Glob(ctx context.Context, pattern, dir string) ([]Entry, error) {
	var out []Entry
	err := c.walk(ctx, "glob", dir, sbxdwire.RouteGlob, sbxdwire.GlobRequest{Pattern: pattern, Dir: dir}, func(p string, fi fs.FileInfo) error {
		out = append(out, Entry{Path: p, Info: fi})
		return nil
	})
	return out, err
}

func (c *Client) walk(ctx context.Context, op, root, route string, in any, fn func(string, fs.FileInfo) error) error {
	conn, err := c.agent(ctx)
	if err != nil {
		return err
	}
	if conn == nil {
		return c.noAgent(op)
	}
	resp, err := c.postStream(ctx, conn, route, in)
	if err != nil {
		return c.pathErr(op, root, err)
	}
	defer resp.Body.Close()
	dec := ndjsonReader(resp.Body)
	for {
		var line struct {
			sbxdwire.WalkEntry
			sbxdwire.WalkDone
		}
		if err := dec.Decode(&line); err != nil {
			return c.opErr(op, conn.transportErr(ctx, fmt.Errorf("reading the agent's answer: %w", err)))
		}
		if line.Done {
			if line.Error != "" {
				return c.opErr(op, errors.New(line.Error))
			}
			return nil
		}
		if err := fn(line.Path, fileInfoOf(line.Info)); err != nil {
			return err
		}
	}
}

// postStream posts in as JSON and returns the response of a successful
// call, body unread.
func (c *Client) postStream(ctx context.Context, conn *agentConn, route string, in any) (*http.Response, error) {
	b, err := jsonBody(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, agentURL+route, b)
	if err != nil {
		return nil, err
	}
	return c.sendOK(conn, req)
}

// GrepResult is what Grep found.
type GrepResult struct {
	Files []GrepFile
	// SkippedLarge counts files over GrepRequest.MaxFileSize.
	SkippedLarge int
	// Truncated: MaxLines was reached.
	Truncated bool
}

// Grep searches files natively in the sandbox. Binary files (a NUL byte in
// their first 8 KiB) are skipped, as are files that cannot be read.
func (c *Client) Grep(ctx context.Context, req GrepRequest) (GrepResult, error) {
	conn, err := c.agent(ctx)
	if err != nil {
		return GrepResult{}, err
	}
	if conn == nil {
		return GrepResult{}, c.noAgent("grep")
	}
	resp, err := c.postStream(ctx, conn, sbxdwire.RouteGrep, req)
	if err != nil {
		return GrepResult{}, c.pathErr("grep", req.Path, err)
	}
	defer resp.Body.Close()
	dec := ndjsonReader(bufio.NewReader(resp.Body))
	var res GrepResult
	for {
		var m sbxdwire.GrepMessage
		if err := dec.Decode(&m); err != nil {
			return res, c.opErr("grep", conn.transportErr(ctx, fmt.Errorf("reading the agent's answer: %w", err)))
		}
		if m.File != nil {
			res.Files = append(res.Files, *m.File)
		}
		if m.Done {
			res.SkippedLarge, res.Truncated = m.SkippedLarge, m.Truncated
			if m.Error != "" {
				return res, c.opErr("grep", errors.New(m.Error))
			}
			return res, nil
		}
	}
}

// smallBodyMax is the largest body the agent's HTTP server drains after an
// early answer (net/http discards up to 256 KiB), keeping the stream.
const smallBodyMax = 256 << 10

// smallBody returns r as a request body: as it is when it is an in-memory
// reader of at most smallBodyMax bytes (net/http then sends its length),
// else hidden behind a plain io.Reader so the transport streams it and
// does not close the caller's reader.
func smallBody(r io.Reader) (io.Reader, bool) {
	var n int
	switch v := r.(type) {
	case *strings.Reader:
		n = v.Len()
	case *bytes.Reader:
		n = v.Len()
	case *bytes.Buffer:
		n = v.Len()
	default:
		return struct{ io.Reader }{r}, false
	}
	if n > smallBodyMax {
		return struct{ io.Reader }{r}, false
	}
	return r, true
}
