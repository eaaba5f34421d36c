package fileops

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"strings"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/hostfs"
)

// DefaultFileMode is the mode of files WriteFile creates.
const DefaultFileMode fs.FileMode = 0o644

// WriteFile creates a new file with content, creating missing parent
// directories. It refuses to replace an existing file: agents change files
// with EditFile, which makes them say what they replace. (The existence
// check and the write are two steps; a file created in between by someone
// else is overwritten.)
func (t *Tools) WriteFile(ctx context.Context, path, content string) (string, error) {
	if path == "" {
		return "", toolErr(nil, "Error: path is empty")
	}
	fi, err := sbfiles.Stat(ctx, t.sb, path)
	switch {
	case err == nil && fi.IsDir():
		return "", toolErr(fs.ErrExist, "Error: '%s' is a directory, not a file.", path)
	case err == nil:
		return "", toolErr(fs.ErrExist, "Error: File already exists: '%s'. Use edit_file to change an existing file.", path)
	case classify(err) == kindNotExist:
	default:
		return "", t.writeError(path, err)
	}
	if err := sbfiles.WriteFile(ctx, t.sb, path, strings.NewReader(content), DefaultFileMode); err != nil {
		return "", t.writeError(path, err)
	}
	return "Created file '" + path + "' (" + plural(len(content), "byte", "bytes") + ").", nil
}

func (t *Tools) writeError(path string, err error) error {
	switch classify(err) {
	case kindPermission:
		return toolErr(err, "Error: Permission denied: '%s'", path)
	case kindNotDir:
		return toolErr(err, "Error: Cannot create '%s': a parent path is not a directory.", path)
	case kindIsDir:
		return toolErr(err, "Error: '%s' is a directory, not a file.", path)
	}
	return err
}

// EditFile replaces oldString with newString in the file at path: exactly
// one occurrence, or every occurrence with replaceAll. The match is exact,
// except that in a file with CRLF line endings a "\n" in oldString and
// newString stands for "\r\n", so the file keeps its line endings. The
// file keeps its permission bits.
func (t *Tools) EditFile(ctx context.Context, path, oldString, newString string, replaceAll bool) (string, error) {
	if path == "" {
		return "", toolErr(nil, "Error: path is empty")
	}
	if oldString == "" {
		return "", toolErr(nil, "Error: old_string is empty. Use write_file to create a new file.")
	}
	if oldString == newString {
		return "", toolErr(nil, "Error: old_string and new_string are identical; there is nothing to replace.")
	}
	fi, err := sbfiles.Stat(ctx, t.sb, path)
	if err != nil {
		return "", t.fileError(ctx, path, err)
	}
	if fi.IsDir() {
		return "", toolErr(nil, "Error: '%s' is a directory, not a file. Use ls to list it.", path)
	}
	if !fi.Mode().IsRegular() {
		return "", notRegular(&fs.PathError{Op: "edit", Path: path, Err: backend.ErrNotRegular}, path, hostfs.Kind(fi.Mode()))
	}
	if fi.Size() > MaxEditFileSize {
		return "", toolErr(nil, "Error: '%s' is too large to edit (%d bytes; the limit is %d MiB).", path, fi.Size(), MaxEditFileSize>>20)
	}
	rc, err := sbfiles.ReadFile(ctx, t.sb, path)
	if err != nil {
		return "", t.fileError(ctx, path, err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, MaxEditFileSize+1))
	rc.Close()
	if err != nil {
		return "", t.fileError(ctx, path, err)
	}
	if len(data) > MaxEditFileSize {
		return "", toolErr(nil, "Error: '%s' is too large to edit (the limit is %d MiB).", path, MaxEditFileSize>>20)
	}
	if bytes.IndexByte(data[:min(len(data), binarySniffLen)], 0) >= 0 {
		return "", toolErr(nil, "Error: '%s' is a binary file; edit_file edits text files only.", path)
	}
	content := string(data)

	oldS, newS, n := matchEdit(content, oldString, newString)
	switch {
	case n == 0:
		return "", toolErr(nil, "Error: old_string not found in '%s'. It must match the file's text exactly, including whitespace and indentation.", path)
	case n > 1 && !replaceAll:
		return "", toolErr(nil, "Error: old_string occurs %d times in '%s'. Pass replace_all=true to replace all %d, or include more surrounding text to make it unique.", n, path, n)
	}
	if replaceAll {
		content = strings.ReplaceAll(content, oldS, newS)
	} else {
		content = strings.Replace(content, oldS, newS, 1)
	}
	if err := sbfiles.WriteFile(ctx, t.sb, path, strings.NewReader(content), fi.Mode().Perm()); err != nil {
		return "", t.writeError(path, err)
	}
	return "Replaced " + plural(n, "occurrence", "occurrences") + " in '" + path + "'.", nil
}

// matchEdit returns the strings to replace in content and how often old
// occurs. In a file that uses CRLF line endings, old and new are first
// tried with their bare "\n" turned into "\r\n" (agents usually send "\n");
// if that does not match, they are used as given.
func matchEdit(content, old, new string) (string, string, int) {
	if strings.Contains(content, "\r\n") {
		oldC, newC := toCRLF(old), toCRLF(new)
		if n := strings.Count(content, oldC); n > 0 || oldC == old {
			return oldC, newC, n
		}
	}
	return old, new, strings.Count(content, old)
}

// toCRLF turns every line ending in s into "\r\n".
func toCRLF(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n")
}
