package opensandbox_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// An entry's credentials pass through to the deployment's credential
// vault (its egress sidecar's /credential-vault), against the in-process
// server's stand-in sidecar, which keeps what it is given and enforces
// nothing (OpenSandbox's own proxy cannot run here): the values reach the
// vault and nothing else (not the create request, not the sandbox's
// environment, which holds a placeholder), the bindings say where each
// goes, rotation replaces the values, a failing source changes nothing,
// what the vault cannot express is refused before anything is made, and a
// deployment without a vault is refused and its sandbox removed.
func TestCredentialVaultInProcessServer(t *testing.T) {
	// Not parallel: it sets the process's environment (a source).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Setenv("SBX_TEST_OSB_CREDENTIAL", "osb-bearer-value-1")
	file := filepath.Join(t.TempDir(), "gh-token")
	require.NoError(t, os.WriteFile(file, []byte("gh-file-value\n"), 0o600))
	creds := []backend.Credential{
		{Name: "api", Hosts: []string{"api.example.test"}, Header: "Authorization", Format: "Bearer {value}", Env: "API_TOKEN",
			From: backend.CredentialSource{Env: "SBX_TEST_OSB_CREDENTIAL"}},
		{Name: "gh", Hosts: []string{"*.github.test:443"}, Header: "X-Token", Format: "token {value}", From: backend.CredentialSource{File: file}},
		{Name: "reg", Hosts: []string{"registry.test"}, BasicUser: "ci", From: backend.CredentialSource{Command: []string{"echo", "reg-value"}}},
	}
	spec := backend.Spec{Name: "vault", Image: testImage, TTL: 10 * time.Minute,
		Egress:      &backend.Egress{Default: "deny", Allow: []string{"api.example.test", "*.github.test", "registry.test"}},
		Credentials: creds}

	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey, CredentialVault: true})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	require.True(t, b.Capabilities().Credentials)
	sb, err := b.Create(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })

	v, ok := srv.Vault(sb.ID())
	require.True(t, ok, "the sandbox's sidecar got no vault")
	require.Equal(t, map[string]string{"api": "osb-bearer-value-1", "gh": "token gh-file-value",
		"reg": base64.StdEncoding.EncodeToString([]byte("ci:reg-value"))}, v.Values)
	var binds []map[string]any
	for _, raw := range v.Bindings {
		var m map[string]any
		require.NoError(t, json.Unmarshal(raw, &m))
		binds = append(binds, m)
	}
	require.Len(t, binds, 3)
	assert.Equal(t, map[string]any{"name": "api", "match": map[string]any{"hosts": []any{"api.example.test"}}, "auth": map[string]any{"type": "bearer", "credential": "api"}}, binds[0])
	assert.Equal(t, map[string]any{"name": "gh", "match": map[string]any{"hosts": []any{"*.github.test"}, "ports": []any{443.0}},
		"auth": map[string]any{"type": "customHeaders", "headers": []any{map[string]any{"name": "X-Token", "credential": "gh"}}}}, binds[1])
	assert.Equal(t, map[string]any{"type": "basic", "credential": "reg"}, binds[2]["auth"])

	creates := srv.CreateRequests()
	last := string(creates[len(creates)-1])
	for _, value := range []string{"osb-bearer-value-1", "gh-file-value", "reg-value"} {
		assert.NotContains(t, last, value, "a value is in the create request")
	}
	// (The stand-in's sandboxes are host processes, which inherit this
	// test's environment: what the sandbox is given is the create
	// request's env, checked above, and its API_TOKEN.)
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `echo "$API_TOKEN"`})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(res.Stdout), "sbx-placeholder-api-"), "API_TOKEN: %.60q", res.Stdout)
	assert.Contains(t, last, strings.TrimSpace(string(res.Stdout)), "the placeholder is not the create request's")

	// Rotation replaces the values; a failing source changes nothing and
	// names the credential, not a value.
	t.Setenv("SBX_TEST_OSB_CREDENTIAL", "osb-bearer-value-2")
	require.NoError(t, b.RotateCredentials(ctx, sb.ID(), creds))
	v, _ = srv.Vault(sb.ID())
	require.Equal(t, "osb-bearer-value-2", v.Values["api"])
	require.Equal(t, 2, v.Revision)
	os.Unsetenv("SBX_TEST_OSB_CREDENTIAL")
	err = b.RotateCredentials(ctx, sb.ID(), creds)
	require.ErrorContains(t, err, "credential api: $SBX_TEST_OSB_CREDENTIAL is not set")
	v, _ = srv.Vault(sb.ID())
	require.Equal(t, "osb-bearer-value-2", v.Values["api"])
	t.Setenv("SBX_TEST_OSB_CREDENTIAL", "osb-bearer-value-2")

	// What the vault cannot say is refused before anything is made.
	before := len(srv.SandboxIDs())
	for _, c := range []struct {
		cred backend.Credential
		want string
	}{
		{backend.Credential{Name: "q", Hosts: []string{"api.example.test"}, Query: "key", From: backend.CredentialSource{Env: "SBX_TEST_OSB_CREDENTIAL"}}, `query = "key"`},
		{backend.Credential{Name: "p", Hosts: []string{"api.example.test:1-65535"}, Header: "X-Key", From: backend.CredentialSource{Env: "SBX_TEST_OSB_CREDENTIAL"}}, "not a range this wide"},
	} {
		bad := spec
		bad.Credentials = []backend.Credential{c.cred}
		_, err := b.Create(ctx, bad)
		require.ErrorIs(t, err, errors.ErrUnsupported, c.want)
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, "credential "+c.cred.Name)
	}
	require.Len(t, srv.SandboxIDs(), before, "a refused create made a sandbox")

	// A deployment without a vault: refused, naming it; nothing is left.
	plain := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	pb := newBackend(t, opensandbox.Config{Domain: plain.Domain(), APIKey: testAPIKey})
	_, err = pb.Create(ctx, spec)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorContains(t, err, "has no credential vault")
	require.NotContains(t, err.Error(), "osb-bearer-value")
	require.Empty(t, plain.SandboxIDs(), "the refused sandbox was left")
}
