package fileops

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzNumberLines: read_file's answer is never longer than its cap,
// whatever the file holds (invalid UTF-8 grows as U+FFFD; long lines come
// in numbered pieces) and whatever offset and limit ask for.
func FuzzNumberLines(f *testing.F) {
	f.Add([]byte("a\nb\r\nc"), 0, 2, 400)
	f.Add(bytes.Repeat([]byte("\xff"), 3000), 0, 5, 300)
	f.Add([]byte(strings.Repeat("x", 12000)+"\ny\n"), 1, 1000, 9000)
	f.Fuzz(func(t *testing.T, data []byte, offset, limit, maxOut int) {
		offset = min(max(offset, 0), 1<<20)
		limit = min(max(limit, 1), 1<<20)
		maxOut = noteReserve + 16 + abs(maxOut)%(64<<10)
		br := bufio.NewReader(bytes.NewReader(data))
		for range offset {
			if _, ok, _, _ := readLine(br, 0); !ok {
				return
			}
		}
		out, err := numberLines(br, offset, limit, maxOut)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) > maxOut {
			t.Fatalf("answer of %d bytes, cap %d", len(out), maxOut)
		}
		if len(data) > 0 && offset == 0 && out == "" {
			t.Fatalf("nothing printed of %q", data)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -(n + 1)
	}
	return n
}

// FuzzParseListLine: a record of the listing script never panics the
// parser, and a record it printed for any absolute path comes back.
func FuzzParseListLine(f *testing.F) {
	f.Add("12 1700000000 /a/b c", "/x\ny", int64(5), int64(-3))
	f.Add("1 2 rel", "/", int64(0), int64(0))
	f.Fuzz(func(t *testing.T, line, p string, size, mtime int64) {
		if e, ok := parseListLine(line); ok && !path.IsAbs(e.path) {
			t.Fatalf("parseListLine(%q): relative path %q", line, e.path)
		}
		if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
			return
		}
		e, ok := parseListLine(fmt.Sprintf("%d %d %s", size, mtime, p))
		if !ok || e.path != p || e.size != size || e.mtime != mtime {
			t.Fatalf("%d %d %q came back as %+v, %v", size, mtime, p, e, ok)
		}
	})
}

// FuzzDisplayName: a name is printed on one line with no control
// character, as it is or as a Go string literal that reads back to it; a
// name printed as it is cannot look like a quoted one.
func FuzzDisplayName(f *testing.F) {
	for _, s := range []string{"plain", "evil\n41ed 0 0 FAKE_DIR", `"a\nb"`, "tab\there", "\xff", "é", "\u0085"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := displayName(name)
		for _, r := range got {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("displayName(%q) = %q holds a control character", name, got)
			}
		}
		if !utf8.ValidString(got) {
			t.Fatalf("displayName(%q) = %q is not UTF-8", name, got)
		}
		if got == name {
			if strings.HasPrefix(name, `"`) {
				t.Fatalf("displayName(%q) left a leading quote", name)
			}
			return
		}
		if back, err := strconv.Unquote(got); err != nil || back != name {
			t.Fatalf("displayName(%q) = %q reads back as %q, %v", name, got, back, err)
		}
	})
}
