package sbxdwire_test

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/sandboxkit/sandboxkit/internal/sbxdwire"
)

// The fuzz targets here cover the wire's decoders that both ends rely on:
// the exec request header (the agent's) and the output frames (the
// client's). The agent's (read ranges, glob patterns, limited streams)
// are in package sbxd/agent, the client's error answers in package sbxd.
// Seeds are in testdata/fuzz.

func FuzzDecodeExecRequest(f *testing.F) {
	f.Add(`{"id":"abc","argv":["sh","-c","echo hi"],"env":{"A":"1"},"stdin":true,"timeout_ms":1000}`)
	f.Add(`{"id":"","argv":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		r, err := sbxdwire.DecodeExecRequest(s)
		if err != nil {
			return
		}
		if !sbxdwire.ValidID(r.ID) || len(r.Argv) == 0 || r.Argv[0] == "" || r.TimeoutMS < 0 {
			t.Fatalf("accepted an invalid request: %+v", r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := sbxdwire.DecodeExecRequest(string(b))
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
		err := sbxdwire.Demux(bytes.NewReader(data), &out, &errb)
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

// reencode writes data's frames again through a FrameSink.
func reencode(t *testing.T, w io.Writer, data []byte) {
	sink := sbxdwire.NewFrameSink(w, nil, func(error) {})
	r := bytes.NewReader(data)
	for {
		var hdr [sbxdwire.FrameHdrLen]byte
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
		sink.WriteFrame(hdr[0], p)
	}
}
