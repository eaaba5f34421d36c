package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/config"
)

// sbx hands what it does not link (the k8s backend, sbx serve and sbx
// mcp) to the sbx-full next to it, which runs the whole command in its
// place: the user sees what sbx-full alone prints. Without sbx-full, sbx
// says where to get it and does nothing else; with what it links, sbx
// needs no sbx-full.
func TestHandsOverToFull(t *testing.T) {
	lean := sbxBin(t)
	full := filepath.Join(filepath.Dir(lean), FullName)
	k8sConfig := filepath.Join(t.TempDir(), "k8s.toml")
	require.NoError(t, os.WriteFile(k8sConfig, []byte("[sandbox]\nbackend = \"k8s\"\n[sandbox.k8s]\nnamespace = \"work\"\n[sandbox.sandboxes.main]\nimage = \"busybox\"\n"), 0o644))
	localConfig := filepath.Join(t.TempDir(), "local.toml")
	require.NoError(t, os.WriteFile(localConfig, []byte("[sandbox]\nbackend = \"local\"\n[sandbox.sandboxes.main]\n"), 0o644))
	home := t.TempDir()
	env := []string{"HOME=" + home, "SBX_STATE_DIR=" + t.TempDir(), "KUBECONFIG=" + filepath.Join(home, "none")}
	// run runs bin with args in a clean environment and returns its
	// stdout, stderr and exit code.
	run := func(bin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
		cmd.Dir = home
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := 0
		if err := cmd.Run(); err != nil {
			code = exitStatus(t, err)
		}
		return stdout.String(), stderr.String(), code
	}

	same := [][]string{
		{"--config", k8sConfig, "config", "check"},
		{"--config", localConfig, "--backend", "k8s", "config", "check"},
		{"--config", k8sConfig, "ls"},
		{"serve", "--help"},
		{"mcp", "--help"},
		{"--config", localConfig, "serve", "--listen", "256.0.0.1:1"},
		{"--config", localConfig, "bench", "create", "--n", "1", "--compare", "k8s"},
	}
	for _, args := range same {
		lout, lerr, lcode := run(lean, args...)
		fout, ferr, fcode := run(full, args...)
		assert.Equal(t, fout, lout, "stdout of sbx %s", strings.Join(args, " "))
		assert.Equal(t, ferr, lerr, "stderr of sbx %s", strings.Join(args, " "))
		assert.Equal(t, fcode, lcode, "exit code of sbx %s", strings.Join(args, " "))
	}
	out, _, _ := run(lean, "serve", "--help")
	assert.Contains(t, out, "Callers without the key", "serve's help is sbx-full's")
	out, errOut, code := run(lean, "--config", k8sConfig, "config", "check")
	assert.Contains(t, out+errOut, "backend k8s", "config check of a k8s config")
	assert.NotContains(t, errOut, "not linked", "handed over, not refused (exit %d)", code)

	// Alone, without sbx-full next to it or on PATH.
	alone := filepath.Join(t.TempDir(), "sbx")
	data, err := os.ReadFile(lean)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(alone, data, 0o755))
	for _, args := range [][]string{{"mcp"}, {"serve"}, {"--config", k8sConfig, "ls"}, {"--config", localConfig, "--backend", "k8s", "ls"}} {
		out, errOut, code := run(alone, args...)
		assert.Equal(t, 1, code, "sbx %s without sbx-full", strings.Join(args, " "))
		assert.Empty(t, out)
		assert.Contains(t, errOut, "sbx-full")
		assert.Contains(t, errOut, "go install github.com/sandboxkit/sandboxkit/cmd/sbx-full")
		assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line, nothing else printed: %q", errOut)
	}
	out, errOut, code = run(alone, "--config", localConfig, "ls")
	assert.Equal(t, 0, code, "sbx ls on local needs no sbx-full: %s", errOut)
	assert.Contains(t, out, "ID")

	// A copy of sbx installed as sbx-full does not loop.
	dir := t.TempDir()
	for _, name := range []string{"sbx", FullName} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o755))
	}
	_, errOut, code = run(filepath.Join(dir, "sbx"), "serve")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "started as sbx-full")
}

// sbx-full drops the hand-over mark (the commands it runs must not inherit
// it); a build that hands over keeps it (its loop guard).
func TestHandOverMark(t *testing.T) {
	t.Setenv(envHandedOver, "1")
	keepHandOverMark(Features{Elsewhere: func(*config.Registry) {}})
	assert.Equal(t, "1", os.Getenv(envHandedOver), "sbx keeps the mark")
	keepHandOverMark(testFeatures)
	_, set := os.LookupEnv(envHandedOver)
	assert.False(t, set, "sbx-full drops the mark")
}
