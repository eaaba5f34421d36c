package mountinfo

import (
	"strings"
	"testing"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		"/plain":            "/plain",
		`/a\040b`:           "/a b",
		`/tab\011and\134bs`: "/tab\tand\\bs",
		`/new\012line`:      "/new\nline",
		`/short\04`:         `/short\04`, // too few digits: left as is
		`/not\08x`:          `/not\08x`,  // not octal
		`/big\777`:          `/big\777`,  // beyond a byte
		`\040\040`:          "  ",
		`/end\`:             `/end\`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzUnescape: the kernel escapes a space, tab, newline and backslash as
// \ooo; undoing that is the inverse of doing it.
func FuzzUnescape(f *testing.F) {
	f.Add("/a b\tc\nd\\e")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			switch c := s[i]; c {
			case ' ', '\t', '\n', '\\':
				b.WriteByte('\\')
				b.WriteByte('0' + c>>6)
				b.WriteByte('0' + c>>3&7)
				b.WriteByte('0' + c&7)
			default:
				b.WriteByte(c)
			}
		}
		if got := Unescape(b.String()); got != s {
			t.Fatalf("Unescape(%q) = %q, want %q", b.String(), got, s)
		}
	})
}
