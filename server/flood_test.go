package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// serveListen serves s with Serve (the connection limits and timeouts
// included) on a loopback port until the test ends, and returns its
// address.
func serveListen(t *testing.T, s *server.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return ln.Addr().String()
}

// slowOutcome is what became of a connection that sent a request's head
// and then trickled the rest.
type slowOutcome struct {
	status   int           // of the answer; 0: closed without one
	answered time.Duration // after the dial, when the answer arrived
	closed   time.Duration // after the dial, when the server closed the connection
	err      error         // a failure of the client's own
}

// slowRequest connects from the loopback address from to addr, sends head
// and then trickle, a byte every 100 ms, until the server answers and
// closes the connection (or 30 s pass). It calls sent once head is sent
// (or could not be).
func slowRequest(from, addr, head, trickle string, sent func()) slowOutcome {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	start := time.Now()
	c, err := d.Dial("tcp", addr)
	if err != nil {
		sent()
		return slowOutcome{err: err}
	}
	defer c.Close()
	_, err = io.WriteString(c, head)
	sent()
	if err != nil {
		return slowOutcome{err: err}
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(trickle); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := c.Write([]byte{trickle[i]}); err != nil {
				return // the server closed the connection
			}
		}
	}()
	c.SetReadDeadline(start.Add(30 * time.Second))
	var out slowOutcome
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		out.status, out.answered = resp.StatusCode, time.Since(start)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, err = io.Copy(io.Discard, br)
	out.closed = time.Since(start)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		out.err = fmt.Errorf("the server kept the connection open for 30 s")
	}
	return out
}

// flood opens n slow connections from the loopback address from, all at
// once, and returns, once each has sent its head, a channel of their
// outcomes, which closes when every one is done.
func flood(n int, from, addr, head, trickle string) <-chan slowOutcome {
	out := make(chan slowOutcome, n)
	var wg, sent sync.WaitGroup
	sent.Add(n)
	for range n {
		wg.Go(func() { out <- slowRequest(from, addr, head, trickle, sent.Done) })
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	sent.Wait()
	return out
}

// TestServeUnderSlowFlood: slow request bodies and headers, with the API
// key and without, from three client addresses (700 connections against a
// server that holds 120, 50 per client), neither keep /health and an
// authenticated call from another address from answering nor hold the
// server's connections:
// - without the key, the answer is 401 (or 429 past the client's cap) and
// the connection is closed at once, its body unread;
// - with it, a body slower than BodyTimeout and BodyMinRate is cut with
// 408, and connections past the client's cap are answered 429 at once;
// - connections sending their headers slowly are closed by
// ReadHeaderTimeout, and those past the client's cap answered 429.
func TestServeUnderSlowFlood(t *testing.T) {
	const (
		key         = "flood-key"
		bodyTimeout = 2 * time.Second
		bound       = 15 * time.Second // generous: the machine is shared
	)
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.APIKey = key
		o.MaxConns, o.MaxConnsPerClient = 120, 50
		o.ReadHeaderTimeout = 3 * time.Second
		o.BodyTimeout, o.BodyMinRate = bodyTimeout, 1<<10
	})
	addr := serveListen(t, s)
	post := func(auth string) string {
		return "POST /tools/execute HTTP/1.1\r\nHost: sbx\r\nContent-Type: application/json\r\n" + auth +
			"X-Conversation-Id: flood\r\nContent-Length: 100000\r\n\r\n{"
	}
	trickle := strings.Repeat(" ", 300)

	t.Run("without the key", func(t *testing.T) {
		counts := map[int]int{}
		for o := range flood(200, "127.0.0.3", addr, post(""), trickle) {
			require.NoError(t, o.err)
			counts[o.status]++
			assert.Contains(t, []int{http.StatusUnauthorized, http.StatusTooManyRequests}, o.status, "answer to a request without the key")
			assert.Less(t, o.closed-o.answered, time.Second, "the connection stayed open after a %d", o.status)
			assert.Less(t, o.closed, bound)
		}
		t.Logf("200 slow bodies without the key: answers %v", counts)
		assert.GreaterOrEqual(t, counts[http.StatusUnauthorized], 50)
	})

	t.Run("with the key", func(t *testing.T) {
		bodies := flood(300, "127.0.0.2", addr, post("Authorization: Bearer "+key+"\r\n"), trickle)
		headers := flood(200, "127.0.0.4", addr, "GET /health HTTP/1.1\r\nHost: sbx\r\n", "X-Slow: "+strings.Repeat("a", 200))

		// Under the flood, from another address: /health and a call.
		hc := &http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get("http://" + addr + "/health")
		require.NoError(t, err, "/health under the flood")
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "/health under the flood")
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/tools/list_sandboxes", strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set(server.HeaderConversation, "under-flood")
		resp, err = hc.Do(req)
		require.NoError(t, err, "an authenticated call under the flood")
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, "an authenticated call under the flood: %s", data)

		counts := map[int]int{}
		for o := range bodies {
			require.NoError(t, o.err)
			counts[o.status]++
			switch o.status {
			case http.StatusRequestTimeout: // held, then cut
				assert.GreaterOrEqual(t, o.answered, bodyTimeout, "a body cut before its time")
			case http.StatusTooManyRequests: // past the client's cap
			default:
				t.Errorf("a slow body with the key: answer %d, want 408 or 429", o.status)
			}
			assert.Less(t, o.closed, bound, "a slow body's connection (answer %d) was not closed in time", o.status)
		}
		t.Logf("300 slow bodies with the key: answers %v", counts)
		assert.Positive(t, counts[http.StatusRequestTimeout], "no slow body was held and cut")
		assert.LessOrEqual(t, counts[http.StatusRequestTimeout], 50, "more bodies held than the client's cap")

		counts = map[int]int{}
		for o := range headers {
			require.NoError(t, o.err)
			counts[o.status]++
			assert.Contains(t, []int{0, http.StatusTooManyRequests}, o.status, "answer to slow headers")
			assert.Less(t, o.closed, bound, "slow headers' connection (answer %d) was not closed in time", o.status)
		}
		t.Logf("200 slow headers: answers %v (0: closed by ReadHeaderTimeout)", counts)
		assert.Positive(t, counts[0])
		assert.LessOrEqual(t, counts[0], 50, "more connections held than the client's cap")
	})
}

