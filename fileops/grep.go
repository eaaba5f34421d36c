package fileops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// GrepMode selects what Grep prints.
type GrepMode string

const (
	// GrepFilesWithMatches prints the path of each file with a match
	// (the default).
	GrepFilesWithMatches GrepMode = "files_with_matches"
	// GrepContent prints matching lines as path:line:text, with context
	// lines as path-line-text.
	GrepContent GrepMode = "content"
	// GrepCount prints path:N, the number of matching lines, for each file
	// with a match.
	GrepCount GrepMode = "count"
)

// GrepRequest is one search.
type GrepRequest struct {
	// Pattern is an RE2 regular expression (Go's regexp syntax), or plain
	// text with Literal.
	Pattern string
	// Path is a file or directory to search ("." when empty).
	Path string
	// Glob limits a directory search to files matching it: against the
	// base name when it has no "/" ("*.go", "*.{ts,tsx}"), else against
	// the path relative to Path ("src/**/*.go").
	Glob string
	// Mode is GrepFilesWithMatches when empty.
	Mode GrepMode
	// Before, After and Context are lines of context in content mode, as
	// grep's -B, -A and -C; Before and After win over Context.
	Before, After, Context int
	// Literal matches Pattern as plain text.
	Literal bool
	// IgnoreCase matches case-insensitively.
	IgnoreCase bool
}

// grepWorkers is how many files Grep reads at once, to hide the latency of
// backends that need a round trip per file.
const grepWorkers = 8

// Grep searches the files under req.Path for lines matching req.Pattern.
// Matching happens on the host with Go's regexp (RE2), so every sandbox
// gives the same results. Binary files (a NUL byte in their first 8 KiB)
// and files over MaxGrepFileSize are skipped; directories named .git, .hg
// or .svn are not searched. See the package documentation for the output.
func (t *Tools) Grep(ctx context.Context, req GrepRequest) (string, error) {
	if req.Pattern == "" {
		return "", toolErr(nil, "Error: pattern is empty")
	}
	mode := req.Mode
	switch mode {
	case "":
		mode = GrepFilesWithMatches
	case GrepFilesWithMatches, GrepContent, GrepCount:
	default:
		return "", toolErr(nil, "Error: Unknown grep mode '%s' (use files_with_matches, content or count)", mode)
	}
	if req.Before < 0 || req.After < 0 || req.Context < 0 {
		return "", toolErr(nil, "Error: context line counts must not be negative")
	}
	before, after := req.Before, req.After
	if before == 0 {
		before = req.Context
	}
	if after == 0 {
		after = req.Context
	}
	expr := req.Pattern
	if req.Literal {
		expr = regexp.QuoteMeta(expr)
	}
	if req.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return "", toolErr(err, "Error: Invalid regular expression '%s': %v. Pass literal=true to search for the text as it is.",
			req.Pattern, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	var glob *pattern
	if req.Glob != "" {
		if glob, err = compilePattern(req.Glob); err != nil {
			return "", toolErr(err, "Error: Invalid glob pattern '%s': %v", req.Glob, err)
		}
	}
	dir := req.Path
	if dir == "" {
		dir = "."
	}
	base, err := t.abs(ctx, dir)
	if err != nil {
		return "", err
	}
	files, listTruncated, err := t.grepCandidates(ctx, base, req.Glob, glob)
	if err != nil {
		return "", t.dirError(ctx, dir, err)
	}

	g := &grepper{re: re, mode: mode, before: before, after: after}
	var skippedLarge int
	var toSearch []fileEntry
	for _, f := range files {
		if f.size > MaxGrepFileSize {
			skippedLarge++
			continue
		}
		toSearch = append(toSearch, f)
	}
	lines, cut, err := t.searchFiles(ctx, g, toSearch)
	if err != nil {
		return "", err
	}
	var notes []string
	if cut {
		notes = append(notes, fmt.Sprintf("[output cut at %d lines; narrow the search with path, glob or a more specific pattern]", MaxResults))
	}
	if skippedLarge > 0 {
		notes = append(notes, fmt.Sprintf("[%s over %d MiB not searched]", plural(skippedLarge, "file", "files"), MaxGrepFileSize>>20))
	}
	if listTruncated {
		notes = append(notes, "[the file listing was cut short: there are too many files; results may be incomplete. Narrow the path or glob.]")
	}
	if len(lines) == 0 {
		return strings.Join(append([]string{fmt.Sprintf("No matches for '%s' in '%s'.", req.Pattern, dir)}, notes...), "\n"), nil
	}
	return strings.Join(append(lines, notes...), "\n"), nil
}

// grepCandidates returns the files to search under base, sorted by path: base
// itself when it is a file, else the regular files below it that match glob.
func (t *Tools) grepCandidates(ctx context.Context, base, globText string, glob *pattern) ([]fileEntry, bool, error) {
	fi, err := sbfiles.Stat(ctx, t.sb, base)
	if err != nil {
		return nil, false, err
	}
	if !fi.IsDir() {
		return []fileEntry{{path: base, size: fi.Size()}}, false, nil
	}
	spec := listSpec{regular: true, skipVCS: !slices.Contains(vcsDirs, path.Base(base))}
	baseNameOnly := glob != nil && !strings.Contains(globText, "/")
	if glob != nil {
		spec.name = glob.lastSegment()
		if !baseNameOnly && !glob.recursive() {
			spec.depth = glob.depth()
		}
	}
	files, truncated, err := t.listFiles(ctx, base, spec)
	if err != nil {
		return nil, false, err
	}
	if glob != nil {
		kept := files[:0]
		for _, f := range files {
			name := relTo(base, f.path)
			if baseNameOnly {
				name = path.Base(f.path)
			}
			if glob.Match(name) {
				kept = append(kept, f)
			}
		}
		files = kept
	}
	slices.SortFunc(files, func(a, b fileEntry) int { return strings.Compare(a.path, b.path) })
	return files, truncated, nil
}

// searchFiles searches files concurrently and returns the output lines in
// file order, stopping once MaxResults lines are out (cut is then true).
func (t *Tools) searchFiles(ctx context.Context, g *grepper, files []fileEntry) (lines []string, cut bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel() // stop the workers before waiting for them
		wg.Wait()
	}()
	type result struct {
		lines []string
		err   error
	}
	results := make([]chan result, len(files))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	// A slot is taken when a file's search starts and given back when its
	// result is consumed, so at most grepWorkers results are held at once.
	sem := make(chan struct{}, grepWorkers)
	wg.Go(func() {
		for i, f := range files {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				lines, err := t.searchFile(ctx, g, f.path)
				results[i] <- result{lines, err}
			})
		}
	})
	first := true
	for i := range files {
		var r result
		select {
		case r = <-results[i]:
			<-sem
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
		if r.err != nil {
			return nil, false, r.err
		}
		if len(r.lines) == 0 {
			continue
		}
		if g.mode == GrepContent && (g.before > 0 || g.after > 0) && !first {
			lines = append(lines, "--")
		}
		first = false
		for _, l := range r.lines {
			if len(lines) == MaxResults {
				return lines, true, nil
			}
			lines = append(lines, l)
		}
	}
	return lines, false, nil
}

