package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
	"github.com/sandboxkit/sandboxkit/internal/dockertest"
	"github.com/sandboxkit/sandboxkit/internal/harness"
	"github.com/sandboxkit/sandboxkit/server"
)

const osbKey = "osb-roundtrip-key-1b2c3d"

// osbClientOf is the project's opensandbox backend pointed at s (a
// server of the caller's, with APIKey osbKey): client -> OpenSandbox API
// -> sandboxkit backend.
func osbClientOf(t *testing.T, s *server.Server, proxied bool) *opensandbox.Backend {
	t.Helper()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	c, err := opensandbox.New(opensandbox.Config{Domain: strings.TrimPrefix(hs.URL, "http://"), APIKey: osbKey, UseServerProxy: proxied})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// traversableLocal is a local backend whose state folder other users can
// pass through (t.TempDir is 0700), for commands run as another user.
func traversableLocal(t *testing.T) *local.Backend {
	t.Helper()
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	b, err := local.New(local.Config{StateDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// TestOpenSandboxAPILocal runs the backend suite and the fileops table
// through the OpenSandbox API of a server over the local backend.
func TestOpenSandboxAPILocal(t *testing.T) {
	s := newServer(t, traversableLocal(t), func(o *server.Options) { o.APIKey = osbKey })
	osbRoundTrip(t, s, "ubuntu:24.04")
}

// osbRoundTrip runs the backend suite and the fileops table through the
// OpenSandbox API of server s, sandboxes made from image.
func osbRoundTrip(t *testing.T, s *server.Server, image string) {
	t.Run("conformance", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend { return osbClientOf(t, s, false) }, backendtest.WithImage(image),
			backendtest.WithIdleTTL("the OpenSandbox API's timeout is an idle window that every call renews (docs/serve.md)"))
	})
	t.Run("fileops", func(t *testing.T) {
		c := osbClientOf(t, s, true)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := c.Create(ctx, backend.Spec{Name: "fileops", Image: image, TTL: 10 * time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
}

// TestOpenSandboxAPILite is the round trip over lite busybox sandboxes
// (the image URI a lite "dir:" reference).
func TestOpenSandboxAPILite(t *testing.T) {
	harness.RequireLite(t)
	b, dir := liteBackend(t, "sbx-osb-lite-", "")
	s := newServer(t, b, func(o *server.Options) {
		o.APIKey = osbKey
		// The fileops table builds expected paths as wd+"/"+name.
		o.Spec = func(typ string) (backend.Spec, error) { return backend.Spec{Name: typ, WorkingDir: "/work"}, nil }
	})
	osbRoundTrip(t, s, "dir:"+dir)
}

// TestOpenSandboxAPINative is the round trip over native busybox
// containers.
func TestOpenSandboxAPINative(t *testing.T) {
	s, _, _ := nativeServer(t, func(o *server.Options) { o.APIKey = osbKey })
	osbRoundTrip(t, s, dockertest.BusyboxImage)
}

// osbWire is a raw HTTP client of a server's OpenSandbox API.
type osbWire struct {
	t     testing.TB
	base  string
	image string
}

func newOSBWire(t *testing.T) osbWire {
	s := newServer(t, localBackend(t), func(o *server.Options) { o.APIKey = osbKey })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return osbWire{t: t, base: hs.URL}
}

// do sends a request (JSON body when body is not nil) and returns the status
// and the decoded answer (nil for none).
func (c osbWire) do(method, path string, body any, header map[string]string) (int, map[string]any, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(c.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("OPEN-SANDBOX-API-KEY", osbKey)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		require.NoError(c.t, json.Unmarshal(raw, &out), "%s", raw)
	} else if len(raw) > 0 {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out, resp.Header
}

// create makes a sandbox of c.image (default ubuntu:24.04, which local
// ignores) and returns its ID.
func (c osbWire) create(extra map[string]any) string {
	c.t.Helper()
	image := c.image
	if image == "" {
		image = "ubuntu:24.04"
	}
	body := map[string]any{"image": map[string]any{"uri": image}, "entrypoint": []string{"tail", "-f", "/dev/null"},
		"timeout": 600, "resourceLimits": map[string]string{"cpu": "500m", "memory": "512Mi"}}
	for k, v := range extra {
		body[k] = v
	}
	code, out, _ := c.do("POST", "/v1/sandboxes", body, nil)
	require.Equal(c.t, http.StatusAccepted, code, "%v", out)
	id, _ := out["id"].(string)
	require.NotEmpty(c.t, id)
	c.t.Cleanup(func() { c.do("DELETE", "/v1/sandboxes/"+id, nil, nil) })
	return id
}

// TestOpenSandboxAPIWire checks the lifecycle API's status codes, error
// shapes and field names against the spec (sandbox-lifecycle.yml).
func TestOpenSandboxAPIWire(t *testing.T) {
	c := newOSBWire(t)
	// Auth: OpenSandbox's 401 codes.
	code, out, _ := c.do("GET", "/v1/sandboxes", nil, map[string]string{"OPEN-SANDBOX-API-KEY": ""})
	assert.Equal(t, 401, code)
	assert.Equal(t, "MISSING_API_KEY", out["code"])
	code, out, _ = c.do("GET", "/v1/sandboxes", nil, map[string]string{"OPEN-SANDBOX-API-KEY": "wrong"})
	assert.Equal(t, 401, code)
	assert.Equal(t, "INVALID_API_KEY", out["code"])
	code, _, _ = c.do("GET", "/health", nil, map[string]string{"OPEN-SANDBOX-API-KEY": ""})
	assert.Equal(t, 200, code)

	// Create: 202 with the Sandbox fields; bad bodies are 422 or 400.
	id := c.create(map[string]any{"metadata": map[string]string{"team": "ml", "project": "x"}, "env": map[string]string{"GREETING": "hi"}})
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id, nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, "Running", out["status"].(map[string]any)["state"])
	assert.Equal(t, map[string]any{"team": "ml", "project": "x"}, out["metadata"])
	assert.Equal(t, []any{"tail", "-f", "/dev/null"}, out["entrypoint"])
	assert.Equal(t, map[string]any{"uri": "ubuntu:24.04"}, out["image"])
	for _, k := range []string{"createdAt", "expiresAt"} {
		_, err := time.Parse(time.RFC3339Nano, out[k].(string))
		assert.NoError(t, err, k)
	}
	for name, body := range map[string]map[string]any{
		"no entrypoint": {"image": map[string]any{"uri": "x"}, "resourceLimits": map[string]string{}},
		"no image":      {"entrypoint": []string{"sh"}},
		"short timeout": {"image": map[string]any{"uri": "x"}, "entrypoint": []string{"sh"}, "timeout": 10},
	} {
		code, out, _ = c.do("POST", "/v1/sandboxes", body, nil)
		assert.Equal(t, 422, code, name)
		assert.NotEmpty(t, out["detail"], name)
	}
	code, out, _ = c.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "x"}, "entrypoint": []string{"sh"},
		"metadata": map[string]string{"opensandbox.io/x": "y"}}, nil)
	assert.Equal(t, 400, code)
	assert.Equal(t, "SANDBOX::INVALID_METADATA_LABEL", out["code"])
	code, out, _ = c.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "x"}, "entrypoint": []string{"sh"},
		"volumes": []any{map[string]any{"name": "v", "host": map[string]string{"path": "/etc"}, "mountPath": "/v"}}}, nil)
	assert.Equal(t, 400, code)
	assert.Contains(t, out["message"], "allows no host paths", "host volumes without allowed_host_paths")
	code, out, _ = c.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "x"}, "entrypoint": []string{"sh"},
		"resourceLimits": map[string]string{"cpu": "lots"}}, nil)
	assert.Equal(t, 400, code)
	assert.Contains(t, out["message"], "cpu")

	// Unknown sandboxes: 404 with {code, message}.
	code, out, _ = c.do("GET", "/v1/sandboxes/nope", nil, nil)
	assert.Equal(t, 404, code)
	assert.NotEmpty(t, out["code"])
	assert.NotEmpty(t, out["message"])

	// List: filters and pagination.
	id2 := c.create(map[string]any{"metadata": map[string]string{"team": "web"}})
	id3 := c.create(nil)
	code, out, _ = c.do("GET", "/v1/sandboxes?pageSize=2", nil, nil)
	require.Equal(t, 200, code)
	assert.Len(t, out["items"], 2)
	assert.Equal(t, map[string]any{"page": 1.0, "pageSize": 2.0, "totalItems": 3.0, "totalPages": 2.0, "hasNextPage": true}, out["pagination"])
	code, out, _ = c.do("GET", "/v1/sandboxes?page=2&pageSize=2", nil, nil)
	require.Equal(t, 200, code)
	require.Len(t, out["items"], 1)
	assert.Equal(t, id3, out["items"].([]any)[0].(map[string]any)["id"])
	code, out, _ = c.do("GET", "/v1/sandboxes?metadata="+url.QueryEscape("team=web"), nil, nil)
	require.Equal(t, 200, code)
	require.Len(t, out["items"], 1)
	assert.Equal(t, id2, out["items"].([]any)[0].(map[string]any)["id"])
	code, out, _ = c.do("GET", "/v1/sandboxes?state=Paused", nil, nil)
	require.Equal(t, 200, code)
	assert.Empty(t, out["items"])
	code, _, _ = c.do("GET", "/v1/sandboxes?pageSize=500", nil, nil)
	assert.Equal(t, 422, code)
	code, out, _ = c.do("GET", "/v1/sandboxes?metadata=novalue", nil, nil)
	assert.Equal(t, 400, code)
	assert.Equal(t, "INVALID_METADATA_FORMAT", out["code"])

	// Metadata: a JSON merge patch.
	code, out, _ = c.do("PATCH", "/v1/sandboxes/"+id+"/metadata", map[string]any{"team": nil, "env": "prod"}, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, map[string]any{"project": "x", "env": "prod"}, out["metadata"])

	// Renew: an absolute time in the future.
	code, out, _ = c.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": time.Now().Add(-time.Hour).Format(time.RFC3339)}, nil)
	assert.Equal(t, 400, code)
	assert.Equal(t, "SANDBOX::INVALID_EXPIRATION", out["code"])
	want := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	code, out, _ = c.do("POST", "/v1/sandboxes/"+id+"/renew-expiration", map[string]string{"expiresAt": want.Format(time.RFC3339)}, nil)
	require.Equal(t, 200, code)
	got, err := time.Parse(time.RFC3339Nano, out["expiresAt"].(string))
	require.NoError(t, err)
	assert.True(t, got.Equal(want), "renewed to %v, want %v", got, want)

	// Endpoints: execd's, direct with a route header, or through the proxy.
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/0", nil, nil)
	assert.Equal(t, 400, code)
	assert.Equal(t, "SANDBOX::INVALID_PORT", out["code"])
	code, _, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/abc", nil, nil)
	assert.Equal(t, 422, code)
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/44772", nil, nil)
	require.Equal(t, 200, code)
	ep := out["endpoint"].(string)
	route := out["headers"].(map[string]any)["X-Sandboxkit-Execd-Route"].(string)
	assert.NotContains(t, ep, "://")
	direct := "/" + strings.SplitN(ep, "/", 2)[1]
	code, _, _ = c.do("GET", direct+"/ping", nil, map[string]string{"OPEN-SANDBOX-API-KEY": ""})
	assert.Equal(t, 401, code, "direct execd without its route header")
	code, _, _ = c.do("GET", direct+"/ping", nil, map[string]string{"OPEN-SANDBOX-API-KEY": "", "X-Sandboxkit-Execd-Route": route})
	assert.Equal(t, 200, code)
	code, _, _ = c.do("GET", "/v1/sandboxes/"+id2+"/endpoints/44772", nil, nil)
	require.Equal(t, 200, code)
	code, _, _ = c.do("GET", direct+"/ping", nil, map[string]string{"X-Sandboxkit-Execd-Route": route[:10]})
	assert.Equal(t, 401, code, "another sandbox's or a wrong route")
	code, _, _ = c.do("GET", "/sandboxes/"+id+"/proxy/44772/ping", nil, nil)
	assert.Equal(t, 200, code)

	// Any other port has an endpoint, as on the real server: through this
	// server with a per-port route header where the backend does not
	// publish it. 18080 is the egress sidecar's API, which answers 502 for
	// a sandbox without a policy, as the real server does.
	// Signed endpoints are refused as on the real server's Docker runtime.
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/8080?expires=4102444800", nil, nil)
	assert.Equal(t, 400, code)
	assert.Equal(t, "SANDBOX::API_NOT_SUPPORTED", out["code"])
	// (local publishes every port: a sandbox's port is the host's.)
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/8080", nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, "127.0.0.1:8080", out["endpoint"])
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/18080", nil, nil)
	require.Equal(t, 200, code)
	ep = out["endpoint"].(string)
	assert.Contains(t, ep, "/port/"+id+"/18080")
	route = out["headers"].(map[string]any)["X-Sandboxkit-Execd-Route"].(string)
	direct = "/" + strings.SplitN(ep, "/", 2)[1]
	code, _, _ = c.do("GET", direct+"/policy", nil, map[string]string{"OPEN-SANDBOX-API-KEY": ""})
	assert.Equal(t, 401, code, "without its route header")
	code, _, _ = c.do("GET", direct+"/policy", nil, map[string]string{"OPEN-SANDBOX-API-KEY": "", "X-Sandboxkit-Execd-Route": c.route(id2, "18080")})
	assert.Equal(t, 401, code, "with another sandbox's route")
	code, out, _ = c.do("GET", direct+"/policy", nil, map[string]string{"OPEN-SANDBOX-API-KEY": "", "X-Sandboxkit-Execd-Route": route})
	assert.Equal(t, 502, code)
	assert.Equal(t, "EGRESS_UNAVAILABLE", out["code"])
	code, _, _ = c.do("GET", "/sandboxes/"+id+"/proxy/18080/policy", nil, nil)
	assert.Equal(t, 502, code)
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/8080?use_server_proxy=true", nil, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, out["endpoint"], "/sandboxes/"+id+"/proxy/8080")

	// Delete: 204, then gone.
	code, _, _ = c.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
	assert.Equal(t, 204, code)
	code, _, _ = c.do("GET", "/v1/sandboxes/"+id, nil, nil)
	assert.Equal(t, 404, code)
	code, _, _ = c.do("DELETE", "/v1/sandboxes/"+id, nil, nil)
	assert.Equal(t, 404, code)
}

