package fileops

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// binarySniffLen is how much of a file the binary heuristic looks at, as
// git and grep do.
const binarySniffLen = 8 << 10

// ReadFile prints limit lines of the file at path (DefaultReadLimit when
// limit is 0) starting after the first offset lines, numbered like cat -n.
// See the package documentation for the format. The file is streamed: only
// the lines printed are held in memory.
func (t *Tools) ReadFile(ctx context.Context, path string, offset, limit int) (string, error) {
	if path == "" {
		return "", toolErr(nil, "Error: path is empty")
	}
	if offset < 0 {
		return "", toolErr(nil, "Error: offset must not be negative (got %d)", offset)
	}
	if limit < 0 {
		return "", toolErr(nil, "Error: limit must not be negative (got %d)", limit)
	}
	if limit == 0 {
		limit = DefaultReadLimit
	}
	rc, err := sbfiles.ReadFile(ctx, t.sb, path)
	if err != nil {
		return "", t.fileError(ctx, path, err)
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	sample, err := br.Peek(binarySniffLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", t.fileError(ctx, path, err)
	}
	if len(sample) == 0 {
		return fmt.Sprintf("File '%s' exists but is empty.", path), nil
	}
	if looksBinary(sample, err != nil) {
		return "", toolErr(nil, "Error: '%s' is a binary file; read_file shows text files only.", path)
	}

	for skipped := 0; skipped < offset; skipped++ {
		_, ok, _, err := readLine(br, 0)
		if err != nil {
			return "", t.fileError(ctx, path, err)
		}
		if !ok {
			return "", toolErr(nil, "Error: Line offset %d is past the end of '%s' (the file has %s).",
				offset, path, plural(skipped, "line", "lines"))
		}
	}
	out, err := numberLines(br, offset, limit, MaxReadOutput)
	if err != nil {
		return "", t.fileError(ctx, path, err)
	}
	if out == "" {
		return "", toolErr(nil, "Error: Line offset %d is past the end of '%s' (the file has %s).",
			offset, path, plural(offset, "line", "lines"))
	}
	return out, nil
}

// noteReserve is the room kept in MaxReadOutput for ReadFile's final note
// line (the longest is under 200 bytes).
const noteReserve = 256

// numberLines prints up to limit lines of br, numbered from offset+1, with
// the note that ends a cut or partial answer; the whole answer is at most
// maxOut bytes (MaxReadOutput; the fuzz test passes less). It returns ""
// when br has no line to print.
func numberLines(br *bufio.Reader, offset, limit, maxOut int) (string, error) {
	var b strings.Builder
	room := maxOut - noteReserve // for numbered lines and the newlines between them
	printed := 0
	note := func(format string, args ...any) string {
		return b.String() + "\n" + fmt.Sprintf(format, args...)
	}
	for n := offset + 1; n <= offset+limit; n++ {
		sep := 0
		if printed > 0 {
			sep = 1
		}
		left := room - b.Len() - sep
		if left <= 0 {
			if !hasMore(br) {
				break
			}
			return note("[output cut at %d MiB after line %d; pass offset=%d to read on]", MaxReadOutput>>20, n-1, n-1), nil
		}
		// A numbered line is never shorter than its text, so no more
		// than left bytes of it can be printed.
		line, ok, cut, err := readLine(br, left)
		if err != nil {
			return "", err
		}
		if !ok {
			break
		}
		pieces := appendNumbered(nil, n, line)
		if size := piecesLen(pieces); size > left {
			// It does not fit. A line of one piece goes whole into the
			// next answer; a longer one (or the first) is cut inside.
			if printed > 0 && len(pieces) == 1 {
				return note("[output cut at %d MiB after line %d; pass offset=%d to read on]", MaxReadOutput>>20, n-1, n-1), nil
			}
			pieces, cut = fitPieces(pieces, left), true
		}
		if sep > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.Join(pieces, "\n"))
		printed++
		if cut {
			return note("[output cut at %d MiB inside line %d; pass offset=%d to read on after it, or use execute (e.g. head -c or cut -c) for the rest of the line]",
				MaxReadOutput>>20, n, n), nil
		}
	}
	if printed == 0 {
		return "", nil
	}
	if hasMore(br) { // only a full answer ends with lines left
		return note("[showing lines %d-%d; more lines follow: pass offset=%d to read on]", offset+1, offset+limit, offset+limit), nil
	}
	return b.String(), nil
}

