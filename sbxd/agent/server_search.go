package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/sandboxkit/sandboxkit/internal/hostfs"
	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

const (
	defaultGrepMaxFileSize = 10 << 20
	defaultGrepMaxLines    = 10000
	binarySniff            = 8 << 10
)

var defaultSkipDirs = []string{".git", ".hg", ".svn"}

// walk calls fn for every entry below root (root itself is followed if it
// is a symlink; nothing below it is), depth first in lexical order, without
// entering directories named in skip (an absolute path matches the path, a
// name any directory of that name). Directories are reported when dirs is
// set. maxDepth > 0 limits the depth (1: root's children). Directories
// below root that cannot be read are skipped, as find does.
func walk(ctx context.Context, root string, maxDepth int, skip []string, dirs bool, fn func(p string, fi fs.FileInfo) error) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "walk", Path: root, Err: syscall.ENOTDIR}
	}
	if _, err := os.ReadDir(root); err != nil {
		return err
	}
	skipped := func(p, name string) bool {
		for _, s := range skip {
			if s == name || (strings.HasPrefix(s, "/") && s == p) {
				return true
			}
		}
		return false
	}
	var rec func(dir string, depth int) error
	rec = func(dir string, depth int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil
		}
		for _, e := range entries {
			p := path.Join(dir, e.Name())
			info, err := e.Info()
			if err != nil {
				continue
			}
			if e.IsDir() {
				if skipped(p, e.Name()) {
					continue
				}
				if dirs {
					if err := fn(p, info); err != nil {
						return err
					}
				}
				if maxDepth == 0 || depth+1 < maxDepth {
					if err := rec(p, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			if err := fn(p, info); err != nil {
				return err
			}
		}
		return nil
	}
	return rec(root, 0)
}

// ndjson writes one JSON value a line, buffered, flushing at the end.
type ndjson struct {
	bw  *bufio.Writer
	enc *json.Encoder
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", "application/x-ndjson")
	bw := bufio.NewWriterSize(w, 64<<10)
	return &ndjson{bw: bw, enc: json.NewEncoder(bw)}
}

func (n *ndjson) put(v any) error { return n.enc.Encode(v) }
func (n *ndjson) flush() error    { return n.bw.Flush() }

func (s *Server) handleWalk(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.WalkRequest
	if !readJSON(w, r, "walk", &req) {
		return
	}
	// The root is checked first, so that its errors get a status.
	if err := checkDir(req.Root); err != nil {
		writeError(w, "walk", req.Root, err)
		return
	}
	out := newNDJSON(w)
	err := walk(r.Context(), req.Root, req.MaxDepth, req.Skip, req.Dirs, func(p string, fi fs.FileInfo) error {
		return out.put(sbxdwire.WalkEntry{Path: p, Info: sbxdwire.FileInfoOf(fi)})
	})
	finishWalk(out, err)
}

func finishWalk(out *ndjson, err error) {
	d := sbxdwire.WalkDone{Done: true}
	if err != nil {
		d.Error = err.Error()
	}
	out.put(d)
	out.flush()
}

func checkDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &fs.PathError{Op: "walk", Path: p, Err: syscall.ENOTDIR}
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if err != nil && err != io.EOF {
		return err
	}
	return nil
}

// globBase resolves a glob request into the directory matches are relative
// to and the pattern relative to it.
func globBase(dir, pattern string) (string, string) {
	if path.IsAbs(pattern) {
		dir = "/"
	}
	if dir == "" {
		dir = "."
	}
	for strings.HasPrefix(pattern, "./") {
		pattern = pattern[2:]
	}
	return dir, strings.TrimLeft(pattern, "/")
}

func (s *Server) handleGlob(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.GlobRequest
	if !readJSON(w, r, "glob", &req) {
		return
	}
	dir, pat := globBase(req.Dir, req.Pattern)
	g, err := compileGlob(pat)
	if err != nil {
		writeError(w, "glob", req.Pattern, fmt.Errorf("%w: glob %q: %v", sbxdwire.ErrInvalid, req.Pattern, err))
		return
	}
	if err := checkDir(dir); err != nil {
		writeError(w, "glob", dir, err)
		return
	}
	out := newNDJSON(w)
	start := path.Join(dir, g.staticPrefix())
	if _, err := os.Stat(start); err != nil {
		finishWalk(out, nil) // the pattern's fixed directories do not exist
		return
	}
	depth := g.maxDepth()
	if depth > 0 {
		depth -= strings.Count(g.staticPrefix(), "/") + boolInt(g.staticPrefix() != "")
	}
	var skip []string
	if path.Clean(dir) == "/" {
		skip = []string{"/proc", "/sys", "/dev"}
	}
	err = walk(r.Context(), start, depth, skip, false, func(p string, fi fs.FileInfo) error {
		if !g.match(relTo(dir, p)) {
			return nil
		}
		return out.put(sbxdwire.WalkEntry{Path: p, Info: sbxdwire.FileInfoOf(fi)})
	})
	finishWalk(out, err)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// relTo returns p relative to dir (p is below dir).
func relTo(dir, p string) string {
	dir = path.Clean(dir)
	if dir == "." {
		return p
	}
	if dir == "/" {
		return strings.TrimPrefix(p, "/")
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
}

// grepper searches one file's bytes.
type grepper struct {
	re     *regexp.Regexp
	req    sbxdwire.GrepRequest
	before int
	after  int
}

func newGrepper(req sbxdwire.GrepRequest) (*grepper, error) {
	expr := req.Pattern
	if req.Literal {
		expr = regexp.QuoteMeta(expr)
	}
	if req.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, err
	}
	if req.Before < 0 || req.After < 0 {
		return nil, errors.New("negative context")
	}
	return &grepper{re: re, req: req, before: req.Before, after: req.After}, nil
}

// search returns the file's result, or nil without a match.
func (g *grepper) search(name string, data []byte) *sbxdwire.GrepFile {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		var l []byte
		if i < 0 {
			l, data = data, nil
		} else {
			l, data = data[:i], data[i+1:]
		}
		lines = append(lines, bytes.TrimSuffix(l, []byte("\r")))
	}
	f := &sbxdwire.GrepFile{Path: name}
	lastOut := 0 // highest line number already in f.Lines
	for i, l := range lines {
		if !g.re.Match(l) {
			continue
		}
		f.Count++
		if g.req.FilesOnly {
			return f
		}
		if g.req.CountOnly {
			continue
		}
		n := i + 1
		for c := max(n-g.before, lastOut+1); c < n; c++ {
			f.Lines = append(f.Lines, sbxdwire.GrepLine{N: c, Text: string(lines[c-1])})
		}
		if n > lastOut {
			f.Lines = append(f.Lines, sbxdwire.GrepLine{N: n, Text: string(l), Match: true})
		} else {
			// Already printed as context of an earlier match.
			for j := range f.Lines {
				if f.Lines[j].N == n {
					f.Lines[j].Match = true
				}
			}
		}
		lastOut = max(lastOut, n)
		for c := n + 1; c <= min(n+g.after, len(lines)); c++ {
			if c > lastOut {
				f.Lines = append(f.Lines, sbxdwire.GrepLine{N: c, Text: string(lines[c-1])})
				lastOut = c
			}
		}
	}
	if f.Count == 0 {
		return nil
	}
	return f
}

