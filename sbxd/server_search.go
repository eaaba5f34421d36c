package sbxd

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
)

// GrepRequest is one search (see Client.Grep).
type GrepRequest struct {
	// Pattern is an RE2 regular expression (Go's regexp syntax), or plain
	// text with Literal.
	Pattern    string `json:"pattern"`
	Literal    bool   `json:"literal,omitempty"`
	IgnoreCase bool   `json:"ignore_case,omitempty"`
	// Path is a file or a directory to search below.
	Path string `json:"path"`
	// Glob filters the files of a directory search: on base names when it
	// has no "/", else on paths relative to Path. ** and {a,b} work.
	Glob string `json:"glob,omitempty"`
	// Before and After are lines of context around each match.
	Before int `json:"before,omitempty"`
	After  int `json:"after,omitempty"`
	// FilesOnly stops at a file's first match; CountOnly reports counts
	// without lines.
	FilesOnly bool `json:"files_only,omitempty"`
	CountOnly bool `json:"count_only,omitempty"`
	// MaxFileSize: larger files are skipped and counted (0: 10 MiB).
	MaxFileSize int64 `json:"max_file_size,omitempty"`
	// SkipDirs are directory names (or absolute paths) not searched
	// (nil: .git, .hg, .svn).
	SkipDirs []string `json:"skip_dirs,omitempty"`
	// MaxLines bounds the lines returned over all files (0: 10000); the
	// answer then says it was cut.
	MaxLines int `json:"max_lines,omitempty"`
}

// GrepFile is what one file with matches gave.
type GrepFile struct {
	Path string `json:"path"`
	// Count is the number of matching lines (1 with FilesOnly).
	Count int        `json:"count"`
	Lines []GrepLine `json:"lines,omitempty"`
}

// GrepLine is a matching line, or a context line when Match is false. N is
// its 1-based number; Text has no line ending.
type GrepLine struct {
	N     int    `json:"n"`
	Text  string `json:"text"`
	Match bool   `json:"match,omitempty"`
}

// grepMessage is one NDJSON line of the grep route: a file, or the final
// summary (Done).
type grepMessage struct {
	File         *GrepFile `json:"file,omitempty"`
	Done         bool      `json:"done,omitempty"`
	SkippedLarge int       `json:"skipped_large,omitempty"`
	Truncated    bool      `json:"truncated,omitempty"`
	Error        string    `json:"error,omitempty"`
}

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

// walkDone ends a walk or glob answer: Error is set when it failed part way.
type walkDone struct {
	Done  bool   `json:"done"`
	Error string `json:"error,omitempty"`
}

func (s *Server) handleWalk(w http.ResponseWriter, r *http.Request) {
	var req walkRequest
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
		return out.put(walkEntry{Path: p, Info: toWire(fi)})
	})
	finishWalk(out, err)
}

func finishWalk(out *ndjson, err error) {
	d := walkDone{Done: true}
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
	var req globRequest
	if !readJSON(w, r, "glob", &req) {
		return
	}
	dir, pat := globBase(req.Dir, req.Pattern)
	g, err := compileGlob(pat)
	if err != nil {
		writeError(w, "glob", req.Pattern, fmt.Errorf("%w: glob %q: %v", errInvalid, req.Pattern, err))
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
		return out.put(walkEntry{Path: p, Info: toWire(fi)})
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
	req    GrepRequest
	before int
	after  int
}

func newGrepper(req GrepRequest) (*grepper, error) {
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
func (g *grepper) search(name string, data []byte) *GrepFile {
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
	f := &GrepFile{Path: name}
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
			f.Lines = append(f.Lines, GrepLine{N: c, Text: string(lines[c-1])})
		}
		if n > lastOut {
			f.Lines = append(f.Lines, GrepLine{N: n, Text: string(l), Match: true})
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
				f.Lines = append(f.Lines, GrepLine{N: c, Text: string(lines[c-1])})
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
	var req GrepRequest
	if !readJSON(w, r, "grep", &req) {
		return
	}
	g, err := newGrepper(req)
	if err != nil {
		writeError(w, "grep", req.Pattern, fmt.Errorf("%w: %v", errInvalid, err))
		return
	}
	var glob *globPattern
	if req.Glob != "" {
		if glob, err = compileGlob(req.Glob); err != nil {
			writeError(w, "grep", req.Glob, fmt.Errorf("%w: glob %q: %v", errInvalid, req.Glob, err))
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
	maxSize := req.MaxFileSize
	if maxSize <= 0 {
		maxSize = defaultGrepMaxFileSize
	}
	maxLines := req.MaxLines
	if maxLines <= 0 {
		maxLines = defaultGrepMaxLines
	}
	out := newNDJSON(w)
	var sum grepMessage
	sum.Done = true
	lines := 0
	errStop := errors.New("stop")
	visit := func(p string, fi fs.FileInfo) error {
		if !fi.Mode().IsRegular() {
			return nil
		}
		if fi.Size() > maxSize {
			sum.SkippedLarge++
			return nil
		}
		data, err := readSmall(p, maxSize)
		if err != nil || bytes.IndexByte(data[:min(len(data), binarySniff)], 0) >= 0 {
			return nil // unreadable or binary: skipped, as grep -s does
		}
		f := g.search(p, data)
		if f == nil {
			return nil
		}
		if lines+len(f.Lines) > maxLines {
			f.Lines = f.Lines[:maxLines-lines]
			sum.Truncated = true
		}
		lines += max(len(f.Lines), 1)
		if err := out.put(grepMessage{File: f}); err != nil {
			return err
		}
		if lines >= maxLines {
			sum.Truncated = true
			return errStop
		}
		return nil
	}
	if !fi.IsDir() {
		err = visit(root, fi)
	} else {
		skip := req.SkipDirs
		if skip == nil {
			skip = defaultSkipDirs
		}
		if slices.Contains(skip, path.Base(path.Clean(root))) {
			skip = slices.DeleteFunc(slices.Clone(skip), func(s string) bool { return s == path.Base(path.Clean(root)) })
		}
		baseOnly := glob != nil && !strings.Contains(req.Glob, "/")
		err = walk(r.Context(), root, 0, skip, false, func(p string, fi fs.FileInfo) error {
			if glob != nil {
				name := relTo(root, p)
				if baseOnly {
					name = path.Base(p)
				}
				if !glob.match(name) {
					return nil
				}
			}
			return visit(p, fi)
		})
	}
	if err != nil && err != errStop {
		sum.Error = err.Error()
	}
	out.put(sum)
	out.flush()
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
