package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// An entry's credentials reach the Spec as declared; every bad
// declaration is refused at load, naming its key and what to do.
func TestCredentialKeys(t *testing.T) {
	cfg := mustParse(t, `
[sandbox.sandboxes.main]
image = "x:1"
egress = { default = "deny", allow = ["api.openai.com:443", "*.github.com"] }
[sandbox.sandboxes.main.credentials.openai]
hosts = ["api.openai.com:443"]
header = "Authorization"
format = "Bearer {value}"
env = "OPENAI_API_KEY"
from_env = "OPENAI_API_KEY"
[sandbox.sandboxes.main.credentials.github]
hosts = ["*.github.com"]
basic_user = "x-access-token"
from_file = "secrets/gh"
`)
	spec := mustSpec(t, cfg, "main")
	require.Equal(t, []backend.Credential{
		{Name: "github", Hosts: []string{"*.github.com"}, BasicUser: "x-access-token", From: backend.CredentialSource{File: filepath.Join(cfg.Dir, "secrets/gh")}},
		{Name: "openai", Hosts: []string{"api.openai.com:443"}, Header: "Authorization", Format: "Bearer {value}", Env: "OPENAI_API_KEY",
			From: backend.CredentialSource{Env: "OPENAI_API_KEY"}},
	}, spec.Credentials)

	const policy = "egress = { default = \"deny\", allow = [\"api.test:443\"] }\n"
	for _, tc := range []struct{ table, want string }{
		{"hosts = [\"api.test:443\"]\nheader = \"X-Key\"\nfrom_env = \"K\"", "" /* fine */},
		{"hosts = [\"other.test:443\"]\nheader = \"X-Key\"\nfrom_env = \"K\"", `sandbox.sandboxes.bad.credentials.k.hosts: hosts[0] "other.test:443": the entry's egress policy does not allow it`},
		{"hosts = [\"api.test:443\"]\nheader = \"X Key\"\nfrom_env = \"K\"", `sandbox.sandboxes.bad.credentials.k: header "X Key" is not an HTTP header name`},
		{"hosts = [\"api.test:443\"]\nheader = \"X-Key\"\nquery = \"k\"\nfrom_env = \"K\"", "exactly one of header, query and basic_user"},
		{"hosts = [\"api.test:443\"]\nheader = \"X-Key\"", "give exactly one source of the value: from_env, from_file or from_command"},
		{"hosts = [\"api.test:443\"]\nheader = \"X-Key\"\nfrom_env = \"K\"\nfrom_command = \"pass k\"", "give exactly one source"},
		{"hosts = [\"10.0.0.1\"]\nheader = \"X-Key\"\nfrom_env = \"K\"", `sandbox.sandboxes.bad.credentials.k: host "10.0.0.1" is an address: credentials go to names`},
		{"hosts = [\"https://api.test\"]\nheader = \"X-Key\"\nfrom_env = \"K\"", `hosts[0] "https://api.test"`},
		{"hosts = [\"api.test:443\"]\nheader = \"X-Key\"\nenv = \"1BAD\"\nfrom_env = \"K\"", `sandbox.sandboxes.bad.credentials.k.env: "1BAD" is not a variable name`},
		{"hosts = [\"api.test:443\"]\nheader = \"X-Key\"\nform = \"x\"\nfrom_env = \"K\"", `unknown key "sandbox.sandboxes.bad.credentials.k.form"`},
	} {
		text := "[sandbox.sandboxes.bad]\nimage = \"x:1\"\n" + policy + "[sandbox.sandboxes.bad.credentials.k]\n" + tc.table + "\n"
		_, err := parse(t, text)
		if err == nil {
			_, err = mustParse(t, text).Spec("bad")
		}
		if tc.want == "" {
			require.NoError(t, err, tc.table)
			continue
		}
		require.Error(t, err, tc.table)
		require.Contains(t, err.Error(), tc.want, tc.table)
	}
	// Without an egress policy there is no enforcer to add them.
	_, err := parse(t, "[sandbox.sandboxes.bad]\nimage = \"x:1\"\n[sandbox.sandboxes.bad.credentials.k]\nhosts = [\"a.test\"]\nheader = \"X\"\nfrom_env = \"K\"\n")
	require.ErrorContains(t, err, "sandbox.sandboxes.bad.credentials.k: credentials need an egress policy")
	require.False(t, strings.Contains(err.Error(), "K="), "the error shows a value")
}

// No backend brokers credentials yet: a Spec with them is refused at
// create, naming the backend, rather than run without them.
func TestCredentialsRefusedByCapabilities(t *testing.T) {
	err := backend.Capabilities{Egress: true}.Check("lite", backend.Spec{Egress: &backend.Egress{}, Credentials: []backend.Credential{{Name: "k"}}})
	require.ErrorContains(t, err, "the lite backend cannot honour credentials")
	require.NoError(t, backend.Capabilities{Egress: true, Credentials: true}.Check("x", backend.Spec{Egress: &backend.Egress{}, Credentials: []backend.Credential{{Name: "k"}}}))
}