// TestOpenSandboxAPIExecdProxy: execd's /proxy/{port}/ route reaches a
// port of the sandbox (the route deployments hand out for ports they
// cannot map) at execd's direct endpoint and through the server proxy,
// without the execd access token; and execd answers at the port
// Options.OSBExecdPort names.
func TestOpenSandboxAPIExecdProxy(t *testing.T) {
	s := newServer(t, localBackend(t), func(o *server.Options) { o.APIKey, o.OSBExecdPort = osbKey, 4000 })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	c := osbWire{t: t, base: hs.URL}
	id := c.create(map[string]any{"env": map[string]string{"EXECD_ACCESS_TOKEN": "tok"}})

	// A service "in the sandbox": local sandboxes share the host's network.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "service saw %s %s", r.Method, r.URL.Path)
	})}
	go svc.Serve(l)
	t.Cleanup(func() { svc.Close() })
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)

	code, out, _ := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/4000", nil, nil)
	require.Equal(t, 200, code)
	direct := "/" + strings.SplitN(out["endpoint"].(string), "/", 2)[1]
	route := map[string]string{"OPEN-SANDBOX-API-KEY": "", server.OSBHeaderRoute: out["headers"].(map[string]any)[server.OSBHeaderRoute].(string)}
	assert.Equal(t, "/execd/"+id, direct)
	code, _, _ = c.do("GET", direct+"/ping", nil, route)
	assert.Equal(t, 401, code, "execd itself needs the token")
	code, out, _ = c.do("POST", direct+"/proxy/"+port+"/a/b", nil, route)
	assert.Equal(t, 200, code)
	assert.Equal(t, "service saw POST /a/b", out["raw"])
	code, out, _ = c.do("GET", "/sandboxes/"+id+"/proxy/4000/proxy/"+port+"/c", nil, nil)
	assert.Equal(t, 200, code)
	assert.Equal(t, "service saw GET /c", out["raw"])
	code, out, _ = c.do("GET", direct+"/proxy/70000/x", nil, route)
	assert.Equal(t, 400, code)
	assert.Equal(t, "INVALID_REQUEST_BODY", out["code"])
	code, _, _ = c.do("GET", "/sandboxes/"+id+"/proxy/4000/ping", nil, map[string]string{"X-EXECD-ACCESS-TOKEN": "tok"})
	assert.Equal(t, 200, code)
}