// piecesLen is the length of pieces joined by newlines.
func piecesLen(pieces []string) int {
	n := len(pieces) - 1
	for _, p := range pieces {
		n += len(p)
	}
	return n
}

// fitPieces keeps what fits of pieces in room bytes (joined by newlines):
// the whole pieces that fit, and of the next one its number and as much of
// its text as fits, cut at a character boundary.
func fitPieces(pieces []string, room int) []string {
	var kept []string
	used := 0
	for _, p := range pieces {
		sep := min(len(kept), 1)
		if used+sep+len(p) <= room {
			kept = append(kept, p)
			used += sep + len(p)
			continue
		}
		label, text, _ := strings.Cut(p, "\t")
		if left := room - used - sep - len(label) - 1; left > 0 {
			kept = append(kept, label+"\t"+string(trimCutRune([]byte(text[:left]))))
		}
		break
	}
	return kept
}

func hasMore(br *bufio.Reader) bool {
	rest, _ := br.Peek(1)
	return len(rest) > 0
}

// readLine reads one line without its line ending ("\n" or "\r\n"),
// keeping at most keep bytes of it. ok is false at the end of the file. cut
// reports that the line was longer than keep; the rest of it is then left
// unread. With keep 0 the line is skipped, not stored, so skipping a huge
// line costs no memory.
func readLine(br *bufio.Reader, keep int) (line string, ok, cut bool, err error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		ok = ok || len(chunk) > 0
		if keep > 0 {
			buf = append(buf, chunk...)
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if keep > 0 && len(buf) > keep {
				return string(trimCutRune(buf[:keep])), true, true, nil
			}
			continue
		case errors.Is(err, io.EOF):
			err = nil
		case err != nil:
			return "", false, false, err
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if keep > 0 && len(buf) > keep {
			return string(trimCutRune(buf[:keep])), true, true, nil
		}
		return string(buf), ok, false, nil
	}
}

// trimCutRune drops an incomplete UTF-8 sequence at the end of p.
func trimCutRune(p []byte) []byte {
	if i := lastRuneStart(p); i >= 0 && !utf8.FullRune(p[i:]) {
		return p[:i]
	}
	return p
}

// appendNumbered appends line n in cat -n format ("%6d\t<line>"). A line
// longer than MaxLineLength characters becomes pieces of that length
// numbered "n.1", "n.2", ... (right-aligned in the same six columns).
// Invalid UTF-8 is shown as U+FFFD.
func appendNumbered(out []string, n int, line string) []string {
	line = strings.ToValidUTF8(line, "\uFFFD")
	if utf8.RuneCountInString(line) <= MaxLineLength {
		return append(out, fmt.Sprintf("%6d\t%s", n, line))
	}
	for piece := 1; line != ""; piece++ {
		end, count := 0, 0
		for end < len(line) && count < MaxLineLength {
			_, size := utf8.DecodeRuneInString(line[end:])
			end += size
			count++
		}
		out = append(out, fmt.Sprintf("%6s\t%s", fmt.Sprintf("%d.%d", n, piece), line[:end]))
		line = line[end:]
	}
	return out
}

// looksBinary reports whether a file starting with sample is binary: it has
// a NUL byte, or more than a tenth of it is invalid UTF-8 or control
// characters other than the usual whitespace, backspace and escape. atEOF
// says sample is the whole file; otherwise a rune cut at its end is not
// held against it.
func looksBinary(sample []byte, atEOF bool) bool {
	if bytes.IndexByte(sample, 0) >= 0 {
		return true
	}
	bad := 0
	for i := 0; i < len(sample); {
		r, size := utf8.DecodeRune(sample[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			if !atEOF && !utf8.FullRune(sample[i:]) {
				i = len(sample)
				continue
			}
			bad++
		case r < 0x20 && !strings.ContainsRune("\t\n\r\f\v\b\x1b", r), r == 0x7f:
			bad++
		}
		i += max(size, 1)
	}
	return bad*10 > len(sample)
}
