package sbxdwire

import (
	"encoding/binary"
	"io"
)

// yamux writes each frame to the connection in two calls, its 12-byte
// header and then its body. Over an attached exec each write is relayed
// through the container engine separately, so for small frames (requests,
// short answers) the header is held and sent with the body in one write:
// half the relays per round trip.
const (
	yamuxHeaderLen = 12
	yamuxTypeData  = 0
	// coalesceMax: larger bodies are written as they are (one more small
	// write costs less than copying them).
	coalesceMax = 64 << 10
)

// NewCoalescingWriter returns w with small yamux data frames written in one
// call. It is for one writer goroutine (yamux's send loop).
func NewCoalescingWriter(w io.Writer) io.Writer { return &coalescer{w: w} }

type coalescer struct {
	w    io.Writer
	hdr  [yamuxHeaderLen]byte
	held bool
	buf  []byte
}

func (c *coalescer) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		c.buf = append(append(c.buf[:0], c.hdr[:]...), p...)
		if _, err := c.w.Write(c.buf); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if len(p) == yamuxHeaderLen && p[1] == yamuxTypeData {
		if n := binary.BigEndian.Uint32(p[8:]); n > 0 && n <= coalesceMax {
			copy(c.hdr[:], p)
			c.held = true
			return len(p), nil
		}
	}
	return c.w.Write(p)
}