// searchFile returns the output lines for one file. Files that vanished or
// cannot be read are skipped, as grep -s does; errors that are not about
// the file (a backend down, a cancelled context) are returned.
func (t *Tools) searchFile(ctx context.Context, g *grepper, name string) ([]string, error) {
	rc, err := sbfiles.ReadFile(ctx, t.sb, name)
	if err != nil {
		return nil, skipFileError(ctx, err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, MaxGrepFileSize+1))
	rc.Close()
	if err != nil {
		return nil, skipFileError(ctx, err)
	}
	if len(data) > MaxGrepFileSize || bytes.IndexByte(data[:min(len(data), binarySniffLen)], 0) >= 0 {
		return nil, nil
	}
	return g.search(name, data), nil
}

func skipFileError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, ok := errors.AsType[*fs.PathError](err); ok {
		return nil
	}
	return err
}

// grepper formats the matches of one file.
type grepper struct {
	re            *regexp.Regexp
	mode          GrepMode
	before, after int
}

func (g *grepper) search(name string, data []byte) []string {
	name = displayName(name)
	text := string(data)
	text = strings.TrimSuffix(text, "\n")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	var out []string
	count := 0
	lastShown := -1  // index of the last line printed
	afterUntil := -1 // print non-matching lines up to this index as context
	for i, l := range lines {
		if len(out) > MaxResults {
			break // more than can be printed
		}
		if !g.re.MatchString(l) {
			if g.mode == GrepContent && i <= afterUntil {
				out = append(out, contentLine(name, i+1, '-', l))
				lastShown = i
			}
			continue
		}
		count++
		switch g.mode {
		case GrepFilesWithMatches:
			return []string{name}
		case GrepContent:
			start := max(i-g.before, lastShown+1)
			if lastShown >= 0 && start > lastShown+1 && (g.before > 0 || g.after > 0) {
				out = append(out, "--")
			}
			for j := start; j < i; j++ {
				out = append(out, contentLine(name, j+1, '-', lines[j]))
			}
			out = append(out, contentLine(name, i+1, ':', l))
			lastShown = i
			afterUntil = i + g.after
		}
	}
	if g.mode == GrepCount && count > 0 {
		return []string{name + ":" + strconv.Itoa(count)}
	}
	return out
}

// contentLine formats path:N:text (sep ':') or path-N-text (sep '-', a
// context line), cutting text at MaxGrepLineLength characters.
func contentLine(name string, n int, sep byte, text string) string {
	text = strings.ToValidUTF8(text, "\uFFFD")
	if utf8.RuneCountInString(text) > MaxGrepLineLength {
		cut := 0
		for i := 0; i < MaxGrepLineLength; i++ {
			_, size := utf8.DecodeRuneInString(text[cut:])
			cut += size
		}
		text = text[:cut] + " [line cut]"
	}
	return name + string(sep) + strconv.Itoa(n) + string(sep) + text
}
