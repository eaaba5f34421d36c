// Package execframe frames a command's streams on one byte stream each way,
// for `sbxd exec --framed`: the k8s backend runs commands through the API
// server's exec stream, which ends with the connection when the command
// exits. A server that closes a connection with unread input in its socket
// (a client's pings) makes the kernel send a reset instead of the rest of
// the output, so a slow reader lost the tail of a long output. Framed, the
// output ends with an exit frame, and sbxd exits only once the caller,
// having read that frame, closes its stdin: nothing is in flight when the
// connection goes.
//
// A frame is a kind byte, a big-endian uint32 payload length and the
// payload. From the caller: KindStdin (data for the command's stdin) and
// KindStdinClose (its EOF, no payload). From sbxd: KindStdout, KindStderr
// and, last, KindExit (a big-endian int32 exit code).
package execframe

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
)

// The frame kinds.
const (
	KindStdin      byte = 'i'
	KindStdinClose byte = 'c'
	KindStdout     byte = 'o'
	KindStderr     byte = 'e'
	KindExit       byte = 'x'
)

// SbxdVersion is what `sbxd version` prints after "sbxd "; sbxd has exec
// --framed from version FramedSince on (a pod's sbxd may be older).
const (
	SbxdVersion = 2
	FramedSince = 2
)

// MaxPayload is the largest payload a frame carries; Writer splits longer
// writes, and Reader refuses longer frames.
const MaxPayload = 64 << 10

const headerLen = 5

// Writer writes frames to one stream; it is safe for concurrent use.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer of frames to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Frame writes p as frames of kind (several when p is longer than
// MaxPayload; one empty frame when p is empty).
func (fw *Writer) Frame(kind byte, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for {
		n := min(len(p), MaxPayload)
		var hdr [headerLen]byte
		hdr[0] = kind
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		if _, err := fw.w.Write(hdr[:]); err != nil {
			return err
		}
		if n > 0 {
			if _, err := fw.w.Write(p[:n]); err != nil {
				return err
			}
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// Exit writes the exit frame.
func (fw *Writer) Exit(code int) error {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(int32(code)))
	return fw.Frame(KindExit, b[:])
}

// Stream is an io.Writer whose writes become frames of kind.
func (fw *Writer) Stream(kind byte) io.Writer { return stream{fw, kind} }

type stream struct {
	fw   *Writer
	kind byte
}

func (s stream) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := s.fw.Frame(s.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Reader reads frames.
type Reader struct {
	r   *bufio.Reader
	buf []byte
}

// NewReader returns a Reader of the frames in r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 64<<10)} }

// Next returns the next frame. The payload is valid until the next call.
// At the end of r between frames it returns io.EOF; inside a frame,
// io.ErrUnexpectedEOF; a frame of an unknown kind or longer than
// MaxPayload is an error.
func (fr *Reader) Next() (kind byte, payload []byte, err error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	kind = hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	switch kind {
	case KindStdin, KindStdout, KindStderr:
	case KindStdinClose:
		if n != 0 {
			return 0, nil, fmt.Errorf("execframe: stdin close frame with %d bytes", n)
		}
	case KindExit:
		if n != 4 {
			return 0, nil, fmt.Errorf("execframe: exit frame of %d bytes, want 4", n)
		}
	default:
		return 0, nil, fmt.Errorf("execframe: unknown frame kind %#x", kind)
	}
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("execframe: frame of %d bytes, more than %d", n, MaxPayload)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	fr.buf = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return kind, fr.buf, nil
}

// ExitCode decodes an exit frame's payload.
func ExitCode(payload []byte) int { return int(int32(binary.BigEndian.Uint32(payload))) }

// Demux reads sbxd's frames from r, passing output to stdout and stderr,
// until the exit frame, and returns its code. A write error of stdout or
// stderr ends it with that error (the rest of r unread); r ending before
// the exit frame is io.ErrUnexpectedEOF.
func Demux(r io.Reader, stdout, stderr io.Writer) (int, error) {
	fr := NewReader(r)
	for {
		kind, p, err := fr.Next()
		if err == io.EOF {
			return 0, io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0, err
		}
		switch kind {
		case KindStdout:
			_, err = stdout.Write(p)
		case KindStderr:
			_, err = stderr.Write(p)
		case KindExit:
			return ExitCode(p), nil
		default:
			err = fmt.Errorf("execframe: frame kind %q from the command's side", kind)
		}
		if err != nil {
			return 0, err
		}
	}
}

// Stdin frames the caller's stdin: it reads src (nil: nothing) as stdin
// frames then a close frame, and after that reads nothing more until done
// is closed, then EOF: the stream stays open until the caller has the exit
// frame. Close ends it early. A Read of src in progress when it ends goes
// on in the background until src returns.
type Stdin struct {
	pr   *io.PipeReader
	pw   *io.PipeWriter // closed: Reads give EOF
	stop chan struct{}
	once sync.Once
}

// NewStdin starts framing src; done closed (the exit frame came) ends the
// stream.
func NewStdin(src io.Reader, done <-chan struct{}) *Stdin {
	pr, pw := io.Pipe()
	s := &Stdin{pr: pr, pw: pw, stop: make(chan struct{})}
	fw := NewWriter(pw)
	go func() {
		if src != nil {
			buf := make([]byte, 32<<10)
			for {
				n, err := src.Read(buf)
				if n > 0 && fw.Frame(KindStdin, buf[:n]) != nil {
					return // ended
				}
				if err != nil {
					break // EOF or not, the command's stdin ends here
				}
			}
		}
		fw.Frame(KindStdinClose, nil)
	}()
	go func() {
		// The command is over: a frame being written, or src still
		// being read, no longer matters to it.
		select {
		case <-done:
		case <-s.stop:
		}
		pw.Close()
	}()
	return s
}

func (s *Stdin) Read(p []byte) (int, error) { return s.pr.Read(p) }

// Close ends the stream: pending and later Reads return EOF.
func (s *Stdin) Close() error {
	s.once.Do(func() { close(s.stop) })
	return s.pw.Close()
}

// PumpStdin is sbxd's side of Stdin: it passes the stdin frames read from
// r on to w, closes w at the close frame (or when r ends), and goes on
// reading r until it ends, which the returned channel reports. A failed
// write to w (the command exited without reading its input) drops the
// rest of the data.
func PumpStdin(r io.Reader, w io.WriteCloser) <-chan struct{} {
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		fr := NewReader(r)
		open := true
		closeW := func() {
			if open {
				open = false
				w.Close()
			}
		}
		defer closeW()
		for {
			kind, p, err := fr.Next()
			if err != nil {
				return
			}
			switch kind {
			case KindStdin:
				if open {
					if _, err := w.Write(p); err != nil {
						closeW()
					}
				}
			case KindStdinClose:
				closeW()
			default:
				closeW() // not the caller's frames: no input
			}
		}
	}()
	return ended
}