// events reads execd's command stream to its end: one JSON object and a
// blank line each.
func events(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(r)
	for {
		var ev map[string]any
		if err := dec.Decode(&ev); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatalf("reading events: %v", err)
		}
		out = append(out, ev)
	}
}

// TestOpenSandboxAPIExecd checks execd's command API: the event stream of
// foreground commands (ending with its last event), the exit code in the
// error event, background commands with their logs and status, and the
// access token.
func TestOpenSandboxAPIExecd(t *testing.T) {
	c := newOSBWire(t)
	id := c.create(map[string]any{"env": map[string]string{"EXECD_ACCESS_TOKEN": "tok-123"}})
	runAt := func(path string, body map[string]any, token string) []map[string]any {
		data, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", c.base+"/sandboxes/"+id+"/proxy/44772"+path, bytes.NewReader(data))
		req.Header.Set("OPEN-SANDBOX-API-KEY", osbKey)
		req.Header.Set("X-EXECD-ACCESS-TOKEN", token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		return events(t, resp.Body)
	}
	run := func(body map[string]any, token string) []map[string]any { return runAt("/command", body, token) }
	code, _, _ := c.do("GET", "/sandboxes/"+id+"/proxy/44772/ping", nil, nil)
	assert.Equal(t, 401, code, "execd without the access token")

	evs := run(map[string]any{"command": `printf 'a\n\nb'; echo err >&2; echo "$X"`, "envs": map[string]string{"X": "y"}}, "tok-123")
	var types, texts []string
	for _, ev := range evs {
		types = append(types, ev["type"].(string))
		if ev["type"] == "stdout" || ev["type"] == "stderr" {
			texts = append(texts, ev["type"].(string)+":"+ev["text"].(string))
		}
	}
	assert.Equal(t, "init", types[0])
	assert.Equal(t, "execution_complete", types[len(types)-1])
	assert.ElementsMatch(t, []string{"stdout:a", "stdout:\n", "stdout:by", "stderr:err"}, texts)

	evs = run(map[string]any{"command": "exit 7"}, "tok-123")
	last := evs[len(evs)-1]
	require.Equal(t, "error", last["type"])
	assert.Equal(t, "CommandExecError", last["error"].(map[string]any)["ename"])
	assert.Equal(t, "7", last["error"].(map[string]any)["evalue"])

	evs = run(map[string]any{"command": "sleep 30", "timeout": 200}, "tok-123")
	last = evs[len(evs)-1]
	require.Equal(t, "error", last["type"])
	assert.Equal(t, "-1", last["error"].(map[string]any)["evalue"], "a timed-out command")

	evs = run(map[string]any{"command": "echo one; echo two; sleep 0.2; echo three", "background": true}, "tok-123")
	require.Len(t, evs, 1)
	cmd := evs[0]["text"].(string)
	tok := map[string]string{"X-EXECD-ACCESS-TOKEN": "tok-123"}
	for {
		code, out, _ := c.do("GET", "/sandboxes/"+id+"/proxy/44772/command/status/"+cmd, nil, tok)
		require.Equal(t, 200, code)
		if out["running"] == false {
			assert.Equal(t, 0.0, out["exit_code"])
			break
		}
	}
	// The cursor is a byte offset, as on execd: "one\n" was read.
	code, out, h := c.do("GET", "/sandboxes/"+id+"/proxy/44772/command/"+cmd+"/logs?cursor=4", nil, tok)
	require.Equal(t, 200, code)
	assert.Equal(t, "two\nthree\n", out["raw"])
	assert.Equal(t, "14", h.Get("EXECD-COMMANDS-TAIL-CURSOR"))

	// An interrupted background command ends with -1, as on execd.
	evs = run(map[string]any{"command": "sleep 30", "background": true}, "tok-123")
	cmd = evs[0]["text"].(string)
	code, _, _ = c.do("DELETE", "/sandboxes/"+id+"/proxy/44772/command?id="+cmd, nil, tok)
	require.Equal(t, 200, code)
	for {
		code, out, _ := c.do("GET", "/sandboxes/"+id+"/proxy/44772/command/status/"+cmd, nil, tok)
		require.Equal(t, 200, code)
		if out["running"] == false {
			assert.Equal(t, -1.0, out["exit_code"])
			break
		}
	}

	// A bash session keeps variables, functions and its directory from
	// one command to the next, an exit included.
	dir := t.TempDir()
	code, out, _ = c.do("POST", "/sandboxes/"+id+"/proxy/44772/session", map[string]any{"cwd": dir}, tok)
	require.Equal(t, 200, code)
	se := out["session_id"].(string)
	stdout := func(evs []map[string]any) (lines []string) {
		for _, ev := range evs {
			if ev["type"] == "stdout" {
				lines = append(lines, ev["text"].(string))
			}
		}
		return lines
	}
	evs = runAt("/session/"+se+"/run", map[string]any{"command": "pwd; x=5; export Y=7; f() { echo f$1; }; mkdir -p sub; cd sub"}, "tok-123")
	assert.Equal(t, []string{dir}, stdout(evs))
	assert.Equal(t, "execution_complete", evs[len(evs)-1]["type"])
	evs = runAt("/session/"+se+"/run", map[string]any{"command": "echo $x $Y $(f 1) $PWD; z=9; exit 3"}, "tok-123")
	assert.Equal(t, []string{"5 7 f1 " + dir + "/sub"}, stdout(evs))
	require.Equal(t, "error", evs[len(evs)-1]["type"])
	assert.Equal(t, "3", evs[len(evs)-1]["error"].(map[string]any)["evalue"])
	evs = runAt("/session/"+se+"/run", map[string]any{"command": "echo $z"}, "tok-123")
	assert.Equal(t, []string{"9"}, stdout(evs))
	code, _, _ = c.do("DELETE", "/sandboxes/"+id+"/proxy/44772/session/"+se, nil, tok)
	require.Equal(t, 200, code)
	code, out, _ = c.do("POST", "/sandboxes/"+id+"/proxy/44772/session/"+se+"/run", map[string]any{"command": "true"}, tok)
	assert.Equal(t, 404, code)
	assert.Equal(t, "CONTEXT_NOT_FOUND", out["code"])

	// Metrics, once and watched (an object a second); no code interpreter.
	code, out, _ = c.do("GET", "/sandboxes/"+id+"/proxy/44772/metrics", nil, tok)
	require.Equal(t, 200, code)
	assert.Greater(t, out["cpu_count"], 0.0)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/sandboxes/"+id+"/proxy/44772/metrics/watch", nil)
	req.Header.Set("OPEN-SANDBOX-API-KEY", osbKey)
	req.Header.Set("X-EXECD-ACCESS-TOKEN", "tok-123")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	dec := json.NewDecoder(resp.Body)
	for range 2 {
		var m map[string]any
		require.NoError(t, dec.Decode(&m))
		assert.Greater(t, m["mem_total_mib"], 0.0)
	}
	cancel()
	resp.Body.Close()
	code, out, _ = c.do("POST", "/sandboxes/"+id+"/proxy/44772/code", map[string]any{"code": "print(1)"}, tok)
	assert.Equal(t, 501, code)
	assert.Equal(t, "NOT_SUPPORTED", out["code"])

	// A quiet command's stream carries ping events.
	defer server.SetOSBPingEvery(20 * time.Millisecond)()
	evs = run(map[string]any{"command": "sleep 0.3; echo done"}, "tok-123")
	types = nil
	for _, ev := range evs {
		types = append(types, ev["type"].(string))
	}
	assert.Contains(t, types, "ping")
	assert.Equal(t, "execution_complete", types[len(types)-1])
	code, out, _ = c.do("DELETE", "/sandboxes/"+id+"/proxy/44772/command?id=nope", nil, tok)
	assert.Equal(t, 404, code)
	assert.Equal(t, "COMMAND_NOT_FOUND", out["code"])
}

// TestOpenSandboxAPIPool: a create that asks for what the first type's pool
// keeps (its image, a keep-alive entrypoint, no environment) gets a ready
// sandbox; one with environment of its own is made cold. Either way the
// sandbox carries the request's metadata and execd token.
func TestOpenSandboxAPIPool(t *testing.T) {
	b := localBackend(t)
	s := poolServer(t, b, 1, func(o *server.Options) {
		o.APIKey = osbKey
		o.Spec = func(typ string) (backend.Spec, error) { return backend.Spec{Name: typ, Image: "ubuntu:24.04"}, nil }
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	c := osbWire{t: t, base: hs.URL}
	ready := members(t, b, poolOf(t, s, "main").Pool, readyState)
	require.Len(t, ready, 1)

	id := c.create(map[string]any{"metadata": map[string]string{"team": "ml"}, "env": map[string]string{"EXECD_ACCESS_TOKEN": "tok"}})
	assert.Equal(t, ready[0].ID, id, "the create did not claim the ready sandbox")
	assert.Equal(t, int64(1), poolOf(t, s, "main").Claimed)
	code, out, _ := c.do("GET", "/v1/sandboxes/"+id, nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, map[string]any{"team": "ml"}, out["metadata"])
	code, _, _ = c.do("GET", "/sandboxes/"+id+"/proxy/44772/ping", nil, nil)
	assert.Equal(t, 401, code, "the claimed sandbox's execd without its token")
	code, _, _ = c.do("GET", "/sandboxes/"+id+"/proxy/44772/ping", nil, map[string]string{"X-EXECD-ACCESS-TOKEN": "tok"})
	assert.Equal(t, 200, code)

	cold := c.create(map[string]any{"env": map[string]string{"MODE": "x"}})
	assert.NotEqual(t, ready[0].ID, cold)
	assert.Equal(t, int64(1), poolOf(t, s, "main").Claimed, "a create with its own environment came from the pool")
}

// TestOpenSandboxAPIFiles checks execd's file endpoints on the wire:
// status codes, error codes and the ranged download.
func TestOpenSandboxAPIFiles(t *testing.T) {
	c := newOSBWire(t)
	id := c.create(nil)
	base := "/sandboxes/" + id + "/proxy/44772"
	upload := func(path, content string, withMeta bool) int {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		if withMeta {
			part, _ := mw.CreateFormFile("metadata", "metadata")
			json.NewEncoder(part).Encode(map[string]any{"path": path, "mode": 640})
		}
		part, _ := mw.CreateFormFile("file", "file")
		io.WriteString(part, content)
		mw.Close()
		req, _ := http.NewRequest("POST", c.base+base+"/files/upload", &body)
		req.Header.Set("OPEN-SANDBOX-API-KEY", osbKey)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, upload("dir/a.txt", "0123456789", true))
	assert.Equal(t, 400, upload("dir/b.txt", "x", false), "a file part without its metadata")

	code, out, _ := c.do("GET", base+"/files/info?path=dir/a.txt", nil, nil)
	require.Equal(t, 200, code, "%v", out)
	info := out["dir/a.txt"].(map[string]any)
	assert.Equal(t, "file", info["type"])
	assert.Equal(t, 10.0, info["size"])
	assert.Equal(t, 640.0, info["mode"])
	code, out, _ = c.do("GET", base+"/files/info?path=dir/none", nil, nil)
	assert.Equal(t, 404, code)
	assert.Equal(t, "FILE_NOT_FOUND", out["code"])
	code, out, _ = c.do("GET", base+"/files/info", nil, nil)
	assert.Equal(t, 400, code)
	assert.Equal(t, "MISSING_QUERY", out["code"])

	code, out, h := c.do("GET", base+"/files/download?path=dir/a.txt", nil, map[string]string{"Range": "bytes=2-5"})
	assert.Equal(t, 206, code)
	assert.Equal(t, "2345", out["raw"])
	assert.Equal(t, "bytes 2-5/10", h.Get("Content-Range"))
	code, _, h = c.do("GET", base+"/files/download?path=dir/a.txt", nil, map[string]string{"Range": "bytes=20-"})
	assert.Equal(t, 416, code)
	assert.Equal(t, "bytes */10", h.Get("Content-Range"))
	code, out, _ = c.do("GET", base+"/files/download?path=dir/none", nil, nil)
	assert.Equal(t, 404, code)
	assert.Equal(t, "FILE_NOT_FOUND", out["code"])

	code, _, _ = c.do("POST", base+"/files/replace", map[string]any{"dir/a.txt": map[string]string{"old": "345", "new": "-"}}, nil)
	require.Equal(t, 200, code)
	code, out, _ = c.do("GET", base+"/files/download?path=dir/a.txt", nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, "012-6789", out["raw"])
	// verbose: how many occurrences each file had (the SDK's
	// replaceContentsDetailed).
	require.Equal(t, 200, upload("dir/b.txt", "abc", true))
	code, out, _ = c.do("POST", base+"/files/replace?verbose=true", map[string]any{"dir/a.txt": map[string]string{"old": "-", "new": "+"}, "dir/b.txt": map[string]string{"old": "zz", "new": "y"}}, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, map[string]any{"dir/a.txt": map[string]any{"replacedCount": 1.0}, "dir/b.txt": map[string]any{"replacedCount": 0.0}}, out)
	code, _, _ = c.do("DELETE", base+"/files?path=dir/b.txt", nil, nil)
	require.Equal(t, 200, code)

	code, _, _ = c.do("POST", base+"/directories", map[string]any{"dir/sub/deep": map[string]any{"mode": 700}}, nil)
	require.Equal(t, 200, code)
	code, raw, _ := c.do("GET", base+"/directories/list?path=dir&depth=2", nil, nil)
	require.Equal(t, 200, code)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(raw["raw"].(string)), &list))
	var paths []string
	for _, e := range list {
		paths = append(paths, e["path"].(string)+":"+e["type"].(string))
	}
	assert.Equal(t, []string{"dir/a.txt:file", "dir/sub:directory", "dir/sub/deep:directory"}, paths)
	assert.Equal(t, 700.0, list[2]["mode"])
	code, _, _ = c.do("GET", base+"/directories/list?path=dir/a.txt", nil, nil)
	assert.Equal(t, 400, code, "listing a file")
	code, raw, _ = c.do("GET", base+"/files/search?path=dir&pattern=*.txt", nil, nil)
	require.Equal(t, 200, code)
	assert.Contains(t, raw["raw"], "a.txt")

	code, _, _ = c.do("POST", base+"/files/mv", []map[string]string{{"src": "dir/a.txt", "dest": "dir/sub/a.txt"}}, nil)
	require.Equal(t, 200, code)
	code, _, _ = c.do("POST", base+"/files/mv", []map[string]string{{"src": "dir/a.txt", "dest": "dir/x.txt"}}, nil)
	assert.Equal(t, 404, code, "moving what is gone")
	code, _, _ = c.do("POST", base+"/files/permissions", map[string]any{"dir/sub/a.txt": map[string]any{"mode": 600}}, nil)
	require.Equal(t, 200, code)
	code, out, _ = c.do("GET", base+"/files/info?path=dir/sub/a.txt", nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, 600.0, out["dir/sub/a.txt"].(map[string]any)["mode"])
	code, _, _ = c.do("DELETE", base+"/files?path=dir/sub/a.txt&path=dir/never", nil, nil)
	assert.Equal(t, 200, code, "removing a missing file is fine")
	code, _, _ = c.do("DELETE", base+"/files?path=dir/sub", nil, nil)
	assert.Equal(t, 500, code, "files/remove of a directory")
	code, _, _ = c.do("DELETE", base+"/directories?path=dir", nil, nil)
	assert.Equal(t, 200, code)
	code, _, _ = c.do("GET", base+"/files/info?path=dir", nil, nil)
	assert.Equal(t, 404, code)
	code, _, _ = c.do("GET", base+"/metrics", nil, nil)
	assert.Equal(t, 200, code)
}

// route is the route header the endpoints API gives for sandbox id's port.
func (c osbWire) route(id, port string) string {
	c.t.Helper()
	code, out, _ := c.do("GET", "/v1/sandboxes/"+id+"/endpoints/"+port, nil, nil)
	require.Equal(c.t, 200, code)
	return out["headers"].(map[string]any)["X-Sandboxkit-Execd-Route"].(string)
}

// sh runs command in sandbox id through execd and returns its stdout.
func (c osbWire) sh(id, command string) string {
	c.t.Helper()
	data, _ := json.Marshal(map[string]any{"command": command})
	req, _ := http.NewRequest("POST", c.base+"/sandboxes/"+id+"/proxy/44772/command", bytes.NewReader(data))
	req.Header.Set("OPEN-SANDBOX-API-KEY", osbKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	require.Equal(c.t, 200, resp.StatusCode)
	var out strings.Builder
	for _, ev := range events(c.t.(*testing.T), resp.Body) {
		if ev["type"] == "stdout" {
			out.WriteString(ev["text"].(string) + "\n")
		}
	}
	return out.String()
}

// TestOpenSandboxAPISnapshots takes a snapshot through the API, lists,
// fetches and restores it (a create with snapshotId sees the files), and
// deletes it, over the local backend's snapshots.
func TestOpenSandboxAPISnapshots(t *testing.T) {
	c := newOSBWire(t)
	id := c.create(nil)
	other := c.create(nil)
	c.sh(id, "echo kept > snap.txt")
	code, out, _ := c.do("POST", "/v1/sandboxes/"+id+"/snapshots", map[string]any{"name": "first"}, nil)
	require.Equal(t, 202, code, "%v", out)
	snap := out["id"].(string)
	assert.Equal(t, id, out["sandboxId"])
	assert.Equal(t, "first", out["name"])
	assert.Equal(t, "Ready", out["status"].(map[string]any)["state"])

	code, out, _ = c.do("GET", "/v1/snapshots", nil, nil)
	require.Equal(t, 200, code)
	require.Len(t, out["items"], 1)
	assert.Equal(t, snap, out["items"].([]any)[0].(map[string]any)["id"])
	assert.Equal(t, 1.0, out["pagination"].(map[string]any)["totalItems"])
	code, out, _ = c.do("GET", "/v1/snapshots?sandboxId="+other, nil, nil)
	require.Equal(t, 200, code)
	assert.Empty(t, out["items"])
	code, out, _ = c.do("GET", "/v1/snapshots/"+snap, nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, snap, out["id"])
	code, _, _ = c.do("GET", "/v1/snapshots/"+snap, nil, map[string]string{"X-Conversation-Id": "someone-else"})
	assert.Equal(t, 404, code, "another conversation's snapshot")

	restored := c.create(map[string]any{"image": nil, "snapshotId": snap})
	assert.Equal(t, "kept\n", c.sh(restored, "cat snap.txt"))
	code, out, _ = c.do("GET", "/v1/sandboxes/"+restored, nil, nil)
	require.Equal(t, 200, code)
	assert.Equal(t, map[string]any{"uri": "snapshot:" + snap}, out["image"])
	code, _, _ = c.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "x"}, "snapshotId": snap, "entrypoint": []string{"sh"}}, nil)
	assert.Equal(t, 422, code, "both image and snapshotId")

	code, _, _ = c.do("DELETE", "/v1/snapshots/"+snap, nil, nil)
	assert.Equal(t, 204, code)
	code, out, _ = c.do("GET", "/v1/snapshots/"+snap, nil, nil)
	assert.Equal(t, 404, code)
	assert.Equal(t, "SANDBOX::SNAPSHOT_NOT_FOUND", out["code"])
	code, _, _ = c.do("POST", "/v1/sandboxes", map[string]any{"snapshotId": snap, "entrypoint": []string{"tail", "-f", "/dev/null"}}, nil)
	assert.Equal(t, 404, code, "a create from a deleted snapshot")
}

