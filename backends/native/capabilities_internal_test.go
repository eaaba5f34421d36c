package native

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// fakeEngine listens on loopback as a Docker engine that is down in one of
// two ways: hung (accepts and never answers) or refusing (accepts and hangs
// up at once). It counts the connections it accepted.
type fakeEngine struct {
	l        net.Listener
	accepted atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
}

func newFakeEngine(t *testing.T, hang bool) *fakeEngine {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEngine{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			e.accepted.Add(1)
			if !hang {
				c.Close()
				continue
			}
			e.mu.Lock()
			e.conns = append(e.conns, c)
			e.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, c := range e.conns {
			c.Close()
		}
	})
	return e
}

func (e *fakeEngine) backend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Config{Host: "tcp://" + e.l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func setProbeTimes(t *testing.T, timeout, wait, retry time.Duration) {
	t.Helper()
	oldT, oldW, oldR := factsTimeout, capsWait, factsRetryAfter
	factsTimeout, capsWait, factsRetryAfter = timeout, wait, retry
	t.Cleanup(func() { factsTimeout, capsWait, factsRetryAfter = oldT, oldW, oldR })
}

// capabilitiesWithin calls Capabilities n times at once and fails the test
// if they are not all back within limit.
func capabilitiesWithin(t *testing.T, b *Backend, n int, limit time.Duration) []backend.Capabilities {
	t.Helper()
	out := make([]backend.Capabilities, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = b.Capabilities() })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%d concurrent Capabilities calls not back within %s", n, limit)
	}
	return out
}

// With the engine hung, Capabilities answers within its short bound, its
// callers do not queue behind one another, and once one has given up the
// next ones do not wait again.
func TestCapabilitiesWithAHungEngine(t *testing.T) {
	setProbeTimes(t, 3*time.Second, 300*time.Millisecond, time.Minute)
	e := newFakeEngine(t, true)
	b := e.backend(t)

	start := time.Now()
	for _, caps := range capabilitiesWithin(t, b, 8, 2*time.Second) {
		if !slices.Equal(caps.Runtimes, []string{"runc"}) || !caps.Images {
			t.Errorf("capabilities without an answer: %+v", caps)
		}
	}
	t.Logf("8 concurrent calls: %s", time.Since(start))
	start = time.Now()
	capabilitiesWithin(t, b, 1, time.Second)
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("a call after one gave up on the probe in flight waited %s", d)
	}
	if n := e.accepted.Load(); n > 2 {
		t.Errorf("the engine was asked over %d connections, want one probe", n)
	}

	// Work that needs the engine waits for the probe as long as its own
	// context allows, and is told why it failed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := b.facts(ctx)
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("facts from a hung engine: %v, want ErrUnavailable", err)
	}
}

// With the engine down, a failure is remembered: Capabilities does not ask
// again at every call, while Create's path (facts) does.
func TestCapabilitiesRemembersAFailure(t *testing.T) {
	setProbeTimes(t, 3*time.Second, 2*time.Second, time.Minute)
	e := newFakeEngine(t, false)
	b := e.backend(t)

	capabilitiesWithin(t, b, 1, 3*time.Second)
	asked := e.accepted.Load()
	if asked == 0 {
		t.Fatal("the engine was never asked")
	}
	start := time.Now()
	for _, caps := range capabilitiesWithin(t, b, 20, time.Second) {
		if !slices.Equal(caps.Runtimes, []string{"runc"}) {
			t.Errorf("runtimes %v, want the default", caps.Runtimes)
		}
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("20 calls after a failure took %s", d)
	}
	if n := e.accepted.Load(); n != asked {
		t.Errorf("the engine was asked again (%d connections, then %d) within the retry interval", asked, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.facts(ctx); err == nil {
		t.Fatal("facts from a failing engine: no error")
	}
	if n := e.accepted.Load(); n == asked {
		t.Error("facts did not ask the engine again")
	}
}
