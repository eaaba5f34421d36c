package opensandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/internal/syncbuf"
	"github.com/sandboxkit/sandboxkit/server"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// create makes a sandbox and destroys it when the test ends.
func create(t *testing.T, b backend.Backend, spec backend.Spec) backend.Sandbox {
	t.Helper()
	if spec.Image == "" {
		spec.Image = testImage
	}
	sb, err := b.Create(testCtx(t), spec)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
	return sb
}

func TestConfigEnvironmentFallbacks(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})

	t.Run("keys absent: OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY", func(t *testing.T) {
		t.Setenv(opensandbox.EnvDomain, srv.Domain())
		t.Setenv(opensandbox.EnvAPIKey, testAPIKey)
		b := newBackend(t, opensandbox.Config{})
		assert.Equal(t, srv.Domain(), b.Config().Domain)
		_, err := b.List(testCtx(t), backend.Filter{})
		assert.NoError(t, err, "the key from the environment is sent")
	})
	t.Run("keys present win over the environment", func(t *testing.T) {
		t.Setenv(opensandbox.EnvDomain, "127.0.0.1:1")
		t.Setenv(opensandbox.EnvAPIKey, "wrong-key-from-env")
		b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
		_, err := b.List(testCtx(t), backend.Filter{})
		assert.NoError(t, err)
	})
	t.Run("defaults", func(t *testing.T) {
		t.Setenv(opensandbox.EnvDomain, "")
		t.Setenv(opensandbox.EnvAPIKey, "")
		b := newBackend(t, opensandbox.Config{})
		cfg := b.Config()
		assert.Equal(t, opensandbox.Config{
			Domain: "localhost:8080", Protocol: "http", RequestTimeoutSec: 30, DefaultTimeoutSec: 1800,
			ExecdPort: 44772, ReadyTimeoutSec: 300,
		}, cfg)
		assert.Equal(t, 30*time.Minute, cfg.DefaultTTL())
	})
	t.Run("a scheme in domain sets the protocol", func(t *testing.T) {
		b := newBackend(t, opensandbox.Config{Domain: "https://osb.example.com/"})
		assert.Equal(t, "osb.example.com", b.Config().Domain)
		assert.Equal(t, "https", b.Config().Protocol)
	})
	for name, cfg := range map[string]opensandbox.Config{
		"bad protocol":             {Domain: "x:1", Protocol: "ftp"},
		"scheme and protocol":      {Domain: "http://x:1", Protocol: "https"},
		"relative workdir":         {Domain: "x:1", RequestWorkingDirectory: "work"},
		"bad execd port":           {Domain: "x:1", ExecdPort: 70000},
		"unknown runtime type":     {Domain: "x:1", RuntimeType: "firecracker"},
		"negative request timeout": {Domain: "x:1", RequestTimeoutSec: -1},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			_, err := opensandbox.New(cfg)
			assert.ErrorIs(t, err, backend.ErrInvalidConfig)
		})
	}
}