// TestOpenSandboxAPIEgressNative: a create's networkPolicy becomes the
// native sandbox's egress policy within the operator's bound, and the
// egress sidecar's API on port 18080 reads, patches and deletes its rules.
func TestOpenSandboxAPIEgressNative(t *testing.T) {
	s, _, _ := nativeServer(t, func(o *server.Options) {
		o.APIKey, o.AdminKey = osbKey, observeAdminKey
		o.OSBEgressBound = &backend.Egress{Default: "allow", Deny: []string{"169.254.169.254"}}
	})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	c := osbWire{t: t, base: hs.URL, image: dockertest.BusyboxImage}
	id := c.create(map[string]any{"networkPolicy": map[string]any{
		"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "example.com"}},
	}})
	policy := func(out map[string]any) map[string]any { return out["policy"].(map[string]any) }
	code, out, _ := c.do("GET", "/sandboxes/"+id+"/proxy/18080/policy", nil, nil)
	require.Equal(t, 200, code, "%v", out)
	assert.Equal(t, "deny_all", out["mode"])
	assert.Equal(t, map[string]any{"defaultAction": "deny", "egress": []any{
		map[string]any{"action": "deny", "target": "169.254.169.254"},
		map[string]any{"action": "allow", "target": "example.com"},
	}}, policy(out), "the agent's policy with the operator's deny rule")

	// The endpoint the SDK uses in its default mode answers the same.
	code, out, _ = c.do("GET", "/v1/sandboxes/"+id+"/endpoints/18080", nil, nil)
	require.Equal(t, 200, code)
	direct := "/" + strings.SplitN(out["endpoint"].(string), "/", 2)[1]
	route := map[string]string{"OPEN-SANDBOX-API-KEY": "", "X-Sandboxkit-Execd-Route": out["headers"].(map[string]any)["X-Sandboxkit-Execd-Route"].(string)}
	code, out, _ = c.do("PATCH", direct+"/policy", []map[string]string{{"action": "allow", "target": "pypi.org"}, {"action": "deny", "target": "pypi.org"}}, route)
	require.Equal(t, 200, code, "%v", out)
	assert.Contains(t, policy(out)["egress"], map[string]any{"action": "allow", "target": "pypi.org"}, "the first rule of a target wins")
	assert.NotContains(t, policy(out)["egress"], map[string]any{"action": "deny", "target": "pypi.org"})
	code, out, _ = c.do("DELETE", direct+"/policy", []string{"example.com"}, route)
	require.Equal(t, 200, code, "%v", out)
	assert.NotContains(t, policy(out)["egress"], map[string]any{"action": "allow", "target": "example.com"})
	code, out, _ = c.do("GET", direct+"/policy", nil, route)
	require.Equal(t, 200, code)
	assert.Equal(t, []any{
		map[string]any{"action": "deny", "target": "169.254.169.254"},
		map[string]any{"action": "allow", "target": "pypi.org"},
	}, policy(out)["egress"], "the enforcer's policy after the patch and the delete")
	// The operator's deny rule cannot be taken away.
	code, out, _ = c.do("DELETE", direct+"/policy", []string{"169.254.169.254"}, route)
	require.Equal(t, 200, code, "%v", out)
	assert.Contains(t, policy(out)["egress"], map[string]any{"action": "deny", "target": "169.254.169.254"})
	// Credentials are the operator's: the vault routes refuse an agent.
	code, out, _ = c.do("POST", direct+"/credential-vault", map[string]any{"credentials": []map[string]any{
		{"name": "k", "source": map[string]string{"type": "inline", "value": "agent-given"}}}, "bindings": []any{}}, route)
	assert.Equal(t, 403, code, "%v", out)
	assert.Contains(t, fmt.Sprint(out["message"]), "credentials are the operator's")
	code, _, _ = c.do("GET", direct+"/credential-vault", nil, route)
	assert.Equal(t, 403, code)
	// Each change, and the refused attempt, is in the audit trail; reads
	// are not.
	var changes []string
	for _, e := range auditEntries(t, hs.URL, "kind=opensandbox&sandbox="+id) {
		if strings.HasPrefix(e.Route, "egress ") {
			changes = append(changes, fmt.Sprintf("%s %d", e.Route, e.Status))
		}
	}
	assert.Equal(t, []string{"egress PATCH /policy 200", "egress DELETE /policy 200", "egress DELETE /policy 200", "egress POST /credential-vault 403"}, changes)

	// A sandbox without a policy has no sidecar: 502, as on the real server.
	plain := c.create(nil)
	code, _, _ = c.do("GET", "/sandboxes/"+plain+"/proxy/18080/policy", nil, nil)
	assert.Equal(t, 502, code)
}

