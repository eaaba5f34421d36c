// Package syncbuf is a byte buffer that one goroutine may write while
// another reads it.
package syncbuf

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// Buffer is a bytes.Buffer whose Write and String may run at once. The
// zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// FirstWrite is a writer that discards what it is given and notes when
// the first bytes came: a command's time to first output. Its Write may
// run while Since does.
type FirstWrite struct {
	mu sync.Mutex
	at time.Time
}

func (f *FirstWrite) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() && len(p) > 0 {
		f.at = time.Now()
	}
	return len(p), nil
}

// Since returns the time from start to the first bytes, or to now when
// none came.
func (f *FirstWrite) Since(start time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at.IsZero() {
		return time.Since(start)
	}
	return f.at.Sub(start)
}

// Writer serialises writes to W, for writers whose Write is not safe to
// call from several goroutines at once (a bytes.Buffer).
type Writer struct {
	mu sync.Mutex
	W  io.Writer
}

func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.W.Write(p)
}
