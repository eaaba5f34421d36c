package server_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backends/local"
	"github.com/sandboxkit/sandboxkit/server"
	"github.com/sandboxkit/sandboxkit/server/servertest"
)

// localDir is a local sandbox's folder on the host.
func localDir(t *testing.T, b *local.Backend, id string) string {
	t.Helper()
	sb, err := b.Get(context.Background(), id)
	require.NoError(t, err)
	return sb.(*local.Sandbox).Dir()
}

// TestLocalFileToolsConfined: on the local backend the file tools reach only
// the sandbox's work folder, through whatever path or symlink; commands are
// not confined.
func TestLocalFileToolsConfined(t *testing.T) {
	for _, noAgent := range []bool{false, true} {
		t.Run(map[bool]string{false: "sbxd", true: "no-agent"}[noAgent], func(t *testing.T) {
			b := localBackend(t)
			s := newServer(t, b, func(o *server.Options) { o.NoAgent = noAgent })
			url := serveHTTP(t, s)
			alice, bob := servertest.HTTP(url, "", "alice"), servertest.HTTP(url, "", "bob")
			id := servertest.Create(t, alice, nil)
			other := servertest.Create(t, bob, nil)
			dir, otherDir := localDir(t, b, id), localDir(t, b, other)
			work := filepath.Join(dir, "work")
			require.NoError(t, os.WriteFile(filepath.Join(otherDir, "work", "secret.txt"), []byte("bob's secret\n"), 0o644))
			outside := filepath.Join(t.TempDir(), "host.txt")
			require.NoError(t, os.WriteFile(outside, []byte("host file\n"), 0o644))

			sb := func(args map[string]any) map[string]any {
				args["sandbox_id"] = id
				return args
			}
			// Links made by a command (commands are not confined).
			servertest.Must(t, alice, "execute", sb(map[string]any{"command": "ln -s " + outside + " abs-link; ln -s ../meta.json up-link; " +
				"ln -s ../../" + other + "/work bob-link; mkdir -p sub; echo inside > sub/in.txt; ln -s sub/in.txt ok-link"}))

			refused := []struct {
				tool string
				args map[string]any
			}{
				{"read_file", map[string]any{"path": filepath.Join(otherDir, "meta.json")}},
				{"read_file", map[string]any{"path": filepath.Join(otherDir, "work", "secret.txt")}},
				{"read_file", map[string]any{"path": "../meta.json"}},
				{"read_file", map[string]any{"path": filepath.Join(dir, "meta.json")}},
				{"read_file", map[string]any{"path": outside}},
				{"read_file", map[string]any{"path": "/etc/passwd"}},
				{"read_file", map[string]any{"path": "abs-link"}},
				{"read_file", map[string]any{"path": "up-link"}},
				{"read_file", map[string]any{"path": "bob-link/secret.txt"}},
				{"ls", map[string]any{"path": "/"}},
				{"ls", map[string]any{"path": ".."}},
				{"ls", map[string]any{"path": filepath.Dir(dir)}},
				{"ls", map[string]any{"path": "bob-link"}},
				{"glob", map[string]any{"pattern": "**/meta.json", "path": filepath.Dir(dir)}},
				{"glob", map[string]any{"pattern": "/etc/*"}},
				{"glob", map[string]any{"pattern": "*", "path": "bob-link"}},
				{"grep", map[string]any{"pattern": "secret", "path": filepath.Dir(dir)}},
				{"grep", map[string]any{"pattern": "secret", "path": "bob-link"}},
				{"write_file", map[string]any{"path": filepath.Join(otherDir, "work", "planted.txt"), "content": "x"}},
				{"write_file", map[string]any{"path": "../planted.txt", "content": "x"}},
				{"write_file", map[string]any{"path": "bob-link/planted.txt", "content": "x"}},
				{"edit_file", map[string]any{"path": filepath.Join(otherDir, "work", "secret.txt"), "old_string": "secret", "new_string": "gone"}},
				{"edit_file", map[string]any{"path": "../meta.json", "old_string": "\"", "new_string": "'", "replace_all": true}},
			}
			for _, c := range refused {
				text := servertest.Fails(t, alice, c.tool, sb(c.args))
				assert.Contains(t, text, "outside this sandbox's folder ("+work+")", "%s %v", c.tool, c.args)
				assert.NotContains(t, text, "bob's secret", "%s %v", c.tool, c.args)
			}
			for _, f := range []string{filepath.Join(otherDir, "work", "planted.txt"), filepath.Join(dir, "planted.txt")} {
				_, err := os.Stat(f)
				assert.ErrorIs(t, err, os.ErrNotExist, "write_file outside the folder made %s", f)
			}
			got, err := os.ReadFile(filepath.Join(otherDir, "work", "secret.txt"))
			require.NoError(t, err)
			assert.Equal(t, "bob's secret\n", string(got))

			// Inside the folder everything works, by relative or absolute
			// path, through links that stay inside.
			assert.Contains(t, servertest.Must(t, alice, "read_file", sb(map[string]any{"path": filepath.Join(work, "sub", "in.txt")})), "inside")
			assert.Contains(t, servertest.Must(t, alice, "read_file", sb(map[string]any{"path": "ok-link"})), "inside")
			servertest.Must(t, alice, "write_file", sb(map[string]any{"path": "new/dir/f.txt", "content": "hello\n"}))
			servertest.Must(t, alice, "edit_file", sb(map[string]any{"path": filepath.Join(work, "new/dir/f.txt"), "old_string": "hello", "new_string": "bye"}))
			assert.Contains(t, servertest.Must(t, alice, "read_file", sb(map[string]any{"path": "new/dir/f.txt"})), "bye")
			ls := servertest.Must(t, alice, "ls", sb(map[string]any{}))
			for _, name := range []string{"sub/", "new/", "abs-link", "bob-link"} {
				assert.Contains(t, ls, name)
			}
			assert.Contains(t, servertest.Must(t, alice, "ls", sb(map[string]any{"path": work})), "sub/")
			// glob's default path is the working directory.
			globbed := servertest.Must(t, alice, "glob", sb(map[string]any{"pattern": "**/*.txt"}))
			assert.Equal(t, []string{filepath.Join(work, "new/dir/f.txt"), filepath.Join(work, "sub/in.txt")}, sortedLines(globbed))
			assert.Equal(t, filepath.Join(work, "sub/in.txt"), servertest.Must(t, alice, "glob", sb(map[string]any{"pattern": "*.txt", "path": "sub"})))
			assert.Equal(t, filepath.Join(work, "new/dir/f.txt")+":1:bye",
				servertest.Must(t, alice, "grep", sb(map[string]any{"pattern": "bye", "mode": "content"})))
			assert.Contains(t, servertest.Must(t, alice, "grep", sb(map[string]any{"pattern": "secret"})), "No matches")

			// Commands are not confined (the tool description says so).
			assert.Contains(t, servertest.Must(t, alice, "execute", sb(map[string]any{"command": "cat " + filepath.Join(otherDir, "work", "secret.txt")})),
				"bob's secret")
		})
	}
}

func sortedLines(s string) []string {
	lines := strings.Split(s, "\n")
	slices.Sort(lines)
	return lines
}