// TestOpenSandboxAPIEgressRefusals: what the operator does not allow, and a
// backend that enforces no egress, refuse a networkPolicy at create.
func TestOpenSandboxAPIEgressRefusals(t *testing.T) {
	policy := map[string]any{"defaultAction": "deny", "egress": []map[string]string{{"action": "allow", "target": "example.com"}}}
	for _, tc := range []struct {
		name, want string
		status     int
		edit       func(*server.Options)
	}{
		{"agent_egress = false", "agent_egress", 400, func(o *server.Options) { o.OSBNoAgentEgress = true }},
		{"outside the bound", "the operator's policy does not allow it", 400, func(o *server.Options) {
			o.OSBEgressBound = &backend.Egress{Default: "deny", Allow: []string{"pypi.org"}}
		}},
		{"local enforces none", "cannot honour egress", 501, func(*server.Options) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, localBackend(t), func(o *server.Options) { o.APIKey = osbKey; tc.edit(o) })
			hs := httptest.NewServer(s.Handler())
			t.Cleanup(hs.Close)
			c := osbWire{t: t, base: hs.URL}
			code, out, _ := c.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": "x"}, "entrypoint": []string{"sh"}, "networkPolicy": policy}, nil)
			assert.Equal(t, tc.status, code, "%v", out)
			assert.Contains(t, out["message"], tc.want)
		})
	}
}

