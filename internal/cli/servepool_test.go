package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// TestServePool: sbx serve keeps the pool of an entry with a [pool] table,
// says so at start, hands its sandboxes to create_sandbox, shows the
// figures at /pools, and removes the ready ones when it stops.
func TestServePool(t *testing.T) {
	setup(t)
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	if err := os.WriteFile(path, []byte("[sandbox]\nbackend = \"local\"\n[sandbox.sandboxes.main]\n[sandbox.sandboxes.main.pool]\nsize = 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SBX_CONFIG", path)
	t.Setenv("SBX_API_KEY", "k")
	url, stop := startServe(t, "--listen", "127.0.0.1:0")

	type poolJSON struct {
		Entry   string `json:"entry"`
		Size    int    `json:"size"`
		Ready   int    `json:"ready"`
		Claimed int    `json:"claimed"`
	}
	pools := func() []poolJSON {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, url+"/pools", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct{ Pools []poolJSON }
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /pools: %s", resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return got.Pools
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := pools()
		if len(p) != 1 || p[0].Entry != "main" || p[0].Size != 2 {
			t.Fatalf("GET /pools: %+v, want the pool of main, size 2", p)
		}
		if p[0].Ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool is not full within 30s: %+v", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	id := servertest.Create(t, servertest.HTTP(url, "k", "c"), nil)
	if p := pools(); p[0].Claimed != 1 {
		t.Errorf("after create_sandbox: %+v, want 1 claimed", p)
	}

	code, stderr := stop()
	if code != 0 {
		t.Fatalf("sbx serve exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "keeping a pool of 2 ready sandboxes of entry main") {
		t.Errorf("sbx serve does not say it keeps the pool: %s", stderr)
	}
	left, err := openBackend(t).List(context.Background(), backend.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].ID != id {
		t.Fatalf("after shutdown: %+v, want just the claimed %s (the ready ones removed)", left, id)
	}
	must(t, "rm", id)
}
