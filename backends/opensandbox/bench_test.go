package opensandbox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// BenchmarkExecTrue measures Exec of "true" against the in-process server
// and, in the same run and interleaved with it, the same command sent
// straight to the sandbox's execd (POST /command, read to the terminal
// event): the baseline, what any client pays. It reports p50 and p99 of
// both, the ratio of the p50s and how many requests execd received per
// Exec; ns/op is one Exec plus one direct call.
//
//	go test -run '^$' -bench ExecTrue -benchtime 300x ./backends/opensandbox/
func BenchmarkExecTrue(b *testing.B) {
	srv, err := opensandboxtest.NewServer(opensandboxtest.Options{APIKey: testAPIKey})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Close)
	ob, err := opensandbox.New(opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ob.Close() })
	ctx := context.Background()
	sb, err := ob.Create(ctx, backend.Spec{Name: "bench", Image: testImage})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sb.Destroy(context.Background()) })
	direct := directExecd(b, srv, sb.(*opensandbox.Sandbox))

	req := backend.ExecRequest{Cmd: []string{"true"}}
	for range 5 { // warm up: the sandbox's probe, connections
		if _, err := sb.Exec(ctx, req); err != nil {
			b.Fatal(err)
		}
		direct()
	}
	var ours, base []time.Duration
	before := execdRequests(srv)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		res, err := sb.Exec(ctx, req)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec true: %+v, %v", res, err)
		}
		t1 := time.Now()
		direct()
		ours, base = append(ours, t1.Sub(t0)), append(base, time.Since(t1))
	}
	b.StopTimer()
	time.Sleep(200 * time.Millisecond) // the last Exec's cleanup, in the background
	// Requests to execd per Exec (the direct calls' one each taken out).
	b.ReportMetric(float64(execdRequests(srv)-before-len(base))/float64(len(ours)), "execd-req/exec")
	p50, bp50 := pct(ours, 0.50), pct(base, 0.50)
	b.ReportMetric(p50, "exec-p50-ms")
	b.ReportMetric(pct(ours, 0.99), "exec-p99-ms")
	b.ReportMetric(bp50, "execd-p50-ms")
	b.ReportMetric(pct(base, 0.99), "execd-p99-ms")
	if bp50 > 0 {
		b.ReportMetric(p50/bp50, "p50-ratio")
	}
}

// execdRequests counts the requests the server's execds received.
func execdRequests(srv *opensandboxtest.Server) int {
	n := 0
	for route, c := range srv.Requests() {
		if strings.HasPrefix(route, "execd ") {
			n += c
		}
	}
	return n
}

// directExecd returns a function that runs "true" with one POST /command
// to the sandbox's execd, as a bare client would.
func directExecd(b *testing.B, srv *opensandboxtest.Server, sb *opensandbox.Sandbox) func() {
	ctx := context.Background()
	url, h, err := sb.HTTPEndpoint(ctx, 44772)
	if err != nil {
		b.Fatal(err)
	}
	var body struct{ Env map[string]string }
	reqs := srv.CreateRequests()
	if err := json.Unmarshal(reqs[len(reqs)-1], &body); err != nil {
		b.Fatal(err)
	}
	h.Set("X-EXECD-ACCESS-TOKEN", body.Env["EXECD_ACCESS_TOKEN"])
	h.Set("Content-Type", "application/json")
	client := &http.Client{}
	b.Cleanup(client.CloseIdleConnections)
	return func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/command", strings.NewReader(`{"command":"true"}`))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = h.Clone()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"execution_complete"`) {
				return
			}
			if strings.Contains(sc.Text(), `"error"`) {
				b.Fatalf("true failed: %s", sc.Text())
			}
		}
		b.Fatalf("the stream ended without execution_complete: %v", sc.Err())
	}
}

// pct returns the p-th percentile of ds in milliseconds.
func pct(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}
