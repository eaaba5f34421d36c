package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/lite"
	"github.com/sandboxkit/sandboxkit/internal/egresstest"
	"github.com/sandboxkit/sandboxkit/internal/fakenet"
	"github.com/sandboxkit/sandboxkit/internal/harness"
	"github.com/sandboxkit/sandboxkit/internal/rootfs"
	"github.com/sandboxkit/sandboxkit/server"
)

// adminDo sends an /admin request with key and returns the status and body.
func adminDo(t *testing.T, url, method, key string, body any) (int, string) {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		data, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(data)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.String()
}

// The admin endpoints are closed without an admin key, and the agents'
// API key never opens them.
func TestEgressAdminAuth(t *testing.T) {
	b := localBackend(t)
	_, err := server.New(server.Options{Backend: b, Spec: mainSpec, APIKey: "k", AdminKey: "k"})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	require.Contains(t, err.Error(), "admin key is the API key")

	closed := httptest.NewServer(newServer(t, b, func(o *server.Options) { o.APIKey = "agent" }).Handler())
	defer closed.Close()
	code, body := adminDo(t, closed.URL+"/admin/sandboxes/x/egress", http.MethodGet, "agent", nil)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, server.EnvAdminKey)

	open := httptest.NewServer(newServer(t, b, func(o *server.Options) { o.APIKey, o.AdminKey = "agent", "operator" }).Handler())
	defer open.Close()
	for _, key := range []string{"", "agent", "wrong"} {
		code, _ := adminDo(t, open.URL+"/admin/sandboxes/x/egress", http.MethodPut, key, backend.Egress{})
		require.Equal(t, http.StatusUnauthorized, code, "key %q", key)
	}
	code, body = adminDo(t, open.URL+"/admin/sandboxes/x/egress", http.MethodGet, "operator", nil)
	require.Equal(t, http.StatusNotImplemented, code, body)
	require.Contains(t, body, "local backend does not enforce egress")
}

// On lite, the operator reads and changes the policy of a sandbox the
// server made from an entry with one; bad policies change nothing.
// liteOnFakenet returns a fake internet, a lite backend whose sandboxes'
// DNS is its, and a busybox root file system (an image "dir:" names).
func liteOnFakenet(t *testing.T) (*fakenet.Net, *lite.Backend, string) {
	t.Helper()
	harness.RequireLite(t)
	fn := fakenet.Start(t)
	b, dir := liteBackend(t, "sbx-egress-lite-", fn.DNS.String())
	return fn, b, dir
}

// liteBackend returns a lite backend on runc whose folders are a new
// temporary one's (prefix names it; not t.TempDir: overlayfs options
// cannot hold a subtest's comma), with egressDNS as its sandboxes' DNS
// server when set, and a busybox root file system (an image "dir:"
// names). Both go at the end of t, after the sandboxes the backend still
// holds.
func liteBackend(t *testing.T, prefix, egressDNS string) (*lite.Backend, string) {
	t.Helper()
	dir, err := rootfs.Busybox()
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	base, err := os.MkdirTemp("", prefix)
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(base) })
	b, err := lite.New(lite.Config{Runtime: "runc", StateDir: filepath.Join(base, "state"), EgressDNS: egressDNS,
		ImageDir: filepath.Join(base, "images"), RuntimeRoot: filepath.Join(base, "runtime")})
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	destroyLeftOnCleanup(t, b)
	return b, dir
}

// destroyLeftOnCleanup removes, when t ends, the sandboxes lite backend b
// still holds. Registered after b's folder's removal, it runs before it,
// and after the server's Close (registered later), which leaves its
// sandboxes running unless told to delete them: they would run on without
// their folder.
func destroyLeftOnCleanup(t *testing.T, b *lite.Backend) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		infos, err := b.List(ctx, backend.Filter{})
		if err != nil {
			t.Errorf("listing the lite sandboxes left: %v", err)
			return
		}
		for _, info := range infos {
			sb, err := b.Get(ctx, info.ID)
			if err == nil {
				err = sb.Destroy(ctx)
			}
			if err != nil {
				t.Errorf("removing lite sandbox %s: %v", info.ID, err)
			}
		}
	})
}