func TestAPIKeyIsNeverShown(t *testing.T) {
	const key = "super-secret-api-key-0123456789"
	cfg := opensandbox.Config{Domain: "osb.example.com:8080", APIKey: key}
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	logger.Info("config", "cfg", cfg)
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg), fmt.Sprint(&cfg), logs.String()} {
		assert.NotContains(t, s, key)
		assert.Contains(t, s, "[redacted]")
	}
	assert.Equal(t, "[redacted]", cfg.Redacted().APIKey)
	assert.Equal(t, key, cfg.APIKey, "Redacted returns a copy")
	assert.Empty(t, opensandbox.Config{}.Redacted().APIKey, "no key, nothing to redact")

	t.Run("not in errors, even when the server repeats it", func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"code":"INVALID_API_KEY","message":"key %s is not valid"}`, r.Header.Get("OPEN-SANDBOX-API-KEY"))
		})
		ts := httptest.NewServer(h)
		defer ts.Close()
		b := newBackend(t, opensandbox.Config{Domain: strings.TrimPrefix(ts.URL, "http://"), APIKey: key})
		_, err := b.Get(testCtx(t), "some-id")
		require.Error(t, err)
		assert.NotContains(t, err.Error(), key)
		assert.Contains(t, err.Error(), "INVALID_API_KEY")
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	})

	t.Run("not in logs of a whole sandbox life, nor the execd token", func(t *testing.T) {
		srv := newServer(t, opensandboxtest.Options{APIKey: key})
		var logs syncbuf.Buffer
		b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: key},
			opensandbox.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
		sb, err := b.Create(testCtx(t), backend.Spec{Name: "logs", Image: testImage, Ports: []backend.Port{{Port: 8080, HostPort: 18080}}})
		require.NoError(t, err)
		_, err = sb.Exec(testCtx(t), backend.ExecRequest{Shell: "echo hi", Timeout: 50 * time.Millisecond})
		require.NoError(t, err)
		_, err = sb.Exec(testCtx(t), backend.ExecRequest{Shell: "sleep 5", Timeout: 50 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, sb.Destroy(testCtx(t)))
		var body struct{ Env map[string]string }
		reqs := srv.CreateRequests()
		require.NoError(t, json.Unmarshal(reqs[len(reqs)-1], &body))
		token := body.Env["EXECD_ACCESS_TOKEN"]
		require.NotEmpty(t, token)
		assert.NotEmpty(t, logs.String(), "debug logging happened")
		assert.NotContains(t, logs.String(), key)
		assert.NotContains(t, logs.String(), token)
	})
}

func TestErrorShapesFromTheServer(t *testing.T) {
	var status int
	var body string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	defer ts.Close()
	b := newBackend(t, opensandbox.Config{Domain: strings.TrimPrefix(ts.URL, "http://"), APIKey: testAPIKey})
	for _, c := range []struct {
		name     string
		status   int
		body     string
		sentinel error
		text     string
	}{
		{"404 code and message", 404, `{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox x not found."}`, backend.ErrNotFound, "404 Not Found: DOCKER::SANDBOX_NOT_FOUND: Sandbox x not found."},
		{"422 FastAPI detail", 422, `{"detail":[{"type":"missing","loc":["body","entrypoint"],"msg":"Field required"}]}`, backend.ErrInvalidConfig, "VALIDATION_ERROR: body.entrypoint: Field required"},
		{"400 code and message", 400, `{"code":"DOCKER::INVALID_EXPIRATION","message":"New expiration time must be in the future."}`, backend.ErrInvalidConfig, "DOCKER::INVALID_EXPIRATION"},
		{"503 plain text", 503, `upstream unavailable`, backend.ErrUnavailable, "upstream unavailable"},
		{"501", 501, `{"code":"NOT_IMPLEMENTED","message":"no"}`, errors.ErrUnsupported, "NOT_IMPLEMENTED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, body = c.status, c.body
			_, err := b.Get(testCtx(t), "x")
			assert.ErrorIs(t, err, c.sentinel)
			assert.ErrorContains(t, err, c.text)
			ae, ok := errors.AsType[*opensandbox.APIError](err)
			require.True(t, ok, "%T", err)
			assert.Equal(t, c.status, ae.Status)
			oe, ok := errors.AsType[*backend.OpError](err)
			require.True(t, ok)
			assert.Equal(t, "get", oe.Op)
			assert.Equal(t, "opensandbox", oe.Backend)
		})
	}
}

func TestUnreachableServerNamesTheDomain(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	b := newBackend(t, opensandbox.Config{Domain: addr, APIKey: testAPIKey})
	_, err = b.Create(testCtx(t), backend.Spec{Name: "x", Image: testImage})
	assert.ErrorIs(t, err, backend.ErrUnavailable)
	assert.ErrorContains(t, err, "http://"+addr)
	assert.ErrorContains(t, err, "[sandbox.opensandbox] domain or OPEN_SANDBOX_DOMAIN")
	assert.NotContains(t, err.Error(), testAPIKey)
}

