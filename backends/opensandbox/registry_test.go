package opensandbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// openOpenSandbox is the factory proposed for the root registry.go (there
// it uses the package's backendConfig helper instead of the type switch).
func openOpenSandbox(_ context.Context, cfg *sandboxkit.Config, backendCfg any, logger *slog.Logger) (backend.Backend, error) {
	var c opensandbox.Config
	switch p := backendCfg.(type) {
	case nil:
	case *opensandbox.Config:
		if p != nil {
			c = *p
		}
	default:
		return nil, fmt.Errorf("opensandbox backend: config is %T, want *opensandbox.Config", backendCfg)
	}
	return opensandbox.New(c, opensandbox.WithLogger(logger))
}

// TestOpenSageConfigThroughTheRegistry loads an OpenSage-style config (every
// key of its [sandbox.opensandbox] table, templates) strictly through a
// registry holding the proposed factory, opens the backend and runs a
// session's worth of work, as sbx run would.
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

	reg := sandboxkit.NewRegistry()
	reg.Register(opensandbox.Name, sandboxkit.BackendFactory{
		NewConfig: func() any { return new(opensandbox.Config) },
		Open:      openOpenSandbox,
	})
	cfg, err := reg.LoadConfig(cfgFile)
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings)
	oc, ok := cfg.BackendConfig(opensandbox.Name).(*opensandbox.Config)
	require.True(t, ok)
	assert.Equal(t, srv.Domain(), oc.Domain)
	assert.True(t, oc.UseServerProxy)
	assert.Equal(t, 3600, oc.DefaultTimeoutSec)

	b, err := reg.Open(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer b.Close()
	spec, err := cfg.Spec("main")
	require.NoError(t, err)
	spec.Session = "registry-test"
	sb := create(t, b, spec)

	tools := fileops.New(sb, fileops.Options{})
	out, err := tools.WriteFile(testCtx(t), "notes/hello.txt", "hi there\n")
	require.NoError(t, err)
	assert.Equal(t, "Created file 'notes/hello.txt' (9 bytes).", out)
	res, err := tools.Execute(testCtx(t), `cat notes/hello.txt; echo "$GREETING"`, 0)
	require.NoError(t, err)
	assert.Equal(t, "hi there\nhello\nExit code: 0", res.String())

	t.Run("unknown keys are still refused", func(t *testing.T) {
		_, err := reg.ParseConfig([]byte("[sandbox]\nbackend = \"opensandbox\"\n[sandbox.opensandbox]\ndomian = \"x\"\n"), "")
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
		assert.ErrorContains(t, err, `"sandbox.opensandbox.domian"`)
	})
}
