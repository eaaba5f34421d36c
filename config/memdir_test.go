package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// host_shared_mem_dir is mounted read-write at /mem/shared in every
// sandbox where the backend can mount host folders, made (0755) on this
// machine when missing (not by CheckSpec), taken as the remote host's on
// remotedocker, and refused by name on local and opensandbox.
func TestHostSharedMemDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	tests := []struct {
		backend, dir string
		source       string // want: the mount's source; "" with wantErr
		made         bool   // the folder is made on this machine
		wantErr      string
	}{
		{backend: "native", dir: "NEW/mem", source: "NEW/mem", made: true},
		{backend: "lite", dir: "NEW/mem", source: "NEW/mem", made: true},
		{backend: "k8s", dir: "NEW/mem", source: "NEW/mem", made: true},
		{backend: "native", dir: "~/agent-mem", source: filepath.Join(home, "agent-mem"), made: true},
		{backend: "remotedocker", dir: "/srv/agent-mem", source: "/srv/agent-mem"},
		{backend: "local", dir: "NEW/mem", wantErr: "sandbox.host_shared_mem_dir: the local backend cannot mount a host folder into its sandboxes"},
		{backend: "opensandbox", dir: "NEW/mem", wantErr: "sandbox.host_shared_mem_dir: the opensandbox backend cannot mount a host folder into its sandboxes"},
	}
	for _, tt := range tests {
		t.Run(tt.backend+" "+tt.dir, func(t *testing.T) {
			tmp := t.TempDir()
			dir, source := tt.dir, tt.source
			if rest, ok := cutNew(dir); ok {
				dir, source = filepath.Join(tmp, rest), filepath.Join(tmp, rest)
			}
			cfg := mustParseBuiltinIn(t, tmp, `[sandbox]
backend = "`+tt.backend+`"
host_shared_mem_dir = "`+dir+`"
[sandbox.sandboxes.main]
[sandbox.sandboxes.attached]
container_id = "running-one"
`)
			_, err := cfg.CheckSpec("main")
			if tt.wantErr != "" {
				require.ErrorIs(t, err, errors.ErrUnsupported)
				assert.ErrorContains(t, err, tt.wantErr)
				_, err = cfg.Spec("main")
				require.ErrorIs(t, err, errors.ErrUnsupported)
				assert.NoDirExists(t, source, "nothing is made for a backend that refuses the key")
				return
			}
			require.NoError(t, err)
			if tt.made {
				assert.NoDirExists(t, source, "CheckSpec makes nothing")
			}
			spec, err := cfg.Spec("main")
			require.NoError(t, err)
			assert.Contains(t, spec.Volumes, backend.Volume{Type: backend.VolumeBind, Source: source, Target: "/mem/shared"})
			if tt.made {
				fi, err := os.Stat(source)
				require.NoError(t, err)
				assert.True(t, fi.IsDir())
				assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
			} else {
				assert.NoDirExists(t, source, "a remote host's folder is not made here")
			}
			if tt.backend != "k8s" && tt.backend != "lite" {
				attached, err := cfg.Spec("attached")
				require.NoError(t, err)
				assert.Empty(t, attached.Volumes, "an existing container gets no mount")
			}
		})
	}
}

// cutNew strips the "NEW/" prefix the table uses for a folder under the
// test's temporary folder.
func cutNew(p string) (string, bool) {
	if len(p) > 4 && p[:4] == "NEW/" {
		return p[4:], true
	}
	return "", false
}

func mustParseBuiltinIn(t *testing.T, dir, text string) *Config {
	t.Helper()
	cfg, err := builtinRegistry().ParseConfig([]byte(text), filepath.Join(dir, "sandbox.toml"))
	require.NoError(t, err)
	return cfg
}

// Malformed values are load errors naming the key; the mount target follows
// [sandbox.paths] mem_root; an entry mounting the same target is an error
// naming both.
func TestHostSharedMemDirErrors(t *testing.T) {
	_, err := parseBuiltin(t, "[sandbox]\nbackend = \"remotedocker\"\nhost_shared_mem_dir = \"~/mem\"\n")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `sandbox.host_shared_mem_dir: "~/mem" is not an absolute path: the remotedocker backend mounts folders of its remote host`)

	dir := t.TempDir()
	cfg := mustParseBuiltin(t, "[sandbox]\nbackend = \"native\"\nhost_shared_mem_dir = \""+dir+"\"\n[sandbox.paths]\nmem_root = \"/memory\"\n[sandbox.sandboxes.main]\n")
	spec := mustSpec(t, cfg, "main")
	assert.Contains(t, spec.Volumes, backend.Volume{Type: backend.VolumeBind, Source: dir, Target: "/memory/shared"})

	_, err = parseBuiltin(t, "[sandbox]\nbackend = \"native\"\nhost_shared_mem_dir = \""+dir+"\"\n[sandbox.sandboxes.main]\nvolumes = [\""+dir+":/mem/shared\"]\n")
	require.ErrorIs(t, err, backend.ErrInvalidConfig)
	assert.ErrorContains(t, err, `sandbox.host_shared_mem_dir: volume "`+dir+`:/mem/shared:rw": /mem/shared is already mounted by "`+dir+`:/mem/shared"`)
}
