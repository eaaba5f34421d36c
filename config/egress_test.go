package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestEgressKeys(t *testing.T) {
	cfg := mustParse(t, `
[sandbox.sandboxes.main]
image = "x:1"
egress = { default = "deny", allow = ["pypi.org:443", "*.pythonhosted.org", "10.0.0.0/8:53"], deny = ["evil.pypi.org"] }
[sandbox.sandboxes.open]
image = "x:1"
[sandbox.sandboxes.open.egress]
default = "allow"
deny = ["169.254.0.0/16"]
[sandbox.sandboxes.plain]
image = "x:1"
`)
	require.Equal(t, &backend.Egress{Default: "deny", Allow: []string{"pypi.org:443", "*.pythonhosted.org", "10.0.0.0/8:53"}, Deny: []string{"evil.pypi.org"}},
		mustSpec(t, cfg, "main").Egress)
	require.Equal(t, &backend.Egress{Default: "allow", Deny: []string{"169.254.0.0/16"}}, mustSpec(t, cfg, "open").Egress)
	require.Nil(t, mustSpec(t, cfg, "plain").Egress)

	for _, tc := range []struct{ entry, want string }{
		{`egress = { default = "maybe" }`, `sandbox.sandboxes.bad.egress: egress default "maybe"`},
		{`egress = { allow = ["https://pypi.org"] }`, `allow[0] "https://pypi.org"`},
		{`egress = { deny = ["ok.test", "a.*.test"] }`, `deny[1] "a.*.test"`},
		{`egress = { allow = ["x.test:0"] }`, `"x.test:0"`},
		{`egress = { allow = ["10.0.0.0/33"] }`, `"10.0.0.0/33"`},
		{"network = \"host\"\negress = {}", `network = "host" and an egress policy exclude each other`},
		{`egress = { alow = [] }`, `unknown key "sandbox.sandboxes.bad.egress.alow"`},
	} {
		_, err := parse(t, "[sandbox.sandboxes.bad]\nimage = \"x:1\"\n"+tc.entry+"\n")
		if err == nil {
			cfg := mustParse(t, "[sandbox.sandboxes.bad]\nimage = \"x:1\"\n"+tc.entry+"\n")
			_, err = cfg.Spec("bad")
		}
		require.Error(t, err, tc.entry)
		require.Contains(t, err.Error(), tc.want, tc.entry)
	}
}