// TestServeMakesRoomForRequests: when connections that send no request
// fill MaxConns, a client that connects and follows Retry-After gets in:
// the connection that has waited longest for its request is closed to make
// room, long before ReadHeaderTimeout would close it.
func TestServeMakesRoomForRequests(t *testing.T) {
	const headerTimeout = 5 * time.Second
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.MaxConns, o.MaxConnsPerClient = 10, -1
		o.ReadHeaderTimeout = headerTimeout
	})
	addr := serveListen(t, s)
	idle := flood(10, "127.0.0.4", addr, "GET /health HTTP/1.1\r\n", "")

	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := hc.Get("http://" + addr + "/health")
		require.NoError(t, err, "/health with MaxConns connections waiting")
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.True(t, time.Now().Before(deadline), "/health answered 503 for 15 s")
		time.Sleep(time.Second) // as Retry-After says
	}
	early := 0
	for o := range idle {
		require.NoError(t, o.err)
		assert.Zero(t, o.status, "a connection that sent no whole request got an answer")
		if o.closed < headerTimeout-time.Second {
			early++
		}
	}
	assert.Equal(t, 1, early, "connections closed to make room for the one request")
}

// TestServeLimitsSpareLongCalls: with body, header and idle timeouts far
// shorter than the calls, a JSON API call, an MCP call (over its event
// stream) and a terminal WebSocket that last longer still work: only
// request bodies are timed.
func TestServeLimitsSpareLongCalls(t *testing.T) {
	const key = "long-key"
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.APIKey = key
		o.BodyTimeout, o.BodyMinRate = 300*time.Millisecond, 1<<10
		o.ReadHeaderTimeout, o.IdleTimeout = time.Second, 300*time.Millisecond
	})
	base := "http://" + serveListen(t, s)
	call := servertest.HTTP(base, key, "long")
	id := servertest.Create(t, call, nil)
	assert.Contains(t, servertest.Must(t, call, "execute", map[string]any{"sandbox_id": id, "command": "sleep 2; echo json-''slept"}), "json-slept")

	mcall := servertest.MCP(mcpClient(t, base+"/mcp", http.Header{"Authorization": {"Bearer " + key}}))
	mid := servertest.Create(t, mcall, nil)
	assert.Contains(t, servertest.Must(t, mcall, "execute", map[string]any{"sandbox_id": mid, "command": "sleep 2; echo mcp-''slept"}), "mcp-slept")
	assert.Contains(t, servertest.Must(t, mcall, "execute", map[string]any{"sandbox_id": mid, "command": "echo session-''alive"}), "session-alive")

	w := mustDial(t, base, id, nil, http.Header{"Authorization": {"Bearer " + key}, server.HeaderConversation: {"long"}})
	w.expect("sleep 2; echo ws-''slept\r", "ws-slept")
	w.expect("echo still-''open\r", "still-open")
	w.leave()
}

// TestRefusalsLeaveBodiesUnread: every refusal before the key is checked
// (JSON API, MCP, OpenSandbox's API and proxy, execd's direct route, the
// admin endpoints, a path no route takes) is answered at once and the
// connection closed, while the client is still trickling its body: the
// server read no more of the body than came with the headers.
func TestRefusalsLeaveBodiesUnread(t *testing.T) {
	s := newServer(t, localBackend(t), func(o *server.Options) { o.APIKey, o.AdminKey = "api-key", "admin-key" })
	hs := httptest.NewServer(s.Handler()) // Handler alone: no connection limits
	t.Cleanup(hs.Close)
	addr := strings.TrimPrefix(hs.URL, "http://")
	for _, c := range []struct {
		method, path, header string
		want                 int
	}{
		{"POST", "/tools/write_file", "X-API-Key: wrong\r\n", http.StatusUnauthorized},
		{"POST", "/mcp", "", http.StatusUnauthorized},
		{"POST", "/v1/sandboxes", "OPEN-SANDBOX-API-KEY: wrong\r\n", http.StatusUnauthorized},
		{"POST", "/sandboxes/sbx-1/proxy/8080/upload", "", http.StatusUnauthorized},
		{"POST", "/execd/sbx-1/command", "X-Sandboxkit-Execd-Route: wrong\r\n", http.StatusUnauthorized},
		{"PATCH", "/port/sbx-1/18080/policy", "X-Sandboxkit-Execd-Route: wrong\r\n", http.StatusUnauthorized},
		{"PUT", "/admin/sandboxes/sbx-1/egress", "Authorization: Bearer api-key\r\n", http.StatusUnauthorized},
		{"POST", "/no/such/route", "", http.StatusNotFound},
		{"DELETE", "/tools/write_file", "", http.StatusMethodNotAllowed},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			head := c.method + " " + c.path + " HTTP/1.1\r\nHost: sbx\r\n" + c.header + "Content-Length: 100000\r\n\r\n{"
			o := slowRequest("127.0.0.1", addr, head, strings.Repeat(" ", 300), func() {})
			require.NoError(t, o.err)
			assert.Equal(t, c.want, o.status)
			assert.Less(t, o.closed-o.answered, time.Second, "the server kept reading the body after its answer")
			assert.Less(t, o.closed, 10*time.Second)
		})
	}
}