func TestCreate(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, PendingFor: 400 * time.Millisecond})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey, RequestWorkingDirectory: "/srv/base"})

	t.Run("what is sent", func(t *testing.T) {
		var progress []backend.Progress
		start := time.Now()
		sb, err := b.Create(testCtx(t), backend.Spec{
			Name: "main", Session: "sess-1", Owner: "host.example:42:99", Image: "python:3.12",
			Env: map[string]string{"A": "1"}, Labels: map[string]string{"team": "ml", "note": "free text: ok?"},
			WorkingDir: t.TempDir(), TTL: 90 * time.Minute,
			Resources: backend.Resources{CPUs: 1.5, MemoryBytes: 1 << 30},
			Volumes: []backend.Volume{
				{Type: backend.VolumeBind, Source: "/srv/data", Target: "/data", ReadOnly: true},
				{Type: backend.VolumeNamed, Source: "shared", Target: "/shared"},
			},
			Ports:    []backend.Port{{Port: 8080}},
			Progress: func(p backend.Progress) { progress = append(progress, p) },
		})
		require.NoError(t, err)
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond, "Create waits for Pending to become Running")
		require.NotEmpty(t, progress)
		assert.Equal(t, backend.Progress{Sandbox: "main", Step: "provision", Status: "state Pending: reason provisioning: Sandbox is being provisioned."}, progress[0])
		assert.True(t, progress[len(progress)-1].Done)

		reqs := srv.CreateRequests()
		var req struct {
			Image          struct{ URI string }
			Entrypoint     []string
			Timeout        int
			ResourceLimits map[string]string
			Env            map[string]string
			Metadata       map[string]string
			Volumes        []map[string]any
		}
		require.NoError(t, json.Unmarshal(reqs[len(reqs)-1], &req))
		assert.Equal(t, "python:3.12", req.Image.URI)
		assert.Equal(t, []string{"tail", "-f", "/dev/null"}, req.Entrypoint)
		assert.Equal(t, 5400, req.Timeout)
		assert.Equal(t, map[string]string{"cpu": "1500m", "memory": "1Gi"}, req.ResourceLimits)
		assert.Equal(t, "1", req.Env["A"])
		assert.Len(t, req.Env["EXECD_ACCESS_TOKEN"], 64)
		assert.Equal(t, "sess-1", req.Metadata["sandboxkit.session"])
		assert.Equal(t, "opensandbox", req.Metadata["sandboxkit.backend"])
		assert.Equal(t, "ml", req.Metadata["team"])
		assert.NotContains(t, req.Metadata, "sandboxkit.owner.2")
		assert.JSONEq(t, `[{"name":"v0-data","host":{"path":"/srv/data"},"mountPath":"/data","readOnly":true},
			{"name":"v1-shared","pvc":{"claimName":"shared"},"mountPath":"/shared"}]`, mustJSON(t, req.Volumes))

		info, err := sb.Info(testCtx(t))
		require.NoError(t, err)
		assert.Equal(t, "main", info.Name)
		assert.Equal(t, "sess-1", info.Session)
		assert.Equal(t, "host.example:42:99", info.Owner)
		assert.Equal(t, "python:3.12", info.Image)
		assert.Equal(t, "free text: ok?", info.Labels["note"], "labels outside the label rules come back as they were")
		assert.Equal(t, "host.example:42:99", info.Labels[backend.LabelOwner])
		assert.Equal(t, info.ExpiresAt.UTC().Format(time.RFC3339), info.Labels[backend.LabelExpiresAt])
		// The TTL runs from a moment of the Create call (the server, in this
		// process, shares its clock; it writes microseconds): bounds rather
		// than a tolerance, which a loaded machine overran by 36 ms in CI.
		assert.False(t, info.ExpiresAt.Before(start.Add(90*time.Minute).Truncate(time.Microsecond)), "expires %v, before the Create call (%v) + 90m", info.ExpiresAt, start)
		assert.False(t, info.ExpiresAt.After(time.Now().Add(90*time.Minute)), "expires %v, after now + 90m", info.ExpiresAt)
		for k := range info.Labels {
			assert.False(t, strings.HasPrefix(k, "sandboxkit.opensandbox."), "internal key %s shown", k)
		}

		infos, err := b.List(testCtx(t), backend.Filter{Labels: map[string]string{"note": "free text: ok?", backend.LabelOwner: "host.example:42:99"}})
		require.NoError(t, err)
		require.Len(t, infos, 1)
		assert.Equal(t, sb.ID(), infos[0].ID)
	})

	t.Run("default working directory is execd's, recorded for List", func(t *testing.T) {
		b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
		sb := create(t, b, backend.Spec{Name: "wd"})
		infos, err := b.List(testCtx(t), backend.Filter{Name: "wd"})
		require.NoError(t, err)
		require.Len(t, infos, 1)
		assert.Equal(t, srv.SandboxDir(sb.ID()), infos[0].WorkDir)
	})

	t.Run("relative working_dir joins request_working_directory", func(t *testing.T) {
		var req struct{ Metadata map[string]string }
		_, err := b.Create(testCtx(t), backend.Spec{Name: "rel", Image: testImage, WorkingDir: "proj", Resources: backend.Resources{GPUs: "all"}})
		assert.ErrorIs(t, err, errors.ErrUnsupported, "gpus all")
		n := len(srv.CreateRequests())
		_ = req
		assert.Equal(t, n, len(srv.CreateRequests()), "nothing sent for a refused spec")
	})

	t.Run("an entrypoint that exits fails Create with the server's reason", func(t *testing.T) {
		before := srv.SandboxIDs()
		_, err := b.Create(testCtx(t), backend.Spec{Name: "fails", Image: testImage, Command: []string{"sh", "-c", "echo bye; exit 3"}})
		require.Error(t, err)
		assert.ErrorContains(t, err, "state Failed")
		assert.ErrorContains(t, err, "reason container_exited")
		assert.ErrorContains(t, err, "exit status 3")
		assert.Equal(t, before, srv.SandboxIDs(), "the failed sandbox is deleted")
	})

	t.Run("refused options make nothing", func(t *testing.T) {
		n := len(srv.CreateRequests())
		for _, spec := range []backend.Spec{
			{Name: "x", Image: testImage, Network: "none"},
			{Name: "x", Image: testImage, Ports: []backend.Port{{Port: 53, Protocol: "udp"}}},
			{Name: "x", Image: testImage, Volumes: []backend.Volume{{Type: backend.VolumeNamed, Source: "Bad_Name", Target: "/x"}}},
			{Name: "x", Image: testImage, ImageCommand: true},
			{Name: "x", Image: testImage, Existing: "abc"},
			{Name: "x"},
		} {
			_, err := b.Create(testCtx(t), spec)
			assert.Error(t, err, "%+v", spec)
		}
		assert.Equal(t, n, len(srv.CreateRequests()))
	})
}

