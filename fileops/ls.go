package fileops

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// Ls lists the directory at path, one entry a line, sorted by name: type,
// size, modification time (UTC) and name, directories marked with a
// trailing "/". See the package documentation for the format.
func (t *Tools) Ls(ctx context.Context, path string) (string, error) {
	if path == "" {
		path = "."
	}
	infos, err := sbfiles.ReadDir(ctx, t.sb, path)
	if err != nil {
		return "", t.dirError(ctx, path, err)
	}
	if len(infos) == 0 {
		return fmt.Sprintf("Directory '%s' is empty.", path), nil
	}
	sbfiles.SortByName(infos)
	lines := make([]string, 0, min(len(infos), MaxResults)+1)
	for i, fi := range infos {
		if i == MaxResults {
			lines = append(lines, fmt.Sprintf("[%d more entries not shown; the listing is cut at %d]", len(infos)-i, MaxResults))
			break
		}
		lines = append(lines, formatEntry(fi))
	}
	return strings.Join(lines, "\n"), nil
}

// formatEntry formats one ls line: "%-7s %10s  %s  %s" with the type, the
// size ("-" for directories, whose size means little), the RFC 3339 UTC
// modification time and the name.
func formatEntry(fi fs.FileInfo) string {
	size, name := strconv.FormatInt(fi.Size(), 10), displayName(fi.Name())
	if fi.IsDir() {
		size, name = "-", name+"/"
	}
	return fmt.Sprintf("%-7s %10s  %s  %s", fileType(fi.Mode()), size, fi.ModTime().UTC().Format(time.RFC3339), name)
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m.IsRegular():
		return "file"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "other"
}

// displayName is a file name or path as the tools print it: as it is, or,
// when it holds a control character (a newline, a tab, ...) or invalid
// UTF-8 or starts with a double quote, as a Go string literal ("a\nb"),
// so that a name can neither break an answer's one-entry-a-line layout
// nor pass for other entries.
func displayName(s string) string {
	// A name that starts with a quote is quoted too, so that it cannot
	// pass for a quoted one.
	if !utf8.ValidString(s) || strings.HasPrefix(s, `"`) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return strconv.Quote(s)
		}
	}
	return s
}
