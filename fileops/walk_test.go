package fileops

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backends/local"
)

// noFindSandbox is a fake: a local sandbox whose Exec answers the listing
// script with exit code 127, as a sandbox without sh, find or stat would.
// Its native file access stays reachable through Unwrap.
type noFindSandbox struct{ backend.Sandbox }

func (s noFindSandbox) Unwrap() backend.Sandbox { return s.Sandbox }

func (s noFindSandbox) Exec(ctx context.Context, req backend.ExecRequest) (backend.ExecResult, error) {
	if len(req.Cmd) > 2 && req.Cmd[2] == listScript {
		return backend.ExecResult{ExitCode: 127, Stderr: []byte("sh: find: not found\n")}, nil
	}
	return s.Sandbox.Exec(ctx, req)
}

// TestWalkWithoutFind checks that Glob and Grep fall back to walking with
// ReadDir, and that the walk finds what find finds.
func TestWalkWithoutFind(t *testing.T) {
	ctx := context.Background()
	b, err := local.New(local.Config{StateDir: t.TempDir()})
	require.NoError(t, err)
	sb, err := b.Create(ctx, backend.Spec{Name: "walk"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	dir := t.TempDir()
	res, err := sb.Exec(ctx, backend.ExecRequest{Shell: `cd "$D" && mkdir -p a/b .git c && echo hit > a/x.go && echo hit > a/b/y.go &&
		echo hit > .git/z.go && echo hit > c/w.txt && ln -s x.go a/link.go && ln -s a dirlink &&
		touch -d @1000 a/x.go && touch -d @2000 a/b/y.go && touch -d @3000 c/w.txt`, Env: map[string]string{"D": dir}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, string(res.Stderr))

	withFind, withoutFind := New(sb, Options{}), New(noFindSandbox{sb}, Options{})
	globs := []struct{ pattern, want string }{
		{"**/*.go", "a/b/y.go a/link.go a/x.go .git/z.go"}, // link's own mtime is now
		{"*/*", "c/w.txt a/link.go a/x.go .git/z.go"},
		{"a/**", "a/b/y.go a/link.go a/x.go"},
		{"*", "dirlink"},
	}
	for _, g := range globs {
		want := strings.Fields(g.want)
		for i, w := range want {
			want[i] = dir + "/" + w
		}
		for _, tools := range []*Tools{withFind, withoutFind} {
			out, err := tools.Glob(ctx, g.pattern, dir)
			require.NoError(t, err)
			assert.ElementsMatch(t, want, strings.Split(out, "\n"), g.pattern)
		}
	}
	for _, tools := range []*Tools{withFind, withoutFind} {
		out, err := tools.Grep(ctx, GrepRequest{Pattern: "hit", Path: dir, Mode: GrepCount})
		require.NoError(t, err)
		assert.Equal(t, dir+"/a/b/y.go:1\n"+dir+"/a/x.go:1\n"+dir+"/c/w.txt:1", out)
		out, err = tools.Grep(ctx, GrepRequest{Pattern: "hit", Path: dir, Glob: "*.go"})
		require.NoError(t, err)
		assert.Equal(t, dir+"/a/b/y.go\n"+dir+"/a/x.go", out)
		_, err = tools.Glob(ctx, "*", dir+"/nope")
		var te *ToolError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, "Error: Path not found: '"+dir+"/nope'", te.Error())
	}
}
