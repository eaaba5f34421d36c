package backendkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/egress"
	"github.com/sandboxkit/sandboxkit/internal/egressctl"
)

// Each source gives its value, trimmed; a failing source is an error that
// names the credential and never holds a value.
func TestCredentialValue(t *testing.T) {
	t.Setenv("SBX_TEST_CRED_VALUE", "from-env\n")
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-file \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for src, want := range map[string]backend.CredentialSource{
		"from-env":  {Env: "SBX_TEST_CRED_VALUE"},
		"from-file": {File: file},
		"from-cmd":  {Command: []string{"sh", "-c", "echo from-cmd"}},
	} {
		got, err := CredentialValue(t.Context(), backend.Credential{Name: "k", From: want})
		if err != nil || got != src {
			t.Errorf("%+v: %q, %v; want %q", want, got, err, src)
		}
	}
	for _, c := range []struct {
		src  backend.CredentialSource
		want string
	}{
		{backend.CredentialSource{Env: "SBX_TEST_CRED_UNSET"}, "credential k: $SBX_TEST_CRED_UNSET is not set"},
		{backend.CredentialSource{File: file + ".missing"}, "credential k: reading from_file"},
		{backend.CredentialSource{Command: []string{"sh", "-c", "echo leaked-output; exit 3"}}, "credential k: from_command: it exited with 3"},
		{backend.CredentialSource{Command: []string{"true"}}, "credential k: its source gave an empty value"},
		{backend.CredentialSource{}, "credential k has no source"},
	} {
		_, err := CredentialValue(t.Context(), backend.Credential{Name: "k", From: c.src})
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "leaked-output") {
			t.Errorf("%+v: %v, want %q (and no output)", c.src, err, c.want)
		}
	}
}

// InstallCA adds the CA to the image's trust store and writes the bundle;
// a CA it replaces (a fork's parent's, in the files copied from it) is
// taken out of the trust store first.
func TestInstallCAReplaces(t *testing.T) {
	root := t.TempDir()
	store := filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")
	require.NoError(t, os.MkdirAll(filepath.Dir(store), 0o755))
	require.NoError(t, os.WriteFile(store, []byte("SYSTEM ROOTS\n"), 0o644))
	const parent, fork = "-----BEGIN CERTIFICATE-----\nPARENT\n-----END CERTIFICATE-----\n", "-----BEGIN CERTIFICATE-----\nFORK\n-----END CERTIFICATE-----\n"
	require.NoError(t, InstallCA(root, parent))
	got, err := os.ReadFile(store)
	require.NoError(t, err)
	require.Equal(t, "SYSTEM ROOTS\n\n"+parent, string(got))

	require.NoError(t, InstallCA(root, fork, parent))
	for _, p := range []string{store, filepath.Join(root, SandboxCABundle), filepath.Join(root, SandboxCAFile)} {
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NotContains(t, string(got), "PARENT", p)
		require.Contains(t, string(got), "FORK", p)
	}
	got, _ = os.ReadFile(store)
	require.Equal(t, "SYSTEM ROOTS\n\n"+fork, string(got))
}

// A fork's credentials: the parent's values under a CA and placeholders of
// the fork's own.
func TestForkCredentials(t *testing.T) {
	t.Setenv("SBX_TEST_FORK_CRED", "fork-value")
	parent, err := PrepareCredentials(t.Context(), "parent", []backend.Credential{{Name: "api", Hosts: []string{"api.test"}, Header: "X-Key", Env: "API_KEY",
		From: backend.CredentialSource{Env: "SBX_TEST_FORK_CRED"}}})
	require.NoError(t, err)
	br, parentCA, phs, err := ForkCredentials("fork", parent.EnforcerFile)
	require.NoError(t, err)
	require.Equal(t, parent.CAPEM, parentCA)
	require.NotEqual(t, parent.CAPEM, br.CAPEM)
	newPH, ok := phs[parent.Env["API_KEY"]]
	require.True(t, ok, "no placeholder for the parent's %q", parent.Env["API_KEY"])
	require.NotEqual(t, parent.Env["API_KEY"], newPH)
	var file egressctl.Credentials
	require.NoError(t, json.Unmarshal(br.EnforcerFile, &file))
	require.Equal(t, "fork-value", file.Credentials[0].Value)
	require.Equal(t, newPH, file.Credentials[0].Placeholder)
	require.Equal(t, br.CAPEM, file.CACert)
	_, err = egress.LoadCA([]byte(file.CACert), []byte(file.CAKey))
	require.NoError(t, err, "the fork's key is not its certificate's")
	_, _, _, err = ForkCredentials("fork", []byte("not json"))
	require.Error(t, err)
}