// TestOpenSandboxAPIVolumesNative: a create's host volumes mount paths
// under the operator's allowed_host_paths only (symlinks resolved first),
// and pvc volumes are named volumes of this server's API, shared by the
// sandboxes that name them.
func TestOpenSandboxAPIVolumesNative(t *testing.T) {
	allowed, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(allowed, "in.txt"), []byte("inside\n"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(allowed, "escape")))
	s, _, run := nativeServer(t, func(o *server.Options) {
		o.APIKey = osbKey
		o.OSBAllowedHostPaths = []string{allowed}
		o.Instance = "osbvol"
	})
	cli := dockertest.Client(t)
	claim := "data-" + run[:8]
	t.Cleanup(func() { cli.VolumeRemove(context.Background(), "osb-osbvol-"+claim, true) })
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	c := osbWire{t: t, base: hs.URL, image: dockertest.BusyboxImage}

	id := c.create(map[string]any{"volumes": []map[string]any{
		{"name": "src", "host": map[string]string{"path": allowed}, "mountPath": "/src", "readOnly": true},
		{"name": "shared", "pvc": map[string]any{"claimName": claim}, "mountPath": "/shared"},
	}})
	assert.Equal(t, "inside\n", c.sh(id, "cat /src/in.txt"))
	assert.Equal(t, "read-only\n", c.sh(id, "touch /src/x 2>/dev/null || echo read-only"))
	c.sh(id, "echo from-first > /shared/f")
	other := c.create(map[string]any{"volumes": []map[string]any{
		{"name": "shared", "pvc": map[string]any{"claimName": claim}, "mountPath": "/data"},
	}})
	assert.Equal(t, "from-first\n", c.sh(other, "cat /data/f"), "the named volume is shared")

	for name, vol := range map[string]map[string]any{
		"outside the allowed paths": {"name": "v", "host": map[string]string{"path": outside}, "mountPath": "/v"},
		"through a symlink":         {"name": "v", "host": map[string]string{"path": filepath.Join(allowed, "escape")}, "mountPath": "/v"},
		"a subPath out":             {"name": "v", "host": map[string]string{"path": allowed}, "subPath": "../x", "mountPath": "/v"},
		"ossfs":                     {"name": "v", "ossfs": map[string]string{"bucket": "b"}, "mountPath": "/v"},
		"two kinds":                 {"name": "v", "host": map[string]string{"path": allowed}, "pvc": map[string]any{"claimName": "x"}, "mountPath": "/v"},
		"a relative mountPath":      {"name": "v", "pvc": map[string]any{"claimName": "x"}, "mountPath": "v"},
	} {
		code, out, _ := c.do("POST", "/v1/sandboxes", map[string]any{"image": map[string]any{"uri": dockertest.BusyboxImage},
			"entrypoint": []string{"tail", "-f", "/dev/null"}, "volumes": []any{vol}}, nil)
		assert.Equal(t, 400, code, "%s: %v", name, out)
		assert.Equal(t, "SANDBOX::INVALID_PARAMETER", out["code"], name)
	}
}

