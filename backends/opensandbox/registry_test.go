package opensandbox_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// TestOpenSageConfigThroughTheRegistry loads an OpenSage-style config (every
// key of its [sandbox.opensandbox] table, templates) strictly through the
// default registry, opens the backend and runs a session's worth of work, as
// sbx run would.
func TestOpenSageConfigThroughTheRegistry(t *testing.T) {
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	t.Setenv("OSB_TEST_DOMAIN", srv.Domain())
	t.Setenv(opensandbox.EnvAPIKey, testAPIKey) // api_key left out: from the environment
	cfgFile := filepath.Join(t.TempDir(), "config.toml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`
task_name = "demo"
DEFAULT_IMAGE = "ubuntu:24.04"

[llm]
model = "whatever"

[sandbox]
backend = "opensandbox"
default_image = "${DEFAULT_IMAGE}"

[sandbox.opensandbox]
domain = "${OSB_TEST_DOMAIN}"
protocol = "http"
request_timeout_sec = 60
use_server_proxy = true
default_timeout_sec = 3600
execd_port = 44772
request_working_directory = ""
runtime_type = "docker"
docker_host = ""
docker_remote_host = ""
namespace = ""
context = ""
kubeconfig = ""

[sandbox.sandboxes.main]
environment = { GREETING = "hello" }
ttl = "2h"
`), 0o644))

	reg := sandboxkit.DefaultRegistry()
	cfg, err := reg.LoadConfig(cfgFile)
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings)
	oc, ok := cfg.BackendConfig(opensandbox.Name).(*opensandbox.Config)
	require.True(t, ok)
	assert.Equal(t, srv.Domain(), oc.Domain)
	assert.True(t, oc.UseServerProxy)
	assert.Equal(t, 3600, oc.DefaultTimeoutSec)
	// default_ttl is not written: default_timeout_sec is the TTL of entries
	// without their own (main has ttl = "2h").
	assert.Equal(t, time.Hour, cfg.Sandbox.DefaultTTL)

	b, err := reg.Open(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer b.Close()
	spec, err := cfg.Spec("main")
	require.NoError(t, err)
	spec.Session = "registry-test"
	assert.Equal(t, 2*time.Hour, spec.TTL)
	sb := create(t, b, spec)
	info, err := sb.Info(testCtx(t))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(2*time.Hour), info.ExpiresAt, 5*time.Minute,
		"the entry's ttl reaches the server as the sandbox's timeout")

	tools := fileops.New(sb, fileops.Options{})
	out, err := tools.WriteFile(testCtx(t), "notes/hello.txt", "hi there\n")
	require.NoError(t, err)
	assert.Equal(t, "Created file 'notes/hello.txt' (9 bytes).", out)
	res, err := tools.Execute(testCtx(t), `cat notes/hello.txt; echo "$GREETING"`, 0)
	require.NoError(t, err)
	assert.Equal(t, "hi there\nhello\nExit code: 0", res.String())

	t.Run("default_timeout_sec is the default TTL", func(t *testing.T) {
		for _, tc := range []struct {
			name, text string
			want       time.Duration
		}{
			{"no table", "[sandbox]\nbackend = \"opensandbox\"\n", opensandbox.DefaultTimeoutSec * time.Second},
			{"table", "[sandbox]\nbackend = \"opensandbox\"\n[sandbox.opensandbox]\ndefault_timeout_sec = 600\n", 10 * time.Minute},
			{"default_ttl wins", "[sandbox]\nbackend = \"opensandbox\"\ndefault_ttl = \"3h\"\n[sandbox.opensandbox]\ndefault_timeout_sec = 600\n", 3 * time.Hour},
			{"default_ttl 0 wins", "[sandbox]\nbackend = \"opensandbox\"\ndefault_ttl = 0\n[sandbox.opensandbox]\ndefault_timeout_sec = 600\n", 0},
			{"other backend", "[sandbox]\nbackend = \"local\"\n[sandbox.opensandbox]\ndefault_timeout_sec = 600\n", sandboxkit.DefaultTTL},
		} {
			cfg, err := reg.ParseConfig([]byte(tc.text+"[sandbox.sandboxes.main]\n"), "")
			require.NoError(t, err, tc.name)
			assert.Equal(t, tc.want, cfg.Sandbox.DefaultTTL, tc.name)
			spec, err := cfg.Spec("main")
			require.NoError(t, err, tc.name)
			assert.Equal(t, tc.want, spec.TTL, tc.name)
		}
	})

	t.Run("extra.opensandbox_timeout_sec is an entry's TTL", func(t *testing.T) {
		const head = "[sandbox]\nbackend = \"opensandbox\"\ndefault_ttl = \"3h\"\n"
		for _, tc := range []struct {
			name, entry string
			want        time.Duration
		}{
			{"int", "[sandbox.sandboxes.main.extra]\nopensandbox_timeout_sec = 900\n", 15 * time.Minute},
			{"string", "[sandbox.sandboxes.main.extra]\nopensandbox_timeout_sec = \"120\"\n", 2 * time.Minute},
			{"ttl wins", "[sandbox.sandboxes.main]\nttl = \"1h\"\n[sandbox.sandboxes.main.extra]\nopensandbox_timeout_sec = 900\n", time.Hour},
			{"absent", "[sandbox.sandboxes.main]\n", 3 * time.Hour},
		} {
			cfg, err := reg.ParseConfig([]byte(head+tc.entry), "")
			require.NoError(t, err, tc.name)
			spec, err := cfg.Spec("main")
			require.NoError(t, err, tc.name)
			assert.Equal(t, tc.want, spec.TTL, tc.name)
		}
		_, err := reg.ParseConfig([]byte(head+"[sandbox.sandboxes.main.extra]\nopensandbox_timeout_sec = \"soon\"\n"), "")
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.ErrorContains(t, err, "sandbox.sandboxes.main.extra.opensandbox_timeout_sec")
		// Other backends leave the key to whoever reads extra.
		cfg, err := reg.ParseConfig([]byte("[sandbox]\nbackend = \"local\"\ndefault_ttl = \"3h\"\n[sandbox.sandboxes.main.extra]\nopensandbox_timeout_sec = \"soon\"\n"), "")
		require.NoError(t, err)
		spec, err := cfg.Spec("main")
		require.NoError(t, err)
		assert.Equal(t, 3*time.Hour, spec.TTL)
	})

	t.Run("unknown keys are still refused", func(t *testing.T) {
		_, err := reg.ParseConfig([]byte("[sandbox]\nbackend = \"opensandbox\"\n[sandbox.opensandbox]\ndomian = \"x\"\n"), "")
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.ErrorContains(t, err, `"sandbox.opensandbox.domian"`)
	})
}
