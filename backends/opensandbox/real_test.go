package opensandbox_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/fileops/fileopstest"
)

// Environment of TestRealDeployment.
const (
	envRealDomain = "SBX_TEST_OPENSANDBOX_DOMAIN"  // host:port of a lifecycle server
	envRealAPIKey = "SBX_TEST_OPENSANDBOX_API_KEY" // its API key ("" for none)
	envRealImage  = "SBX_TEST_OPENSANDBOX_IMAGE"   // default ubuntu:24.04 (needs bash, coreutils)
	envRealProxy  = "SBX_TEST_OPENSANDBOX_PROXY"   // "1": reach execd through the server proxy
	envRealProto  = "SBX_TEST_OPENSANDBOX_PROTOCOL"
	envRealEgress = "SBX_TEST_OPENSANDBOX_EGRESS" // "1": the deployment runs egress sidecars
	envRealVault  = "SBX_TEST_OPENSANDBOX_VAULT"  // "1": its sidecars have the credential vault
)

// TestRealDeployment runs the backend suite and the fileops table against a
// real OpenSandbox deployment named by SBX_TEST_OPENSANDBOX_DOMAIN (and
// SBX_TEST_OPENSANDBOX_API_KEY). It makes and removes real sandboxes.
func TestRealDeployment(t *testing.T) {
	domain := os.Getenv(envRealDomain)
	if domain == "" {
		t.Skipf("set %s (and %s) to run the suites against a real OpenSandbox deployment; %s, %s=1 and %s are optional",
			envRealDomain, envRealAPIKey, envRealImage, envRealProxy, envRealProto)
	}
	image := os.Getenv(envRealImage)
	if image == "" {
		image = "ubuntu:24.04"
	}
	cfg := opensandbox.Config{
		Domain: domain, APIKey: os.Getenv(envRealAPIKey), Protocol: os.Getenv(envRealProto),
		UseServerProxy: os.Getenv(envRealProxy) == "1",
	}
	t.Run("conformance", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t, cfg) }, backendtest.WithImage(image))
	})
	t.Run("fileops", func(t *testing.T) {
		b := newBackend(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		sb, err := b.Create(ctx, backend.Spec{Name: "fileops", Image: image, TTL: 30 * time.Minute, Session: "sbx-fileopstest"})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
		fileopstest.Run(t, func(t *testing.T) backend.Sandbox { return sb })
	})
	t.Run("egress", func(t *testing.T) {
		if os.Getenv(envRealEgress) != "1" {
			t.Skipf("set %s=1 when the deployment starts egress sidecars (its egress image configured)", envRealEgress)
		}
		b := newBackend(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		policy := backend.Egress{Default: "deny", Allow: []string{"pypi.org"}, Deny: []string{"evil.pypi.org"}}
		sb, err := b.Create(ctx, backend.Spec{Name: "egress", Image: image, TTL: 30 * time.Minute, Egress: &policy})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
		st, err := b.EgressStatus(ctx, sb.ID())
		require.NoError(t, err)
		assert.Equal(t, policy, st.Policy)
		require.NoError(t, b.SetEgress(ctx, sb.ID(), backend.Egress{Default: "deny", Allow: []string{"files.pythonhosted.org"}}))
		st, err = b.EgressStatus(ctx, sb.ID())
		require.NoError(t, err)
		assert.Equal(t, []string{"files.pythonhosted.org"}, st.Policy.Allow)
		// A denied name does not resolve inside.
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: "getent hosts evil.pypi.org"})
		require.NoError(t, err)
		assert.NotZero(t, res.ExitCode, "a denied name resolved: %s", res.Stdout)
	})
	t.Run("credentials", func(t *testing.T) {
		if os.Getenv(envRealVault) != "1" {
			t.Skipf("set %s=1 when the deployment's egress sidecars have the credential vault (its credential proxy set up)", envRealVault)
		}
		// The value goes to the vault; the sandbox sees the placeholder, and
		// a request to the declared host leaves with the value (httpbin
		// echoes what it got: the deployment's proxy may or may not mask
		// it, so only the placeholder's absence there is checked).
		t.Setenv("SBX_TEST_REAL_CREDENTIAL", "sbx-real-deployment-value")
		b := newBackend(t, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		creds := []backend.Credential{{Name: "api", Hosts: []string{"httpbin.org"}, Header: "Authorization", Format: "Bearer {value}", Env: "API_TOKEN",
			From: backend.CredentialSource{Env: "SBX_TEST_REAL_CREDENTIAL"}}}
		sb, err := b.Create(ctx, backend.Spec{Name: "credentials", Image: image, TTL: 30 * time.Minute,
			Egress: &backend.Egress{Default: "deny", Allow: []string{"httpbin.org"}}, Credentials: creds})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
		res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `echo "$API_TOKEN"; curl -sS https://httpbin.org/headers -H "Authorization: Bearer $API_TOKEN"`})
		require.NoError(t, err)
		out := string(res.Stdout)
		require.True(t, strings.HasPrefix(out, "sbx-placeholder-api-"), "API_TOKEN: %.60q", out)
		ph, echo, _ := strings.Cut(out, "\n")
		assert.NotContains(t, echo, ph, "the request left with the placeholder: the vault did not apply the value")
		require.NoError(t, b.RotateCredentials(ctx, sb.ID(), creds))
	})
}
