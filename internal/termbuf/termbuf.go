// Package termbuf collects a terminal's output for readers that wait for
// something to appear: a prompt, a pattern, or a quiet moment. sbx serve's
// interactive-program tools and the terminal tests read terminals with it.
package termbuf

import (
	"context"
	"io"
	"regexp"
	"sync"
	"time"
)

// Buffer reads a stream in the background and hands out what arrived since
// the previous Read. It keeps at most limit unread bytes (the oldest are
// dropped and counted).
type Buffer struct {
	limit int

	mu      sync.Mutex
	pending []byte
	dropped int64
	last    time.Time // when output last arrived
	err     error     // io.EOF once the stream ended
	changed chan struct{}
}

// Pump starts reading r into a new Buffer.
func Pump(r io.Reader, limit int) *Buffer {
	b := &Buffer{limit: limit, changed: make(chan struct{}), last: time.Now()}
	go b.pump(r)
	return b
}

func (b *Buffer) pump(r io.Reader) {
	p := make([]byte, 32<<10)
	for {
		n, err := r.Read(p)
		b.mu.Lock()
		if n > 0 {
			b.pending = append(b.pending, p[:n]...)
			if over := len(b.pending) - b.limit; b.limit > 0 && over > 0 {
				b.pending = append(b.pending[:0], b.pending[over:]...)
				b.dropped += int64(over)
			}
			b.last = time.Now()
		}
		if err != nil {
			b.err = err
		}
		close(b.changed)
		b.changed = make(chan struct{})
		b.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Result is what one Read returns.
type Result struct {
	// Output arrived since the previous Read.
	Output string
	// Dropped bytes went before Output (more arrived than the buffer
	// keeps).
	Dropped int64
	// Matched: the pattern was found in Output.
	Matched bool
	// Ended: the stream ended (Err says how; io.EOF for a clean end).
	Ended bool
	Err   error
}

// Read waits until the output since the previous Read matches until (when
// not nil), or nothing arrived for quiet (when > 0), or the stream ended,
// or ctx ended, and returns that output. Output up to and including the
// first match is returned; the rest stays for the next Read.
func (b *Buffer) Read(ctx context.Context, until *regexp.Regexp, quiet time.Duration) Result {
	for {
		b.mu.Lock()
		if until != nil {
			if loc := until.FindIndex(b.pending); loc != nil {
				r := Result{Output: string(b.pending[:loc[1]]), Dropped: b.dropped, Matched: true}
				b.pending = append(b.pending[:0], b.pending[loc[1]:]...)
				b.dropped = 0
				b.mu.Unlock()
				return r
			}
		}
		ended, idle := b.err != nil, time.Since(b.last)
		changed := b.changed
		if ended || ctx.Err() != nil || (quiet > 0 && idle >= quiet) {
			r := Result{Output: string(b.pending), Dropped: b.dropped, Ended: ended, Err: b.err}
			b.pending, b.dropped = nil, 0
			b.mu.Unlock()
			return r
		}
		b.mu.Unlock()
		var timer *time.Timer
		var fired <-chan time.Time
		if quiet > 0 {
			timer = time.NewTimer(quiet - idle)
			fired = timer.C
		}
		select {
		case <-changed:
		case <-fired:
		case <-ctx.Done():
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// WaitFor reads until s appears, returning everything read on the way;
// ok is false when the stream or ctx ended first.
func (b *Buffer) WaitFor(ctx context.Context, s string) (out string, ok bool) {
	r := b.Read(ctx, regexp.MustCompile(regexp.QuoteMeta(s)), 0)
	return r.Output, r.Matched
}
