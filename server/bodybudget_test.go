package server_test

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/server"
)

// heapPeak samples the heap in use every 10 ms until stop is called, which
// returns the largest sample.
func heapPeak() (stop func() uint64) {
	var (
		peak uint64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak
	}
}

// writeFileBody is a write_file request body of size bytes, made as it is
// read, so the client holds none of it.
func writeFileBody(size int64) io.Reader {
	head, tail := `{"sandbox_id":"sbx-none","path":"/big","content":"`, `"}`
	return io.MultiReader(strings.NewReader(head), io.LimitReader(zeros{}, size-len64(head)-len64(tail)), strings.NewReader(tail))
}

// TestBodyBudgetBoundsMemory: 16 concurrent 60 MiB JSON bodies (with the
// key) take the heap to a bound set by BodyBudget, not by how many come at
// once: without the budget, 12 took it past 2 GiB. (With the race detector,
// which scans JSON some twenty times slower, 12 of 8 MiB against a 16 MiB
// budget.)
func TestBodyBudgetBoundsMemory(t *testing.T) {
	budget, n, size := int64(128<<20), 16, int64(60<<20)
	if raceEnabled {
		budget, n, size = 16<<20, 12, 8<<20
	}
	// A JSON body held while its tool runs costs about twice its size
	// (the body and the string decoded from it), and the heap runs up to
	// twice what is live between collections: a generous bound, still far
	// under n bodies.
	bound := 3*budget + 256<<20
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.APIKey = "k"
		o.BodyBudget = budget
		o.BodyWait = 5 * time.Minute // every body gets its turn: the bound holds under full concurrency
	})
	url := serveHTTP(t, s)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	stop := heapPeak()
	start := time.Now()
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for range n {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, url+"/tools/write_file", writeFileBody(size))
			if !assert.NoError(t, err) {
				return
			}
			req.ContentLength = size
			req.Header.Set("Authorization", "Bearer k")
			req.Header.Set(server.HeaderConversation, "big")
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err) {
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", data)
			assert.Contains(t, string(data), "sbx-none", "the tool's answer names the sandbox it did not find")
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	peak := stop() - base
	t.Logf("%d concurrent %d MiB bodies with a %d MiB budget: heap in use peaked %d MiB over its %d MiB at start, in %s",
		n, size>>20, budget>>20, peak>>20, base>>20, time.Since(start).Round(time.Millisecond))
	require.Len(t, codes, n)
	assert.Less(t, peak, uint64(bound), "heap in use over the start's, MiB: %d, want under %d", peak>>20, bound>>20)
}

// TestBodyBudgetRefusesWhenFull: a body that finds no room in the budget
// within BodyWait is answered 503 with Retry-After, unread; the budget's
// bytes come back when a body's request is answered.
func TestBodyBudgetRefusesWhenFull(t *testing.T) {
	s := newServer(t, localBackend(t), func(o *server.Options) {
		o.BodyBudget = 1 << 20
		o.BodyWait = 200 * time.Millisecond
	})
	url := serveHTTP(t, s)

	// A body that takes the whole budget and is held: its last byte
	// waits on the test.
	pr, pw := io.Pipe()
	held := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url+"/tools/write_file", pr)
		req.ContentLength = 1 << 20
		req.Header.Set(server.HeaderConversation, "c")
		resp, err := http.DefaultClient.Do(req)
		assert.NoError(t, err)
		held <- resp
	}()
	_, err := pw.Write(make([]byte, 1<<20-1))
	require.NoError(t, err) // the server reads it: the budget is taken

	post := func() *http.Response {
		req, err := http.NewRequest(http.MethodPost, url+"/tools/write_file", writeFileBody(1<<10))
		require.NoError(t, err)
		req.Header.Set(server.HeaderConversation, "c")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	resp := post()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	pw.Write([]byte("}"))
	pw.Close()
	r := <-held
	if r != nil {
		r.Body.Close()
		assert.Equal(t, http.StatusBadRequest, r.StatusCode, "the held body is not JSON")
	}
	assert.Equal(t, http.StatusOK, post().StatusCode, "the budget's bytes came back")
}
