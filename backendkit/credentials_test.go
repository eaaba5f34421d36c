package backendkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
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
