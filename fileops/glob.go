package fileops

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
)

// Glob finds the files (everything but directories) under the directory
// dir ("/" when empty) whose path relative to dir matches pattern, newest
// first. An absolute pattern ignores dir. See the package documentation
// for the pattern syntax and the output.
func (t *Tools) Glob(ctx context.Context, pattern, dir string) (string, error) {
	if pattern == "" {
		return "", toolErr(nil, "Error: pattern is empty")
	}
	if dir == "" {
		dir = "/"
	}
	p := pattern
	if path.IsAbs(p) {
		dir = "/"
	}
	for strings.HasPrefix(p, "./") {
		p = p[2:]
	}
	p = strings.TrimLeft(p, "/")
	base, err := t.abs(ctx, dir)
	if err != nil {
		return "", err
	}
	static, rest := splitStatic(p)
	pat, err := compilePattern(rest)
	if err != nil {
		return "", toolErr(err, "Error: Invalid glob pattern '%s': %v", pattern, err)
	}
	searchBase := path.Join(base, static)
	files, truncated, err := t.listFiles(ctx, searchBase, listSpec{depth: pat.depth(), name: pat.lastSegment()})
	if err != nil {
		if static == "" {
			return "", t.dirError(ctx, dir, err)
		}
		if k := classify(err); k != kindNotExist && k != kindNotDir {
			return "", t.dirError(ctx, searchBase, err)
		}
		files = nil // the pattern's fixed directories do not exist
	}
	matches := files[:0]
	for _, f := range files {
		if pat.Match(relTo(searchBase, f.path)) {
			matches = append(matches, f)
		}
	}
	if len(matches) == 0 && !truncated {
		return fmt.Sprintf("No files match '%s' in '%s'.", pattern, dir), nil
	}
	slices.SortFunc(matches, func(a, b fileEntry) int {
		return cmp.Or(cmp.Compare(b.mtime, a.mtime), strings.Compare(a.path, b.path))
	})
	lines := make([]string, 0, min(len(matches), MaxResults)+2)
	for i, m := range matches {
		if i == MaxResults {
			lines = append(lines, fmt.Sprintf("[%d more matches not shown; these are the %d most recently modified]", len(matches)-i, MaxResults))
			break
		}
		lines = append(lines, displayName(m.path))
	}
	if truncated {
		lines = append(lines, "[the file listing was cut short: there are too many files; results may be incomplete. Narrow the path or pattern.]")
	}
	return strings.Join(lines, "\n"), nil
}
