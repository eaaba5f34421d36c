package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/sbxd"
	"github.com/sandboxkit/sandboxkit/server"
)

// BenchmarkOpenSandboxAPIExec measures a command's round trip through the
// OpenSandbox API (POST /command on execd's direct endpoint, the stream
// read to its end as the SDKs read it) on native, beside the same command
// straight through sbxd in the same run:
//
//	go test -run '^$' -bench OpenSandboxAPIExec -benchtime 300x ./server/
func BenchmarkOpenSandboxAPIExec(b *testing.B) {
	cli := dockertest.Client(b)
	dockertest.RequireImage(b, cli, dockertest.BusyboxImage)
	s, nb, _ := nativeServer(b, func(o *server.Options) { o.APIKey = osbKey })
	hs := httptest.NewServer(s.Handler())
	b.Cleanup(hs.Close)
	c := osbWire{t: b, base: hs.URL, image: dockertest.BusyboxImage}
	id := c.create(nil)
	code, out, _ := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil, nil)
	require.Equal(b, 200, code)
	url := "http://" + out["endpoint"].(string) + "/command"
	route := out["headers"].(map[string]any)["X-Sandboxkit-Execd-Route"].(string)
	body, _ := json.Marshal(map[string]any{"command": "true"})
	viaAPI := func() {
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("X-Sandboxkit-Execd-Route", route)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(data), "execution_complete") {
			b.Fatalf("no execution_complete in %q", data)
		}
	}
	ctx := context.Background()
	raw, err := nb.Get(ctx, id)
	require.NoError(b, err)
	agent, err := sbxd.Wrap(ctx, raw)
	require.NoError(b, err)
	b.Cleanup(func() { agent.Close() })
	direct := func() {
		res, err := agent.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", "true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("sbxd exec: %v %d", err, res.ExitCode)
		}
	}
	for name, fn := range map[string]func(){"api": viaAPI, "sbxd": direct} {
		b.Run(name, func(b *testing.B) {
			fn() // warm
			var times []time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				fn()
				times = append(times, time.Since(t0))
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
