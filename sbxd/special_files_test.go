package sbxd_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The agent refuses to read or edit a named pipe at once (it blocked in
// openat until the sandbox was destroyed), names a symlink loop with
// ELOOP, and writes through a dangling symlink.
func TestSpecialFilesLocal(t *testing.T) {
	c, _ := createLocal(t)
	ctx := t.Context()
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	require.NoError(t, os.Symlink("made.txt", filepath.Join(dir, "dangling")))

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := c.ReadFile(ctx, filepath.Join(dir, "fifo"))
		assert.ErrorIs(t, err, backend.ErrNotRegular, "read")
		_, err = c.ReadLines(ctx, filepath.Join(dir, "fifo"), 1, 1)
		assert.ErrorIs(t, err, backend.ErrNotRegular, "read lines")
		_, err = c.Edit(ctx, filepath.Join(dir, "fifo"), "a", "b", false)
		assert.ErrorIs(t, err, backend.ErrNotRegular, "edit")
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		// Let the agent go before failing.
		if f, err := os.OpenFile(filepath.Join(dir, "fifo"), os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		t.Fatal("a read of a named pipe blocked")
	}

	_, err := c.ReadFile(ctx, filepath.Join(dir, "loop"))
	assert.ErrorIs(t, err, syscall.ELOOP, "read")
	_, err = c.Stat(ctx, filepath.Join(dir, "loop"))
	assert.ErrorIs(t, err, syscall.ELOOP, "stat")
	err = c.WriteFile(ctx, filepath.Join(dir, "loop"), strings.NewReader("x"), 0o644)
	assert.ErrorIs(t, err, syscall.ELOOP, "write")

	require.NoError(t, c.WriteFile(ctx, filepath.Join(dir, "dangling"), strings.NewReader("through"), 0o644))
	data, err := os.ReadFile(filepath.Join(dir, "made.txt"))
	require.NoError(t, err)
	assert.Equal(t, "through", string(data))
	target, err := os.Readlink(filepath.Join(dir, "dangling"))
	require.NoError(t, err)
	assert.Equal(t, "made.txt", target, "the link stays a link")
}
