package sbxdwire

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"
)

// Output frames: the exec and terminal routes' response bodies are a
// sequence of frames in Docker's stdcopy layout, an 8-byte header (stream,
// 0, 0, 0, big-endian uint32 length) then the payload.
const (
	FrameStdout   = 1
	FrameStderr   = 2
	FrameHdrLen   = 8
	MaxFrameBytes = 1 << 20
)

// ErrBadFrame: the output stream is not made of valid frames.
var ErrBadFrame = errors.New("malformed output frame")

// FrameSink writes frames to w, one writer at a time, calling flush (when
// set) after each so that output streams while a command runs. After a
// failed write every write fails with the same error; onErr is told once.
type FrameSink struct {
	mu    sync.Mutex
	w     io.Writer
	flush func() error
	err   error
	onErr func(error)
}

// NewFrameSink returns a sink writing to w. flush may be nil; onErr must
// not be.
func NewFrameSink(w io.Writer, flush func() error, onErr func(error)) *FrameSink {
	return &FrameSink{w: w, flush: flush, onErr: onErr}
}

// WriteFrame writes p to stream (FrameStdout or FrameStderr), split into
// frames of at most MaxFrameBytes; an empty p writes nothing.
func (f *FrameSink) WriteFrame(stream byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	for len(p) > 0 {
		n := min(len(p), MaxFrameBytes)
		var hdr [FrameHdrLen]byte
		hdr[0] = stream
		binary.BigEndian.PutUint32(hdr[4:], uint32(n))
		_, err := f.w.Write(hdr[:])
		if err == nil {
			_, err = f.w.Write(p[:n])
		}
		if err == nil && f.flush != nil {
			err = f.flush()
		}
		if err != nil {
			f.err = err
			f.onErr(err)
			return err
		}
		p = p[n:]
	}
	return nil
}

// Demux copies frames from r to stdout and stderr until the end of r.
// Frames are never held whole: a payload is copied through a small buffer,
// so memory stays bounded whatever the other end sends.
func Demux(r io.Reader, stdout, stderr io.Writer) error {
	var hdr [FrameHdrLen]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if hdr[1]|hdr[2]|hdr[3] != 0 || n > MaxFrameBytes {
			return ErrBadFrame
		}
		var dst io.Writer
		switch hdr[0] {
		case FrameStdout:
			dst = stdout
		case FrameStderr:
			dst = stderr
		default:
			return ErrBadFrame
		}
		got, err := io.CopyBuffer(dst, io.LimitReader(r, int64(n)), buf)
		if err != nil {
			return err
		}
		if got < int64(n) {
			return io.ErrUnexpectedEOF
		}
	}
}
