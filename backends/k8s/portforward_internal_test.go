//lint:file-ignore SA1019 the forward under test takes apimachinery's httpstream types (see portforward.go)
package k8s

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/k8stest"
)

// A forward whose connection to the API server dropped dials again at the
// next local connection; after failed dials (the pod is gone) connections
// are closed at once and dials are spaced out, not made per connection;
// Close ends the forward and its listener.
func TestForwardRedialsAndBacksOff(t *testing.T) {
	t.Parallel()
	b := agentTestBackend(t, "exec")
	ctx := t.Context()
	created, err := b.Create(ctx, backend.Spec{Name: "redial", Image: k8stest.BusyboxImage, TTL: 30 * time.Minute,
		Ports: []backend.Port{{Port: 8080}}})
	require.NoError(t, err)
	sb := created.(*Sandbox)
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		sb.Destroy(dctx)
	})
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `(while :; do echo hello-redial | nc -l -p 8080; done) >/dev/null 2>&1 &
for i in $(seq 300); do grep -qs ':1F90 0*:0000 0A' /proc/net/tcp /proc/net/tcp6 && exit 0; sleep 0.1; done; exit 1`})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, "the server in the pod does not listen")
	addr, err := sb.Endpoint(ctx, 8080)
	require.NoError(t, err)
	requireGreeting(t, addr, "hello-redial")

	b.mu.Lock()
	f := b.forwards[forwardKey{sb.pod, 8080}]
	b.mu.Unlock()
	require.NotNil(t, f)
	first := f.current()
	require.NotNil(t, first)
	first.Close() // as when the API server restarts
	requireGreeting(t, addr, "hello-redial")
	assert.True(t, f.current() != first, "a new connection replaced the closed one")

	// The pod goes away behind the forward's back, and so does its
	// connection: every local connection is closed at once, and dials
	// are spaced out by retryDelay however often clients come.
	require.NoError(t, b.kube.Pods(b.ns).Delete(ctx, sb.pod, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	require.Eventually(t, func() bool {
		_, err := b.kube.Pods(b.ns).Get(ctx, sb.pod, metav1.GetOptions{})
		return err != nil
	}, time.Minute, 200*time.Millisecond, "the pod is not deleted")
	if c := f.current(); c != nil {
		c.Close()
	}
	start := time.Now()
	for i := range 30 {
		// The first waits for a dial to find the pod gone, which a
		// loaded API server may take seconds to answer (the dial's own
		// bound is 30 s); the others are closed at once, backing off.
		wait := 5 * time.Second
		if i == 0 {
			wait = 40 * time.Second
		}
		got, err := readFromWithin(addr, wait)
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection %d to a gone pod was left open", i)
		require.Empty(t, got)
	}
	elapsed := time.Since(start)
	f.mu.Lock()
	failures := f.failures
	f.mu.Unlock()
	t.Logf("30 connections to a gone pod in %v: %d failed dials", elapsed, failures)
	assert.GreaterOrEqual(t, failures, 1)
	assert.LessOrEqual(t, failures, maxDials(elapsed), "30 connections in %v made %d dials", elapsed, failures)
	_, err = sb.Endpoint(ctx, 8080)
	assert.ErrorIs(t, err, backend.ErrNotFound)

	requireReturns(t, func() { b.Close() }, "Close did not end the forward")
	_, err = net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the listener is closed with the backend")
}

// requireReturns fails t, with every goroutine's stack, when fn does not
// return within 10 s.
func requireReturns(t *testing.T, fn func(), msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		fn()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		var stacks strings.Builder
		pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("%s within 10 s; goroutines:\n%s", msg, stacks.String())
	}
}

// maxDials is how many dials retryDelay lets through in d, and one more
// for the clock.
func maxDials(d time.Duration) int {
	n := 1
	for wait := time.Duration(0); wait <= d; n++ {
		wait += retryDelay(n)
	}
	return n
}

// current is the forward's connection in use (nil: none).
func (f *forward) current() interface{ Close() error } {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn == nil {
		return nil
	}
	return f.conn
}

