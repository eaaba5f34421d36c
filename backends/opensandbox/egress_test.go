package opensandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox"
	"github.com/sandboxkit/sandboxkit/backends/opensandbox/opensandboxtest"
)

// An entry's policy reaches OpenSandbox as the create request's
// networkPolicy, and SetEgress and EgressStatus speak the egress sidecar's
// policy API through its endpoint. Against the in-process server, whose
// sidecar speaks the API but enforces nothing: enforcement is the
// deployment's (TestRealDeployment's egress case, with
// SBX_TEST_OPENSANDBOX_EGRESS=1, checks a real one).
func TestEgressAPIInProcessServer(t *testing.T) {
	t.Parallel()
	for _, proxied := range []bool{false, true} {
		srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
		b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey, UseServerProxy: proxied})
		require.True(t, b.Capabilities().Egress)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		spec := backend.Spec{Name: "egress", Image: testImage, TTL: 10 * time.Minute,
			Egress: &backend.Egress{Default: "deny", Allow: []string{"pypi.org", "*.pythonhosted.org"}, Deny: []string{"evil.pythonhosted.org"}}}
		sb, err := b.Create(ctx, spec)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })

		// Deny rules first: OpenSandbox evaluates rules in order.
		creates := srv.CreateRequests()
		var req struct {
			NetworkPolicy opensandboxtest.NetworkPolicy `json:"networkPolicy"`
		}
		require.NoError(t, json.Unmarshal(creates[len(creates)-1], &req))
		want := opensandboxtest.NetworkPolicy{DefaultAction: "deny", Egress: []opensandboxtest.NetworkRule{
			{Action: "deny", Target: "evil.pythonhosted.org"}, {Action: "allow", Target: "pypi.org"}, {Action: "allow", Target: "*.pythonhosted.org"}}}
		require.Equal(t, want, req.NetworkPolicy)

		st, err := b.EgressStatus(ctx, sb.ID())
		require.NoError(t, err)
		require.Equal(t, backend.Egress{Default: "deny", Allow: []string{"pypi.org", "*.pythonhosted.org"}, Deny: []string{"evil.pythonhosted.org"}}, st.Policy)
		require.Empty(t, st.Denials, "the sidecar records no denials")

		// A change replaces the rules: what the new policy lacks is gone.
		require.NoError(t, b.SetEgress(ctx, sb.ID(), backend.Egress{Default: "deny", Allow: []string{"files.pythonhosted.org", "pypi.org"}}))
		got, ok := srv.EgressPolicy(sb.ID())
		require.True(t, ok)
		require.ElementsMatch(t, []opensandboxtest.NetworkRule{{Action: "allow", Target: "files.pythonhosted.org"}, {Action: "allow", Target: "pypi.org"}}, got.Egress)
		st, err = b.EgressStatus(ctx, sb.ID())
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"files.pythonhosted.org", "pypi.org"}, st.Policy.Allow)
		require.Empty(t, st.Policy.Deny)

		// What the sidecar cannot do is refused and changes nothing.
		for _, bad := range []backend.Egress{
			{Default: "allow"},
			{Default: "deny", Allow: []string{"pypi.org:443"}},
			{Default: "deny", Allow: []string{"10.0.0.0/8"}},
		} {
			err := b.SetEgress(ctx, sb.ID(), bad)
			require.ErrorIs(t, err, errors.ErrUnsupported, "%+v", bad)
		}
		again, _ := srv.EgressPolicy(sb.ID())
		require.Equal(t, got, again)
	}
}

// Policies OpenSandbox cannot express are refused before anything is made,
// and a sandbox made without one has no sidecar to change.
func TestEgressRefusedInProcessServer(t *testing.T) {
	t.Parallel()
	srv := newServer(t, opensandboxtest.Options{APIKey: testAPIKey})
	b := newBackend(t, opensandbox.Config{Domain: srv.Domain(), APIKey: testAPIKey})
	ctx := t.Context()
	for _, e := range []backend.Egress{
		{Allow: []string{"pypi.org:443"}},
		{Allow: []string{"10.1.2.3"}},
		{Deny: []string{"[2001:db8::1]"}},
	} {
		_, err := b.Create(ctx, backend.Spec{Name: "refused", Image: testImage, Egress: &e})
		require.ErrorIs(t, err, errors.ErrUnsupported, "%+v", e)
		require.Contains(t, err.Error(), "egress")
	}
	_, err := b.Create(ctx, backend.Spec{Name: "refused", Image: testImage, Egress: &backend.Egress{Allow: []string{"a.*.test"}}})
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	require.Empty(t, srv.SandboxIDs(), "a refused create made a sandbox")

	sb, err := b.Create(ctx, backend.Spec{Name: "plain", Image: testImage, TTL: 10 * time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, sb.Destroy(context.Background())) })
	require.ErrorIs(t, b.SetEgress(ctx, sb.ID(), backend.Egress{}), errors.ErrUnsupported)
	_, err = b.EgressStatus(ctx, sb.ID())
	require.ErrorIs(t, err, errors.ErrUnsupported)
}
