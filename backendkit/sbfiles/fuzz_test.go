package sbfiles

import (
	"fmt"
	"strings"
	"testing"
)

// FuzzStatRecords: whatever a sandbox prints, StatRecords neither panics
// nor returns an empty record, and a record framed the way
// StatBatchScript and sbxd ls frame it comes back whole after any complete
// output, whatever the file name (spaces, newlines, what looks like other
// records).
func FuzzStatRecords(f *testing.F) {
	f.Add([]byte("81a4 3 1700000000 /t/a\n\x0041ed 0 0 /t/n\nd\x00"), "evil\n41ed 0 0 FAKE_DIR", uint32(0o100644), int64(3), int64(1700000000))
	f.Add([]byte("\x00cut"), "plain", uint32(0o40755), int64(0), int64(-1))
	f.Add([]byte("\n\n\x00\x00"), " sp ace ", uint32(0o120777), int64(7), int64(0))
	f.Fuzz(func(t *testing.T, out []byte, name string, mode uint32, size, mtime int64) {
		records, complete := StatRecords(out)
		for _, r := range records {
			if r == "" {
				t.Fatalf("record %q from %q", r, out)
			}
			ParseStatLine(r) // must not panic
		}
		if name == "" || strings.ContainsAny(name, "/\x00") || size < 0 {
			return // not a file name, or not a size
		}
		line := fmt.Sprintf("%x %d %d %s", mode, size, mtime, name)
		framed := line + "\n"
		if strings.Contains(name, "\n") {
			framed = "\x00" + line + "\x00"
		}
		var prefix []byte
		if complete {
			prefix = out
		}
		all, ok := StatRecords(append(prefix[:len(prefix):len(prefix)], framed...))
		if !ok || len(all) == 0 || all[len(all)-1] != line {
			t.Fatalf("after %q, %q came back as %q (complete %v)", prefix, framed, all, ok)
		}
		fi, err := ParseStatLine(line)
		if err != nil {
			t.Fatalf("ParseStatLine(%q): %v", line, err)
		}
		if fi.Name() != name || fi.Size() != size || fi.ModTime().Unix() != mtime || fi.Mode() != ModeFromUnix(mode) {
			t.Fatalf("ParseStatLine(%q) = %q %d %d %v", line, fi.Name(), fi.Size(), fi.ModTime().Unix(), fi.Mode())
		}
	})
}

// FuzzParseStatLine: a stat line never panics the parser, and what it
// accepts prints back to a line it reads the same way.
func FuzzParseStatLine(f *testing.F) {
	for _, s := range []string{"81a4 3 1700000000 /t/a", "41ed 4096 0", "a1ff 7 -5 x y z", "zz 1 1 a", "81a4 -1 0 a", "81a4 1 1 a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		fi, err := ParseStatLine(line)
		if err != nil {
			return
		}
		if fi.Size() < 0 {
			t.Fatalf("ParseStatLine(%q): negative size %d", line, fi.Size())
		}
		parts := strings.SplitN(line, " ", 4)
		again := fmt.Sprintf("%s %d %d", parts[0], fi.Size(), fi.ModTime().Unix())
		if len(parts) == 4 {
			again += " " + parts[3]
		}
		fi2, err := ParseStatLine(again)
		if err != nil || fi2.Name() != fi.Name() || fi2.Size() != fi.Size() || fi2.Mode() != fi.Mode() || !fi2.ModTime().Equal(fi.ModTime()) {
			t.Fatalf("%q then %q: %v", line, again, err)
		}
	})
}