// requireGreeting reads from addr until greeting comes, for 10 s at most:
// busybox nc serves one connection per loop, and one that comes while it
// starts again is refused.
func requireGreeting(t *testing.T, addr, greeting string) {
	t.Helper()
	var got string
	var err error
	for range 50 {
		if got, err = readFrom(addr); err == nil && strings.Contains(got, greeting) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no %q from %s: %q, %v", greeting, addr, got, err)
}

func readFrom(addr string) (string, error) { return readFromWithin(addr, 5*time.Second) }

// readFromWithin reads what addr sends until it closes, for wait at most.
func readFromWithin(addr string, wait time.Duration) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(conn)
	if len(b) > 0 {
		err = nil
	}
	return string(b), err
}

func TestRetryDelay(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, forwardRetryMin}, {2, 2 * forwardRetryMin}, {3, 4 * forwardRetryMin}, {7, forwardRetryMax}, {1000, forwardRetryMax}} {
		assert.Equal(t, c.want, retryDelay(c.n), fmt.Sprint(c.n))
	}
}

// A stream the pod's side never answers (the API server or kubelet went
// quiet) holds CreateStream for httpstream's 30 s; closing the forward
// must not wait for it, and the streams that open after all are reset.
func TestForwardCloseDoesNotWaitForUnansweredStreams(t *testing.T) {
	t.Parallel()
	conn := &stalledConn{release: make(chan struct{}), creating: make(chan struct{}, 4), closed: make(chan bool)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &forward{b: &Backend{log: slog.New(slog.DiscardHandler)}, pod: "p", port: 80, ln: ln, addr: ln.Addr().String(), conn: conn}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.acceptLoop()

	local, err := net.Dial("tcp", f.addr)
	require.NoError(t, err)
	defer local.Close()
	select {
	case <-conn.creating:
	case <-time.After(30 * time.Second):
		t.Fatal("the forward did not open a stream for the local connection")
	}
	requireReturns(t, f.close, "close waited for a stream the other side never answered")
	close(conn.release) // the answer comes late
	require.Eventually(t, func() bool {
		conn.mu.Lock()
		defer conn.mu.Unlock()
		return len(conn.streams) > 0 && conn.resets == len(conn.streams) && conn.removed == len(conn.streams)
	}, 10*time.Second, 10*time.Millisecond, "the streams opened after close are reset and removed")
}

// stalledConn is an httpstream.Connection whose CreateStream waits for
// release.
type stalledConn struct {
	release  chan struct{}
	creating chan struct{}
	closed   chan bool
	once     sync.Once

	mu      sync.Mutex
	streams []*fakeStream
	resets  int
	removed int
}

func (c *stalledConn) CreateStream(h http.Header) (httpstream.Stream, error) {
	c.creating <- struct{}{}
	<-c.release
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &fakeStream{c: c, h: h.Clone(), id: uint32(len(c.streams))}
	c.streams = append(c.streams, s)
	return s, nil
}
func (c *stalledConn) Close() error                 { c.once.Do(func() { close(c.closed) }); return nil }
func (c *stalledConn) CloseChan() <-chan bool       { return c.closed }
func (c *stalledConn) SetIdleTimeout(time.Duration) {}
func (c *stalledConn) RemoveStreams(ss ...httpstream.Stream) {
	c.mu.Lock()
	c.removed += len(ss)
	c.mu.Unlock()
}

type fakeStream struct {
	c  *stalledConn
	h  http.Header
	id uint32
}

func (s *fakeStream) Read([]byte) (int, error)    { return 0, io.EOF }
func (s *fakeStream) Write(p []byte) (int, error) { return len(p), nil }
func (s *fakeStream) Close() error                { return nil }
func (s *fakeStream) Reset() error {
	s.c.mu.Lock()
	s.c.resets++
	s.c.mu.Unlock()
	return nil
}
func (s *fakeStream) Headers() http.Header { return s.h }
func (s *fakeStream) Identifier() uint32   { return s.id }