func mustJSON(t *testing.T, v any) string {
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return string(data)
}

func TestReadinessTimeout(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, ReadyAfter: time.Hour})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey, ReadyTimeoutSec: 1})
	start := time.Now()
	_, err := b.Create(testCtx(t), backend.Spec{Name: "slow", Image: testImage})
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.ErrorContains(t, err, "did not answer /ping")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, srv.SandboxIDs(), "the sandbox that never became ready is deleted")
}

func TestLifecycle(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})

	t.Run("renew without expiry is unsupported", func(t *testing.T) {
		sb := create(t, b, backend.Spec{Name: "no-ttl"})
		_, err := sb.(backend.Renewer).Renew(testCtx(t), time.Hour)
		assert.ErrorIs(t, err, errors.ErrUnsupported)
		assert.ErrorContains(t, err, "DOCKER::INVALID_EXPIRATION")
		_, err = sb.(backend.Renewer).Renew(testCtx(t), 0)
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	})

	t.Run("list pages through every sandbox", func(t *testing.T) {
		defer opensandbox.SetListPageSize(2)()
		var ids []string
		for i := range 5 {
			ids = append(ids, create(t, b, backend.Spec{Name: fmt.Sprintf("page-%d", i), Session: "paging"}).ID())
		}
		infos, err := b.List(testCtx(t), backend.Filter{Session: "paging"})
		require.NoError(t, err)
		var got []string
		for _, info := range infos {
			got = append(got, info.ID)
		}
		assert.ElementsMatch(t, ids, got)
		assert.GreaterOrEqual(t, srv.Requests()["GET /v1/sandboxes"], 3)
	})

	t.Run("users by name", func(t *testing.T) {
		sb := create(t, b, backend.Spec{Name: "users", User: "nobody"})
		res, err := sb.Exec(testCtx(t), backend.ExecRequest{Cmd: []string{"id", "-un"}})
		require.NoError(t, err)
		assert.Equal(t, "nobody\n", string(res.Stdout), "Spec.User is the default")
		res, err = sb.Exec(testCtx(t), backend.ExecRequest{Cmd: []string{"id", "-u"}, User: "root"})
		require.NoError(t, err)
		assert.Equal(t, "0\n", string(res.Stdout))
		_, err = sb.Exec(testCtx(t), backend.ExecRequest{Cmd: []string{"true"}, User: "no-such-user-here"})
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	})

	t.Run("endpoints", func(t *testing.T) {
		sb := create(t, b, backend.Spec{Name: "ports", Ports: []backend.Port{{Port: 9000}}})
		e := sb.(*opensandbox.Sandbox)
		addr, err := e.Endpoint(testCtx(t), 9000)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:9000", addr)
		_, err = e.Endpoint(testCtx(t), 9001)
		assert.ErrorIs(t, err, backend.ErrNotFound)
		url, h, err := e.HTTPEndpoint(testCtx(t), 44772)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(url, "http://127.0.0.1:"), url)
		assert.NotEmpty(t, h.Get(server.OSBHeaderRoute), "the endpoint's headers")
		assert.Empty(t, h.Get("OPEN-SANDBOX-API-KEY"))

		bp := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey, UseServerProxy: true})
		sbp, err := bp.Get(testCtx(t), sb.ID())
		require.NoError(t, err)
		url, _, err = sbp.(*opensandbox.Sandbox).HTTPEndpoint(testCtx(t), 9000)
		require.NoError(t, err)
		assert.Equal(t, "http://"+srv.Domain()+"/sandboxes/"+sb.ID()+"/proxy/9000", url)
	})

	t.Run("execd requires the access token", func(t *testing.T) {
		sb := create(t, b, backend.Spec{Name: "token"})
		url, h, err := sb.(*opensandbox.Sandbox).HTTPEndpoint(testCtx(t), 44772)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, url+"/ping", nil)
		require.NoError(t, err)
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no token, no execd")
	})

	t.Run("exec after destroy is not found", func(t *testing.T) {
		sb := create(t, b, backend.Spec{Name: "gone"})
		require.NoError(t, sb.Destroy(testCtx(t)))
		_, err := sb.Exec(testCtx(t), backend.ExecRequest{Cmd: []string{"true"}})
		assert.ErrorIs(t, err, backend.ErrNotFound)
		_, err = sbfiles.ReadFile(testCtx(t), sb, "/etc/hostname")
		assert.ErrorIs(t, err, backend.ErrNotFound)
		assert.NoError(t, sb.Destroy(testCtx(t)))
	})
}

