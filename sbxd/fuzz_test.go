package sbxd

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The fuzz targets cover everything that decodes bytes from the other end
// of the stream: the exec request header, the output frames, read ranges,
// error answers and glob patterns. Seeds are in testdata/fuzz.

func FuzzDecodeExecRequest(f *testing.F) {
	f.Add(`{"id":"abc","argv":["sh","-c","echo hi"],"env":{"A":"1"},"stdin":true,"timeout_ms":1000}`)
	f.Add(`{"id":"","argv":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := decodeExecRequest(s)
		if err != nil {
			return
		}
		if !validID(r.ID) || len(r.Argv) == 0 || r.Argv[0] == "" || r.TimeoutMS < 0 {
			t.Fatalf("accepted an invalid request: %+v", r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeExecRequest(string(b))
		if err != nil {
			t.Fatalf("re-encoded request rejected: %v", err)
		}
		if r2.ID != r.ID || len(r2.Argv) != len(r.Argv) {
			t.Fatalf("round trip changed the request: %+v -> %+v", r, r2)
		}
	})
}

func FuzzDemux(f *testing.F) {
	f.Add([]byte("\x01\x00\x00\x00\x00\x00\x00\x03out\x02\x00\x00\x00\x00\x00\x00\x03err"))
	f.Add([]byte("\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Add([]byte("\x03\x00\x00\x00\x00\x00\x00\x01x"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out, errb bytes.Buffer
		err := demux(bytes.NewReader(data), &out, &errb)
		if out.Len()+errb.Len() > len(data) {
			t.Fatalf("demux produced %d bytes from %d", out.Len()+errb.Len(), len(data))
		}
		if err == nil {
			// Whatever decoded cleanly encodes back to the same bytes.
			var re bytes.Buffer
			reencode(t, &re, data)
			if !bytes.Equal(re.Bytes(), data) {
				t.Fatalf("frames do not round-trip")
			}
		}
	})
}

// reencode writes data's frames again through frameSink.
func reencode(t *testing.T, w io.Writer, data []byte) {
	sink := &frameSink{w: w, onErr: func(error) {}}
	r := bytes.NewReader(data)
	for {
		var hdr [frameHdrLen]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		n := int(hdr[4])<<24 | int(hdr[5])<<16 | int(hdr[6])<<8 | int(hdr[7])
		p := make([]byte, n)
		io.ReadFull(r, p)
		if n == 0 {
			// A sink never writes empty frames; keep the header as is.
			w.Write(hdr[:])
			continue
		}
		sink.write(hdr[0], p)
	}
}

func FuzzFrameRoundTrip(f *testing.F) {
	f.Add([]byte("hello"), []byte("world"), uint8(3))
	f.Fuzz(func(t *testing.T, a, b []byte, split uint8) {
		var wire bytes.Buffer
		sink := &frameSink{w: &wire, onErr: func(error) {}}
		out := &streamWriter{sink: sink, stream: frameStdout, limit: int64(split)}
		errw := &streamWriter{sink: sink, stream: frameStderr}
		out.Write(a)
		errw.Write(b)
		out.Write(a)
		var gotOut, gotErr bytes.Buffer
		if err := demux(&wire, &gotOut, &gotErr); err != nil {
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
		copyLines(&out, strings.NewReader("a\nb\nc\n"), max(rr.line, 1), min(rr.lines, 10))
		if out.Len() > 6 {
			t.Fatal("copyLines invented bytes")
		}
	})
}

func FuzzResponseError(f *testing.F) {
	f.Add([]byte(`{"code":"not_exist","op":"read","path":"/x","msg":"no such file"}`))
	f.Add([]byte(`{"code":"not_unique","count":3,"msg":"x"}`))
	f.Add([]byte(`<html>`))
	f.Fuzz(func(t *testing.T, body []byte) {
		resp := &http.Response{StatusCode: 404, Status: "404 Not Found", Body: io.NopCloser(bytes.NewReader(body))}
		err := responseError(resp)
		if err == nil {
			t.Fatal("no error")
		}
		_ = err.Error()
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
