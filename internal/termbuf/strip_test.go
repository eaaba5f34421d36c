package termbuf

import (
	"bytes"
	"testing"
)

func TestStrip(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"plain", "hello, world\n", "hello, world\n"},
		{"tab", "a\tb", "a\tb"},
		{"utf8", "grüße ✓\n", "grüße ✓\n"},
		{"crlf", "one\r\ntwo\r\n", "one\ntwo\n"},
		{"lone cr", "10%\r20%\rdone\n", "10%20%done\n"},
		{"colour", "\x1b[1;31mred\x1b[0m plain", "red plain"},
		{"csi private", "\x1b[?2004hprompt$ \x1b[?2004l", "prompt$ "},
		{"csi intermediate", "a\x1b[2 qb", "ab"},
		{"cursor report query", "$ \x1b[6n", "$ "},
		{"osc bel", "\x1b]0;user@host: ~\x07$ ", "$ "},
		{"osc st", "\x1b]8;;https://x.example\x1b\\link\x1b]8;;\x1b\\", "link"},
		{"dcs", "a\x1bPq#0;2;0;0;0\x1b\\b", "ab"},
		{"apc", "a\x1b_data\x1b\\b", "ab"},
		{"two byte", "a\x1b=b\x1b>c\x1b7d\x1b8e", "abcde"},
		{"charset", "a\x1b(Bb\x1b)0c", "abc"},
		{"backspace bell", "ab\bc\x07d", "abcd"},
		{"del", "a\x7fb", "ab"},
		{"ctrl-c echo", "^C\x03\n", "^C\n"},
		{"newline ends a stray csi", "\x1b[12\nnext", "\nnext"},
		{"newline ends a stray osc", "\x1b]0;title\nnext", "\nnext"},
		{"can cancels", "a\x1b[12\x18b", "ab"},
		{"sub cancels osc", "a\x1b]0;t\x1ab", "ab"},
		{"esc in csi starts anew", "a\x1b[1\x1b[2mb", "ab"},
		{"esc esc", "a\x1b\x1b[mb", "ab"},
		{"control inside csi ignored", "a\x1b[1\r;2mb", "ab"},
		{"esc before utf8", "a\x1bé", "aé"},
		{"csi before utf8", "a\x1b[1é", "aé"},
		{"esc in osc not st", "a\x1b]0;t\x1b[mb", "ab"},
		{"utf8 in osc", "\x1b]0;grüße\x07x", "x"},
		{"trailing esc", "abc\x1b", "abc"},
		{"empty", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Strip([]byte(c.in)); got != c.want {
				t.Errorf("Strip(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestStripperPieces: a stream stripped in pieces, split anywhere, gives
// what it gives whole, also when stripped in place.
func TestStripperPieces(t *testing.T) {
	in := []byte("\x1b]0;title\x07\x1b[1;32muser@host\x1b[0m:\x1b[34m~\x1b[0m$ echo hi\r\nhi\r\n\x1bP1$r0m\x1b\\\x1b(B$ ")
	want := Strip(in)
	if want != "user@host:~$ echo hi\nhi\n$ " {
		t.Fatalf("Strip = %q", want)
	}
	for i := 0; i <= len(in); i++ {
		for j := i; j <= len(in); j++ {
			var s Stripper
			var got []byte
			for _, piece := range [][]byte{in[:i], in[i:j], in[j:]} {
				buf := bytes.Clone(piece)
				got = append(got, s.Append(buf[:0], buf)...)
			}
			if string(got) != want {
				t.Fatalf("split at %d and %d: got %q, want %q", i, j, got, want)
			}
		}
	}
}

func FuzzStrip(f *testing.F) {
	for _, s := range []string{
		"plain\n", "a\r\nb\rc", "\x1b[1;31mred\x1b[0m", "\x1b]0;t\x07x", "\x1b]8;;u\x1b\\l", "\x1bPq\x1b\\",
		"\x1b(B\x1b=", "\x1b[12\n", "\x1b\x1b\x1b", "\x1b[\x80", "\x1b]\x1b\x80", "grüße\x7f\b",
	} {
		f.Add([]byte(s), uint(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, in []byte, split uint) {
		out := Strip(in)
		if len(out) > len(in) {
			t.Fatalf("output longer than input: %q from %q", out, in)
		}
		for i := 0; i < len(out); i++ {
			if c := out[i]; (c < 0x20 && c != '\n' && c != '\t') || c == del {
				t.Fatalf("control byte %#x at %d in %q (from %q)", c, i, out, in)
			}
		}
		// Only what the input held, in its order.
		if !subsequence(out, in) {
			t.Fatalf("%q is not a subsequence of %q", out, in)
		}
		// Every newline is kept.
		if bytes.Count(in, []byte("\n")) != bytes.Count([]byte(out), []byte("\n")) {
			t.Fatalf("newlines lost: %q from %q", out, in)
		}
		// Stripping plain text changes nothing.
		if again := Strip([]byte(out)); again != out {
			t.Fatalf("Strip is not idempotent: %q, then %q", out, again)
		}
		// In pieces, in place, the same.
		k := int(split % uint(len(in)+1))
		buf := bytes.Clone(in)
		var s Stripper
		got := string(s.Append(nil, buf[:k]))
		got += string(s.Append(buf[k:k], buf[k:]))
		if got != out {
			t.Fatalf("split at %d: %q, whole: %q (input %q)", k, got, out, in)
		}
	})
}

func subsequence(sub string, s []byte) bool {
	i := 0
	for j := 0; j < len(s) && i < len(sub); j++ {
		if s[j] == sub[i] {
			i++
		}
	}
	return i == len(sub)
}
