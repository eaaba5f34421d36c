package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// Request bodies are read only after their request is authenticated, in
// bounded time (Options.BodyTimeout, BodyMinRate) and within a memory
// budget shared by all requests (Options.BodyBudget). An answer that
// refuses a request closes its connection instead of reading its body.

// hasBody reports whether r comes with a body.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody
}

// dropBody, called before the answer to a request that is refused before
// it is authenticated, makes the server close r's connection after the
// answer instead of reading the rest of r's body (net/http reads up to 256
// KiB of an unread body to keep the connection, for as long as the client
// takes to send it). What arrived with the headers is all that is read.
func dropBody(w http.ResponseWriter, r *http.Request) {
	if hasBody(r) {
		w.Header().Set("Connection", "close")
		cutBody(w, r, time.Now())
	}
}

// bodyLinger is how long the body of an authenticated request refused for
// its body (too large, no room in the budget) is read and dropped after
// the answer: a client that is still sending reads the answer, instead of
// a connection reset, if it reads within that time.
const bodyLinger = 2 * time.Second

// discardBody, called after the answer to an authenticated request that is
// refused for its body, drops what of the body arrives within bodyLinger;
// the server then closes the connection (the answer must say
// "Connection: close").
func discardBody(w http.ResponseWriter, r *http.Request) {
	if !hasBody(r) {
		return
	}
	http.NewResponseController(w).Flush()
	cutBody(w, r, time.Now().Add(bodyLinger))
	io.Copy(io.Discard, r.Body)
}

// cutBody stops r's body at a fixed deadline.
func cutBody(w http.ResponseWriter, r *http.Request, at time.Time) {
	if b, ok := r.Body.(*timedBody); ok {
		b.fixed = true
	}
	http.NewResponseController(w).SetReadDeadline(at)
}

// guardBodies times the bodies of the requests next serves, and closes the
// connection of a request no route takes instead of reading its body.
func (s *Server) guardBodies(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hasBody(r) {
			r.Body = s.timeBody(w, r.Body)
			if _, pattern := mux.Handler(r); pattern == "" {
				dropBody(w, r) // 404, 405
			}
		}
		mux.ServeHTTP(w, r)
	})
}

// errBodyTooSlow is the error of reading a request body that arrives more
// slowly than Options.BodyTimeout and BodyMinRate allow.
var errBodyTooSlow = errors.New("request body too slow")

// timedBody is a request body that must arrive within a deadline, which
// each byte read pushes out by 1/rate seconds. The deadline is the
// connection's read deadline, so a read waiting on a client that sends
// nothing ends at it too. The clock starts again at the first read: the
// time a request waits before its body is read (for room in the budget, for
// its sandbox) is the server's, not the client's.
type timedBody struct {
	io.ReadCloser
	ctl     *http.ResponseController
	start   time.Time
	grace   time.Duration
	rate    int64
	n       int64 // bytes read
	err     error
	reading bool // read from already
	fixed   bool // the deadline no longer moves (cutBody)
}

// timeBody returns body timed by Options.BodyTimeout and BodyMinRate, or
// body when they are off or the connection cannot take a deadline.
func (s *Server) timeBody(w http.ResponseWriter, body io.ReadCloser) io.ReadCloser {
	if s.opts.BodyTimeout < 0 || s.opts.BodyMinRate < 0 {
		return body
	}
	b := &timedBody{ReadCloser: body, ctl: http.NewResponseController(w), start: time.Now(), grace: s.opts.BodyTimeout, rate: s.opts.BodyMinRate}
	if b.ctl.SetReadDeadline(b.deadline()) != nil {
		return body // not a connection of net/http's (a test's recorder)
	}
	return b
}

// deadline is when the next byte must have arrived.
func (b *timedBody) deadline() time.Time {
	earned := time.Duration(b.n/b.rate)*time.Second + time.Duration(b.n%b.rate)*time.Second/time.Duration(b.rate)
	return b.start.Add(b.grace + earned)
}

func (b *timedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if !b.reading && !b.fixed {
		b.reading, b.start = true, time.Now()
		b.ctl.SetReadDeadline(b.deadline())
	}
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		// The body is in: what follows (the answer, an event stream, the
		// server's watch for the client going away) is not timed.
		b.ctl.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		took := time.Since(b.start).Round(time.Millisecond)
		err = fmt.Errorf("%w: %d bytes arrived in %s; a body gets %s plus 1 s per %d bytes", errBodyTooSlow, b.n, took, b.grace, b.rate)
		b.err = err
	case n > 0 && !b.fixed:
		b.ctl.SetReadDeadline(b.deadline())
	}
	return n, err
}