func TestFileErrors(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	sb := create(t, b, backend.Spec{Name: "files"})
	fsys := sb.(backend.FileSystem)
	ctx := testCtx(t)
	require.NoError(t, fsys.WriteFile(ctx, "dir/f.txt", strings.NewReader("x"), 0o640))
	_, err := sb.Exec(ctx, backend.ExecRequest{Cmd: []string{"ln", "-s", "f.txt", "dir/link"}})
	require.NoError(t, err)

	_, err = fsys.Stat(ctx, "dir/link")
	assert.ErrorIs(t, err, errors.ErrUnsupported, "execd does not follow symlinks")
	fi, err := sbfiles.Stat(ctx, sb, "dir/link")
	require.NoError(t, err, "sbfiles.Stat falls back to Exec")
	assert.Equal(t, int64(1), fi.Size())

	_, err = fsys.ReadDir(ctx, "dir/f.txt")
	assert.ErrorContains(t, err, "not a directory")
	_, err = fsys.ReadFile(ctx, "dir")
	assert.ErrorContains(t, err, "is a directory")
	err = fsys.WriteFile(ctx, "dir/f.txt/child", strings.NewReader("y"), 0o644)
	assert.ErrorContains(t, err, "not a directory")
	_, err = fsys.ReadFile(ctx, "missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.False(t, errors.Is(err, backend.ErrNotFound), "a missing file is not a missing sandbox")
}
