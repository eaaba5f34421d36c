package execframe

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// Output written through a Writer comes back through Demux in order, split
// into frames of at most MaxPayload, with the exit code last.
func TestRoundTrip(t *testing.T) {
	var wire bytes.Buffer
	fw := NewWriter(&wire)
	big := bytes.Repeat([]byte("0123456789"), MaxPayload/5) // two frames
	if _, err := fw.Stream(KindStdout).Write(big); err != nil {
		t.Fatal(err)
	}
	fw.Stream(KindStderr).Write([]byte("warn\n"))
	fw.Stream(KindStdout).Write([]byte("tail"))
	if err := fw.Exit(-3); err != nil {
		t.Fatal(err)
	}
	wire.WriteString("never read")
	frames := 0
	for r := NewReader(bytes.NewReader(wire.Bytes())); ; frames++ {
		kind, _, err := r.Next()
		if err != nil || kind == KindExit {
			break
		}
	}
	if frames != 4 {
		t.Errorf("%d output frames on the wire, want 4 (the long write split in two)", frames)
	}
	var out, errOut bytes.Buffer
	code, err := Demux(iotest.OneByteReader(&wire), &out, &errOut)
	if err != nil || code != -3 {
		t.Fatalf("Demux = %d, %v; want -3", code, err)
	}
	if want := string(big) + "tail"; out.String() != want {
		t.Errorf("stdout: %d bytes, want %d", out.Len(), len(want))
	}
	if errOut.String() != "warn\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
}

// A stream cut before the exit frame, or holding something else, is an
// error, not a short success.
func TestDemuxErrors(t *testing.T) {
	var wire bytes.Buffer
	fw := NewWriter(&wire)
	fw.Stream(KindStdout).Write([]byte("hello"))
	full := wire.Bytes()
	for name, in := range map[string][]byte{
		"no exit frame":  full,
		"cut in a frame": full[:len(full)-2],
		"cut in header":  full[:3],
		"unknown kind":   append(bytes.Clone(full), 'z', 0, 0, 0, 0),
		"huge frame":     append(bytes.Clone(full), KindStdout, 0xff, 0xff, 0xff, 0xff),
		"short exit":     append(bytes.Clone(full), KindExit, 0, 0, 0, 1, 7),
		"stdin frame":    append(bytes.Clone(full), KindStdin, 0, 0, 0, 0),
	} {
		code, err := Demux(bytes.NewReader(in), io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%s: Demux = %d, nil; want an error", name, code)
		}
	}
	if _, err := Demux(bytes.NewReader(full[:len(full)-2]), io.Discard, io.Discard); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
}

// Stdin frames the caller's input, closes it, then holds the stream open
// until done; PumpStdin passes the input on, closes the command's end at
// the close frame and reports the stream's end.
func TestStdinAndPump(t *testing.T) {
	done := make(chan struct{})
	in := NewStdin(strings.NewReader("input data"), done)
	defer in.Close()
	pr, pw := io.Pipe()
	ended := PumpStdin(in, pw)
	got, err := io.ReadAll(pr) // returns at the close frame
	if err != nil || string(got) != "input data" {
		t.Fatalf("the command read %q, %v", got, err)
	}
	select {
	case <-ended:
		t.Fatal("the stream ended before the exit frame came")
	default:
	}
	close(done)
	<-ended
}

// A caller's stdin that never ends does not keep the stream open once the
// command is over.
func TestStdinBlockedSource(t *testing.T) {
	src, _ := io.Pipe() // never written, never closed
	done := make(chan struct{})
	in := NewStdin(src, done)
	close(done)
	if _, err := io.ReadAll(in); err != nil {
		t.Fatal(err)
	}
	nothing := NewStdin(nil, make(chan struct{}))
	nothing.Close()
	if _, err := io.ReadAll(nothing); err != nil {
		t.Fatal(err)
	}
}

// The reader of frames sees what the pod sends: arbitrary bytes must give
// frames or an error, never a panic or an oversized allocation.
func FuzzReader(f *testing.F) {
	var wire bytes.Buffer
	fw := NewWriter(&wire)
	fw.Stream(KindStdout).Write([]byte("out"))
	fw.Stream(KindStderr).Write([]byte("err"))
	fw.Exit(1)
	f.Add(wire.Bytes())
	f.Add([]byte{KindStdinClose, 0, 0, 0, 0})
	f.Add([]byte{KindStdin, 0, 0, 0, 2, 'h'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for {
			kind, p, err := r.Next()
			if err != nil {
				return
			}
			if len(p) > MaxPayload {
				t.Fatalf("frame %q of %d bytes", kind, len(p))
			}
			if kind == KindExit {
				ExitCode(p)
			}
		}
	})
}
