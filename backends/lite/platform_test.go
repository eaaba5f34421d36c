package lite

import (
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// platform picks the variant of a registry pull; local image files are
// what they are, so a platform there is refused by name.
func TestPullPlatform(t *testing.T) {
	p, err := pullPlatform("")
	require.NoError(t, err)
	assert.Equal(t, "linux/"+runtime.GOARCH, p.String())
	p, err = pullPlatform("linux/arm64/v8")
	require.NoError(t, err)
	assert.Equal(t, "arm64", p.Architecture)
	assert.Equal(t, "v8", p.Variant)
	_, err = pullPlatform("arm64")
	assert.ErrorIs(t, err, backend.ErrInvalidConfig)

	s := &imageStore{}
	for _, ref := range []string{"dir:/srv/rootfs", "docker-archive:/x.tar", "oci:/layout", "/abs/rootfs"} {
		_, err := s.resolve(t.Context(), ref, "linux/arm64")
		require.ErrorIs(t, err, errors.ErrUnsupported, ref)
		assert.ErrorContains(t, err, `platform "linux/arm64": the lite backend selects a platform only when pulling from a registry`)
	}
}

func TestEntrySpec(t *testing.T) {
	var s backend.Spec
	require.NoError(t, EntrySpec(map[string]any{"cpu_max": "25000", "memory_max": int64(1 << 30), "pids_max": "64", "fs_backend": "overlayfs"}, &s))
	assert.Equal(t, backend.Resources{CPUs: 0.25, MemoryBytes: 1 << 30, PidsLimit: 64}, s.Resources)

	s = backend.Spec{Resources: backend.Resources{MemoryBytes: 1 << 30}}
	require.NoError(t, EntrySpec(map[string]any{"memory_max": "1G"}, &s), "the same limit as mem_limit")
	err := EntrySpec(map[string]any{"memory_max": "2G"}, &s)
	assert.EqualError(t, err, "memory_max gives 2147483648, but the entry's mem_limit gives 1073741824 (set one of them)")
	assert.EqualError(t, EntrySpec(map[string]any{"fs_backend": "btrfs"}, &backend.Spec{}),
		`fs_backend: "btrfs" is not supported by the lite backend, which has only "overlayfs" (remove the key or set it to "overlayfs")`)
	assert.ErrorContains(t, EntrySpec(map[string]any{"cpu_max": "1 100000"}, &backend.Spec{}), "want 0.01 to 1024")
}
