package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit"
	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/server"
)

// TestAPIKeyWhitespace: a key with whitespace around it (a newline from a
// key file) is used trimmed, with a warning naming where it came from; one
// no caller could send is refused, naming where it came from.
func TestAPIKeyWhitespace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandbox.toml")
	for _, c := range []struct {
		env, file string
		wantKey   string
		wantWarn  string // in the one warning ("" for none)
		wantErr   string
	}{
		{env: "k", wantKey: "k"},
		{env: "k\n", wantKey: "k", wantWarn: "$SBX_API_KEY has whitespace around it"},
		{env: " k \t", wantKey: "k", wantWarn: "using it trimmed"},
		{file: "k\r\n", wantKey: "k", wantWarn: "[sandbox.serve] api_key in " + path},
		{env: "k", file: " other", wantKey: "k"}, // $SBX_API_KEY wins
		{env: " \n", wantErr: "$SBX_API_KEY is only whitespace"},
		{file: "  ", wantErr: "[sandbox.serve] api_key in " + path + " is only whitespace"},
		{env: "a\x01b", wantErr: "$SBX_API_KEY contains control characters"},
		{env: "a\nb", wantErr: "contains control characters"},
		{env: "a b", wantKey: "a b"},
	} {
		t.Setenv(server.EnvAPIKey, c.env)
		toml := "[sandbox]\nbackend = \"local\"\n"
		if c.file != "" {
			toml += "[sandbox.serve]\napi_key = " + tomlQuote(c.file) + "\n"
		}
		require.NoError(t, os.WriteFile(path, []byte(toml), 0o644))
		cfg, err := sandboxkit.LoadConfig(path)
		require.NoError(t, err)
		opts, warnings, err := server.ConfigOptions(cfg)
		name := tomlQuote(c.env) + "/" + tomlQuote(c.file)
		if c.wantErr != "" {
			require.ErrorIs(t, err, backend.ErrInvalidConfig, name)
			assert.ErrorContains(t, err, c.wantErr, name)
			continue
		}
		require.NoError(t, err, name)
		assert.Equal(t, c.wantKey, opts.APIKey, name)
		if c.wantWarn == "" {
			assert.Empty(t, warnings, name)
		} else if assert.Len(t, warnings, 1, name) {
			assert.Contains(t, warnings[0], c.wantWarn, name)
		}
	}

	b := localBackend(t)
	for _, key := range []string{" k", "k\n", "a\x01b"} {
		_, err := server.New(server.Options{Backend: b, Spec: mainSpec, APIKey: key})
		assert.ErrorIs(t, err, backend.ErrInvalidConfig, "%q", key)
		assert.ErrorContains(t, err, "Options.APIKey", "%q", key)
	}
}

func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString(`\` + string(r))
		case r < 0x20:
			b.WriteString(`\u00` + string("0123456789abcdef"[r>>4]) + string("0123456789abcdef"[r&15]))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