func (s *Server) handleGrep(w http.ResponseWriter, r *http.Request) {
	var req sbxdwire.GrepRequest
	if !readJSON(w, r, "grep", &req) {
		return
	}
	g, err := newGrepper(req)
	if err != nil {
		writeError(w, "grep", req.Pattern, fmt.Errorf("%w: %v", sbxdwire.ErrInvalid, err))
		return
	}
	var glob *globPattern
	if req.Glob != "" {
		if glob, err = compileGlob(req.Glob); err != nil {
			writeError(w, "grep", req.Glob, fmt.Errorf("%w: glob %q: %v", sbxdwire.ErrInvalid, req.Glob, err))
			return
		}
	}
	root := req.Path
	if root == "" {
		root = "."
	}
	fi, err := os.Stat(root)
	if err != nil {
		writeError(w, "grep", root, err)
		return
	}
	run := &grepRun{g: g, out: newNDJSON(w), maxSize: req.MaxFileSize, maxLines: req.MaxLines}
	if run.maxSize <= 0 {
		run.maxSize = defaultGrepMaxFileSize
	}
	if run.maxLines <= 0 {
		run.maxLines = defaultGrepMaxLines
	}
	run.sum.Done = true
	if !fi.IsDir() {
		err = run.visit(root, fi)
	} else {
		baseOnly := glob != nil && !strings.Contains(req.Glob, "/")
		err = walk(r.Context(), root, 0, grepSkipDirs(req.SkipDirs, root), false, func(p string, fi fs.FileInfo) error {
			if glob != nil {
				name := relTo(root, p)
				if baseOnly {
					name = path.Base(p)
				}
				if !glob.match(name) {
					return nil
				}
			}
			return run.visit(p, fi)
		})
	}
	if err != nil && err != errGrepStop {
		run.sum.Error = err.Error()
	}
	run.out.put(run.sum)
	run.out.flush()
}

// grepSkipDirs is the folders a grep of root skips: those asked (nil: the
// defaults), except root's own name.
func grepSkipDirs(skip []string, root string) []string {
	if skip == nil {
		skip = defaultSkipDirs
	}
	if slices.Contains(skip, path.Base(path.Clean(root))) {
		skip = slices.DeleteFunc(slices.Clone(skip), func(s string) bool { return s == path.Base(path.Clean(root)) })
	}
	return skip
}

// grepRun is one grep request's search: it sends each file's matches as
// it finds them and the summary (sum) at the end.
type grepRun struct {
	g        *grepper
	out      *ndjson
	maxSize  int64
	maxLines int
	lines    int // sent so far
	sum      sbxdwire.GrepMessage
}

// errGrepStop ends a grep's walk once it sent maxLines lines.
var errGrepStop = errors.New("stop")

// visit searches the file p and sends its matches.
func (run *grepRun) visit(p string, fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return nil
	}
	if fi.Size() > run.maxSize {
		run.sum.SkippedLarge++
		return nil
	}
	data, err := readSmall(p, run.maxSize)
	if err != nil || bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
		return nil // unreadable or binary: skipped, as grep -s does
	}
	f := run.g.search(p, data)
	if f == nil {
		return nil
	}
	if run.lines+len(f.Lines) > run.maxLines {
		f.Lines = f.Lines[:run.maxLines-run.lines]
		run.sum.Truncated = true
	}
	run.lines += max(len(f.Lines), 1)
	if err := run.out.put(sbxdwire.GrepMessage{File: f}); err != nil {
		return err
	}
	if run.lines >= run.maxLines {
		run.sum.Truncated = true
		return errGrepStop
	}
	return nil
}

// readSmall reads a file of at most limit bytes.
func readSmall(p string, limit int64) ([]byte, error) {
	f, _, err := hostfs.OpenRegular("read", p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}