func TestEgressAdminLite(t *testing.T) {
	_, b, dir := liteOnFakenet(t)
	s := newServer(t, b, func(o *server.Options) {
		o.APIKey, o.AdminKey = "agent", "operator"
		o.Spec = func(typ string) (backend.Spec, error) {
			return backend.Spec{Name: typ, Image: "dir:" + dir, Egress: &backend.Egress{Allow: []string{"allowed.test:443"}}}, nil
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info, err := s.Create(ctx, "conv:egress", "main", 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Delete(context.Background(), "conv:egress", info.ID) })
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	url := hs.URL + "/admin/sandboxes/" + info.ID + "/egress"

	var st backend.EgressStatus
	code, body := adminDo(t, url, http.MethodGet, "operator", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, []string{"allowed.test:443"}, st.Policy.Allow)
	require.NotNil(t, st.Denials)

	code, body = adminDo(t, url, http.MethodPut, "operator", backend.Egress{Allow: []string{"*bad.test"}})
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "*bad.test")
	code, body = adminDo(t, url, http.MethodPut, "operator", map[string]any{"allow": []string{"a.test"}, "alow": 1})
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "alow")
	code, body = adminDo(t, url, http.MethodPut, "agent", backend.Egress{Default: "allow"})
	require.Equal(t, http.StatusUnauthorized, code, body)

	code, body = adminDo(t, url, http.MethodPut, "operator", backend.Egress{Default: "deny", Allow: []string{"www.allowed.test:80"}})
	require.Equal(t, http.StatusNoContent, code, body)
	code, body = adminDo(t, url, http.MethodGet, "operator", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, []string{"www.allowed.test:80"}, st.Policy.Allow)

	code, body = adminDo(t, hs.URL+"/admin/sandboxes/0123456789ab/egress", http.MethodGet, "operator", nil)
	require.Equal(t, http.StatusNotFound, code, body)
	require.True(t, strings.Contains(body, "not one of this server's"), body)

	// A refused attempt shows in the metrics; the operator's change in the
	// audit trail.
	res := toolCallKey(t, hs.URL, "agent", "egress", "execute", map[string]any{"sandbox_id": info.ID, "command": "nslookup denied.test; true"})
	require.False(t, res.IsError, res.Output)
	denials := func() float64 {
		code, data := get(t, hs.URL, "/metrics", "operator")
		require.Equal(t, http.StatusOK, code)
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(data))
		require.NoError(t, err)
		return value(families, "sandboxkit_egress_denials_total", map[string]string{})
	}
	waitFor(t, func() bool { return denials() >= 1 })
	n := denials()
	assert.Equal(t, n, denials(), "a second scrape counted the same denials again")
	code, body = adminDo(t, hs.URL+"/admin/audit?kind=admin", http.MethodGet, "operator", nil)
	require.Equal(t, http.StatusOK, code, body)
	var trail struct{ Entries []server.AuditEntry }
	require.NoError(t, json.Unmarshal([]byte(body), &trail))
	var puts []int
	for _, e := range trail.Entries {
		if e.Route == "PUT /admin/sandboxes/{id}/egress" && e.Sandbox == info.ID {
			puts = append(puts, e.Status)
		}
	}
	assert.Equal(t, []int{http.StatusBadRequest, http.StatusBadRequest, http.StatusNoContent}, puts, "the operator's PUTs (the agent's, refused, is not the operator's)")
}

// sbx serve with a sandbox type that declares a credential: the agent's
// requests to the declared host carry it, and no answer of the server
// (tool results, the sandbox's listing and egress status, the audit trail,
// the metrics, the console's page of the sandbox) holds the value; the
// egress status records the requests that carried it.
func TestServeCredentialsLite(t *testing.T) {
	fn, b, dir := liteOnFakenet(t)
	egresstest.TrustFakenet(t, fn)
	const value = "serve-brokered-value-5e0b"
	t.Setenv("SBX_TEST_SERVE_CREDENTIAL", value)
	s := newServer(t, b, func(o *server.Options) {
		o.APIKey, o.AdminKey = "agent", "operator"
		o.Spec = func(typ string) (backend.Spec, error) {
			return backend.Spec{Name: typ, Image: "dir:" + dir, Egress: &backend.Egress{Default: "deny", Allow: []string{"allowed.test"}},
				Credentials: []backend.Credential{{Name: "api", Hosts: []string{"allowed.test"}, Header: "X-Api-Key", Env: "API_KEY",
					From: backend.CredentialSource{Env: "SBX_TEST_SERVE_CREDENTIAL"}}}}, nil
		}
	})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	var answers []string
	call := func(tool string, args map[string]any) string {
		res := toolCallKey(t, hs.URL, "agent", "creds", tool, args)
		require.False(t, res.IsError, "%s: %s", tool, res.Output)
		answers = append(answers, res.Output)
		return res.Output
	}
	out := call("create_sandbox", map[string]any{"type": "main"})
	m := regexp.MustCompile(`sandbox_id=([0-9a-f]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	id := m[1]
	sb, err := b.Get(t.Context(), id)
	require.NoError(t, err)
	env := egresstest.NewEnv(t, fn, b, sb)
	env.MustBroker(t, value)

	got := call("execute", map[string]any{"sandbox_id": id, "command": `echo "$API_KEY"; env; /netprobe get-verified https://allowed.test/header?name=X-Api-Key`})
	require.Contains(t, got, "sbx-placeholder-api-")
	call("list_sandboxes", map[string]any{})
	for _, path := range []string{"/admin/sandboxes/" + id + "/egress", "/admin/audit", "/metrics"} {
		code, body := get(t, hs.URL, path, "operator")
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
		answers = append(answers, string(body))
	}
	env.MustRecordBrokered(t, "api", value)
	for i, a := range answers {
		require.NotContains(t, a, value, "answer %d holds the value", i)
	}
}
