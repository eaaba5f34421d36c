package server

import (
	"strings"
	"testing"
)

// FuzzOSBRange checks the Range header parser of execd's download: a
// range it accepts lies inside the file and is not empty.
func FuzzOSBRange(f *testing.F) {
	for _, s := range []string{"bytes=0-", "bytes=5-9", "bytes=-3", "bytes=9-5", "bytes=0-0,2-3", "bytes=-0", "items=1-2", "bytes=18446744073709551615-"} {
		f.Add(s, int64(10))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		start, n, ok := byteRange(h, size)
		if ok && (start < 0 || n <= 0 || start+n > size) {
			t.Fatalf("byteRange(%q, %d) = %d, %d: outside the file", h, size, start, n)
		}
	})
}

// FuzzOSBRequestValues checks the parsers of the create request's values:
// resource limits and quantities never give negative or zero limits, and
// metadata the label rule accepts is printable and bounded.
func FuzzOSBRequestValues(f *testing.F) {
	f.Add("cpu", "500m", "team", "ml")
	f.Add("memory", "1.5Gi", "a/b", "")
	f.Add("gpu", "-1", "opensandbox.io/x", "y")
	f.Add("memory", "1e300Ti", "-x", "x-")
	f.Fuzz(func(t *testing.T, res, value, key, label string) {
		r, err := osbResources(map[string]string{res: value})
		if err == nil && (r.CPUs < 0 || r.MemoryBytes < 0) {
			t.Fatalf("osbResources(%s=%q) = %+v", res, value, r)
		}
		if osbMetadataProblem(key, label) == "" {
			if len(label) > 63 || strings.ContainsAny(key+label, " \n\x00") || strings.HasPrefix(key, "opensandbox.io/") {
				t.Fatalf("metadata %q=%q accepted", key, label)
			}
		}
	})
}

// FuzzOSBStatRecord checks the reading of a stat record from a sandbox:
// no panic, and a record it reads keeps its path.
func FuzzOSBStatRecord(f *testing.F) {
	f.Add("81a4 12 1700000000 root root /tmp/a b")
	f.Add("41ed 4096 0 UNKNOWN UNKNOWN /")
	f.Add("zz 1 2 3 4 5")
	f.Fuzz(func(t *testing.T, rec string) {
		fi, err := fileJSON(rec)
		if err == nil && !strings.HasSuffix(rec, fi["path"].(string)) {
			t.Fatalf("fileJSON(%q) path %q", rec, fi["path"])
		}
	})
}

// FuzzOSBLineEvents checks that execd's line events lose no byte but the
// line ends, however the output is split.
func FuzzOSBLineEvents(f *testing.F) {
	f.Add([]byte("a\n\nb\r\nc\rd"), uint8(1))
	f.Add([]byte(""), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		var got strings.Builder
		l := &lineEvents{typ: "stdout", emit: func(_, line string) {
			if line != "\n" {
				got.WriteString(line)
			}
		}}
		n := int(chunk%8) + 1
		for rest := data; len(rest) > 0; {
			k := min(n, len(rest))
			l.Write(rest[:k])
			rest = rest[k:]
		}
		l.Flush()
		want := strings.NewReplacer("\n", "", "\r", "").Replace(string(data))
		if got.String() != want {
			t.Fatalf("lines of %q joined = %q, want %q", data, got.String(), want)
		}
	})
}
