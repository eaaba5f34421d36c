package agent

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// The fuzz targets here cover what the agent decodes from the client
// beyond the wire package's own decoders (fuzzed in internal/sbxdwire):
// read ranges, glob patterns, and the limited output streams the frames
// carry back. Seeds are in testdata/fuzz.

func FuzzFrameRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), []byte("world"), uint8(3))
	f.Fuzz(func(t *testing.T, a, b []byte, split uint8) {
		var wire bytes.Buffer
		sink := sbxdwire.NewFrameSink(&wire, nil, func(error) {})
		out := &streamWriter{sink: sink, stream: sbxdwire.FrameStdout, limit: int64(split)}
		errw := &streamWriter{sink: sink, stream: sbxdwire.FrameStderr}
		out.Write(a)
		errw.Write(b)
		out.Write(a)
		var gotOut, gotErr bytes.Buffer
		if err := sbxdwire.Demux(&wire, &gotOut, &gotErr); err != nil {
			t.Fatal(err)
		}
		want := append(append([]byte{}, a...), a...)
		if split > 0 && len(want) > int(split) {
			want = want[:split]
			if !out.truncated {
				t.Fatal("not marked truncated")
			}
		}
		if !bytes.Equal(gotOut.Bytes(), want) || !bytes.Equal(gotErr.Bytes(), b) {
			t.Fatalf("got %q, %q", gotOut.Bytes(), gotErr.Bytes())
		}
	})
}

func FuzzParseRange(f *testing.F) {
	f.Add("path=/a&offset=3&length=10")
	f.Add("line=2&lines=5")
	f.Add("offset=-1")
	f.Fuzz(func(t *testing.T, q string) {
		v, err := url.ParseQuery(q)
		if err != nil {
			return
		}
		rr, err := parseRange(v)
		if err != nil {
			return
		}
		if rr.offset < 0 || rr.line < 0 || rr.lines < 0 || (rr.line > 0 && (rr.offset != 0 || rr.length >= 0)) {
			t.Fatalf("accepted %q as %+v", q, rr)
		}
		var out bytes.Buffer
		sbxdwire.CopyLines(&out, strings.NewReader("a\nb\nc\n"), max(rr.line, 1), min(rr.lines, 10))
		if out.Len() > 6 {
			t.Fatal("CopyLines invented bytes")
		}
	})
}

func FuzzGlob(f *testing.F) {
	f.Add("**/*.go", "a/b/c.go")
	f.Add("src/{a,b{c,d}}/*.ts", "src/bd/x.ts")
	f.Add("**/**/**/x/**/y", "x/y/x/y/x/y/x/y/x/y")
	f.Add("[", "a")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := compileGlob(pattern)
		if err != nil {
			return
		}
		g.match(name)
		g.maxDepth()
		g.staticPrefix()
	})
}