// TestOpenSandboxConfigKeys: [sandbox.serve]'s keys for the OpenSandbox API
// reach the server's options.
func TestOpenSandboxConfigKeys(t *testing.T) {
	cfg, err := sandboxkit.ParseConfig([]byte(`
[sandbox]
backend = "local"
[sandbox.serve]
agent_egress = false
agent_egress_limit = { deny = ["169.254.169.254"] }
allowed_host_paths = ["/srv/data/"]
`), "")
	require.NoError(t, err)
	opts, _, err := server.ConfigOptions(cfg)
	require.NoError(t, err)
	assert.True(t, opts.OSBNoAgentEgress)
	assert.Equal(t, &backend.Egress{Default: "deny", Deny: []string{"169.254.169.254"}}, opts.OSBEgressBound)
	assert.Equal(t, []string{"/srv/data"}, opts.OSBAllowedHostPaths)

	cfg, err = sandboxkit.ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n[sandbox.serve]\nallowed_host_paths = [\"data\"]\n"), "")
	require.NoError(t, err)
	_, _, err = server.ConfigOptions(cfg)
	assert.ErrorContains(t, err, "allowed_host_paths")

	cfg, err = sandboxkit.ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n"), "")
	require.NoError(t, err)
	opts, _, err = server.ConfigOptions(cfg)
	require.NoError(t, err)
	assert.False(t, opts.OSBNoAgentEgress, "agents may set egress policies by default")
	assert.Nil(t, opts.OSBEgressBound)
}