// bodyBudget is the bytes of request bodies the server may hold at once.
// Requests take their share in the order they asked.
type bodyBudget struct {
	mu      sync.Mutex
	size    int64
	used    int64
	waiters []*budgetWaiter
}

type budgetWaiter struct {
	n     int64
	ready chan struct{} // closed when the bytes are the waiter's
}

// reserve takes n bytes (at most the whole budget), waiting up to wait,
// and returns how many it took, or false if it found no room in time or
// ctx ended.
func (b *bodyBudget) reserve(ctx context.Context, n int64, wait time.Duration) (int64, bool) {
	n = min(n, b.size)
	b.mu.Lock()
	if len(b.waiters) == 0 && b.used+n <= b.size {
		b.used += n
		b.mu.Unlock()
		return n, true
	}
	if wait <= 0 {
		b.mu.Unlock()
		return 0, false
	}
	w := &budgetWaiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()

	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ready:
		return n, true
	case <-t.C:
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted as time ran out: hand it on
		b.used -= n
	default:
		for i, o := range b.waiters {
			if o == w {
				b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
				break
			}
		}
	}
	b.grantLocked()
	return 0, false
}

// release returns n bytes reserve took.
func (b *bodyBudget) release(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	b.grantLocked()
}

// grantLocked hands the free bytes to the waiters in order.
func (b *bodyBudget) grantLocked() {
	for len(b.waiters) > 0 && b.used+b.waiters[0].n <= b.size {
		w := b.waiters[0]
		b.waiters = b.waiters[1:]
		b.used += w.n
		close(w.ready)
	}
}

// failFunc answers a request with an HTTP error in its API's shape.
type failFunc func(w http.ResponseWriter, code int, msg string)

// admitBody reserves the bytes of r's body in the budget before anything
// reads it, and limits it to limit bytes. It answers 413 for a body that
// says it is larger, and 503 when the budget has no room within
// Options.BodyWait; then ok is false. Otherwise release gives the bytes
// back: call it when the body and what was decoded from it are done with.
// Call it after the request is authenticated, so that callers without the
// key cannot take the budget.
func (s *Server) admitBody(w http.ResponseWriter, r *http.Request, limit int64, fail failFunc) (release func(), ok bool) {
	if !hasBody(r) {
		return func() {}, true
	}
	if r.ContentLength > limit {
		w.Header().Set("Connection", "close")
		fail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes: this endpoint takes at most %d", r.ContentLength, limit))
		discardBody(w, r)
		return nil, false
	}
	release = func() {}
	if s.budget != nil {
		want := r.ContentLength
		if want < 0 {
			want = limit // sent without a length: as much as the route takes
		}
		n, ok := s.budget.reserve(r.Context(), want, s.opts.BodyWait)
		if !ok {
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
			fail(w, http.StatusServiceUnavailable, fmt.Sprintf("the server holds as many request bodies as it may (%d MiB) and found no room for this one's %d bytes in %s: retry shortly",
				s.budget.size>>20, want, s.opts.BodyWait))
			discardBody(w, r)
			return nil, false
		}
		release = func() { s.budget.release(n) }
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return release, true
}

// retryAfter is the Retry-After, in seconds, of the answers to requests
// refused for a while.
const retryAfter = 1

// limitBody serves next with r's body admitted by admitBody.
func (s *Server) limitBody(limit int64, fail failFunc, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release, ok := s.admitBody(w, r, limit, fail)
		if !ok {
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// readBody reads a body admitted by admitBody: into a buffer of its
// Content-Length where it has one, instead of one grown as it arrives
// (which takes about twice the memory).
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength <= 0 {
		return io.ReadAll(r.Body)
	}
	data := make([]byte, r.ContentLength)
	n, err := io.ReadFull(r.Body, data)
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = fmt.Errorf("request body ended after %d of its %d bytes", n, r.ContentLength)
	}
	return data[:n], err
}

// bodyStatus is the status of an answer to a request whose body could not
// be read because of err.
func bodyStatus(err error) int {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, errBodyTooSlow):
		return http.StatusRequestTimeout
	}
	return http.StatusBadRequest
}
