package sandboxkit

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDefaultRegistryOpensLocal(t *testing.T) {
	// The catalog lists every backend the module holds.
	assert.Equal(t, backendDirs(t), Names())
	dir := t.TempDir()
	cfg, err := ParseConfig([]byte("[sandbox]\nbackend = \"local\"\n[sandbox.local]\nstate_dir = \"state\"\n"), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)
	b, err := Open(context.Background(), cfg, nil)
	require.NoError(t, err)
	defer b.Close()
	assert.Equal(t, "local", b.Name())
	assert.DirExists(t, filepath.Join(dir, "state"), "state_dir resolves against the config file's folder")
}
