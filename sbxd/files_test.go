package sbxd_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/sbxd"
)

// newTree makes files under a fresh directory through the client and
// returns the directory.
func newTree(t *testing.T, c *sbxd.Client, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	for name, content := range files {
		require.NoError(t, c.WriteFile(t.Context(), filepath.Join(dir, name), strings.NewReader(content), 0o644))
	}
	return dir
}

func readAll(t *testing.T, rc io.ReadCloser, err error) string {
	t.Helper()
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return string(b)
}

func TestFilesLocal(t *testing.T) {
	c, _ := createLocal(t)
	ctx := t.Context()
	dir := newTree(t, c, map[string]string{
		"a.txt":            "one\ntwo\nthree\nfour\n",
		"src/main.go":      "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n",
		"src/lib/util.go":  "package lib\n// TODO: x\n",
		"src/lib/util.ts":  "// TODO: y\n",
		".git/config":      "TODO in git\n",
		"docs/readme.md":   "TODO: docs\nmore\n",
		"bin/data.bin":     "TODO\x00binary",
		"deep/a/b/c/d.txt": "deep\n",
	})
	p := func(rel string) string { return filepath.Join(dir, rel) }
	rd := func(rc io.ReadCloser, err error) string { return readAll(t, rc, err) }

	t.Run("read ranges", func(t *testing.T) {
		assert.Equal(t, "two\nth", rd(c.ReadFileRange(ctx, p("a.txt"), 4, 6)))
		assert.Equal(t, "four\n", rd(c.ReadFileRange(ctx, p("a.txt"), 14, -1)))
		assert.Equal(t, "two\nthree\n", rd(c.ReadLines(ctx, p("a.txt"), 2, 2)))
		assert.Equal(t, "three\nfour\n", rd(c.ReadLines(ctx, p("a.txt"), 3, 0)))
		assert.Equal(t, "", rd(c.ReadLines(ctx, p("a.txt"), 10, 1)))
	})
	t.Run("errors", func(t *testing.T) {
		_, err := c.ReadFile(ctx, p("missing"))
		assert.ErrorIs(t, err, fs.ErrNotExist)
		var pe *fs.PathError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, p("missing"), pe.Path)
		_, err = c.ReadFile(ctx, p("src"))
		assert.ErrorIs(t, err, syscall.EISDIR)
		_, err = c.Stat(ctx, p("a.txt/x"))
		assert.ErrorIs(t, err, syscall.ENOTDIR)
		err = c.WriteFile(ctx, p("a.txt/x"), strings.NewReader("x"), 0o644)
		assert.ErrorIs(t, err, syscall.ENOTDIR)
		err = c.WriteFile(ctx, p("src"), strings.NewReader("x"), 0o644)
		assert.ErrorIs(t, err, syscall.EISDIR)
		_, err = c.ReadDir(ctx, p("a.txt"))
		assert.ErrorIs(t, err, syscall.ENOTDIR)
	})
	t.Run("write is atomic with mode and follows symlinks", func(t *testing.T) {
		require.NoError(t, c.WriteFile(ctx, p("new/x.sh"), strings.NewReader("#!/bin/sh\n"), 0o750))
		fi, err := c.Stat(ctx, p("new/x.sh"))
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o750), fi.Mode().Perm())
		require.NoError(t, os.Symlink("x.sh", p("new/link")))
		require.NoError(t, c.WriteFile(ctx, p("new/link"), strings.NewReader("via link"), 0o644))
		b, err := os.ReadFile(p("new/x.sh"))
		require.NoError(t, err)
		assert.Equal(t, "via link", string(b))
		lfi, err := c.Lstat(ctx, p("new/link"))
		require.NoError(t, err)
		assert.Equal(t, fs.ModeSymlink, lfi.Mode().Type())
		names := []string{}
		infos, err := c.ReadDir(ctx, p("new"))
		require.NoError(t, err)
		for _, fi := range infos {
			names = append(names, fi.Name())
		}
		assert.Equal(t, []string{"link", "x.sh"}, names, "no temporary files left")
	})
	t.Run("mkdir remove move", func(t *testing.T) {
		require.NoError(t, c.Mkdir(ctx, p("m/n/o"), 0o755, true))
		require.NoError(t, c.Mkdir(ctx, p("m/n/o"), 0o755, true))
		assert.ErrorIs(t, c.Mkdir(ctx, p("m/n/o"), 0o755, false), fs.ErrExist)
		assert.ErrorIs(t, c.Mkdir(ctx, p("x/y"), 0o755, false), fs.ErrNotExist)
		require.NoError(t, c.WriteFile(ctx, p("m/n/o/f"), strings.NewReader("f"), 0o644))
		assert.ErrorIs(t, c.Remove(ctx, p("m"), false), syscall.ENOTEMPTY)
		require.NoError(t, c.Move(ctx, p("m/n/o/f"), p("m/g"), false))
		require.NoError(t, c.WriteFile(ctx, p("m/h"), strings.NewReader("h"), 0o644))
		assert.ErrorIs(t, c.Move(ctx, p("m/g"), p("m/h"), false), fs.ErrExist)
		require.NoError(t, c.Move(ctx, p("m/g"), p("m/h"), true))
		assert.Equal(t, "f", rd(c.ReadFile(ctx, p("m/h"))))
		require.NoError(t, c.Remove(ctx, p("m"), true))
		assert.ErrorIs(t, c.Remove(ctx, p("m"), true), fs.ErrNotExist)
	})
	t.Run("glob", func(t *testing.T) {
		glob := func(pattern, base string) []string {
			entries, err := c.Glob(ctx, pattern, base)
			require.NoError(t, err)
			var out []string
			for _, e := range entries {
				out = append(out, strings.TrimPrefix(e.Path, dir+"/"))
			}
			slices.Sort(out)
			return out
		}
		assert.Equal(t, []string{"src/lib/util.go", "src/main.go"}, glob("**/*.go", dir))
		assert.Equal(t, []string{"src/lib/util.go", "src/lib/util.ts"}, glob("src/**/util.{go,ts}", dir))
		assert.Equal(t, []string{"a.txt"}, glob("*.txt", dir))
		assert.Equal(t, []string{"deep/a/b/c/d.txt"}, glob(dir+"/deep/**/*.txt", "/elsewhere"))
		assert.Empty(t, glob("nothere/**", dir))
		_, err := c.Glob(ctx, "[", dir)
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	})
	t.Run("walk", func(t *testing.T) {
		var got []string
		err := c.WalkFiles(ctx, dir, 2, []string{".git", p("deep")}, func(path string, fi fs.FileInfo) error {
			got = append(got, strings.TrimPrefix(path, dir+"/"))
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []string{"a.txt", "bin/data.bin", "docs/readme.md", "new/link", "new/x.sh", "src/main.go"}, got)
		err = c.WalkFiles(ctx, p("missing"), 0, nil, func(string, fs.FileInfo) error { return nil })
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
	t.Run("grep", func(t *testing.T) {
		res, err := c.Grep(ctx, sbxd.GrepRequest{Pattern: "TODO", Path: dir})
		require.NoError(t, err)
		var files []string
		for _, f := range res.Files {
			files = append(files, strings.TrimPrefix(f.Path, dir+"/"))
		}
		assert.Equal(t, []string{"docs/readme.md", "src/lib/util.go", "src/lib/util.ts"}, files, "binary and .git skipped")

		res, err = c.Grep(ctx, sbxd.GrepRequest{Pattern: "todo: x", IgnoreCase: true, Path: dir, Glob: "*.go", Before: 1, After: 5})
		require.NoError(t, err)
		require.Len(t, res.Files, 1)
		assert.Equal(t, []sbxd.GrepLine{{N: 1, Text: "package lib"}, {N: 2, Text: "// TODO: x", Match: true}}, res.Files[0].Lines)

		res, err = c.Grep(ctx, sbxd.GrepRequest{Pattern: "println(", Literal: true, Path: p("src/main.go"), Before: 1, After: 1})
		require.NoError(t, err)
		require.Len(t, res.Files, 1)
		assert.Equal(t, []sbxd.GrepLine{{N: 3, Text: "func main() {"}, {N: 4, Text: "\tprintln(\"hi\")", Match: true}, {N: 5, Text: "}"}}, res.Files[0].Lines)

		res, err = c.Grep(ctx, sbxd.GrepRequest{Pattern: "o", Path: p("a.txt"), CountOnly: true})
		require.NoError(t, err)
		require.Len(t, res.Files, 1)
		assert.Equal(t, 3, res.Files[0].Count)

		_, err = c.Grep(ctx, sbxd.GrepRequest{Pattern: "(", Path: dir})
		assert.ErrorIs(t, err, backend.ErrInvalidConfig)
	})
	t.Run("edit", func(t *testing.T) {
		name := p("edit.txt")
		require.NoError(t, c.WriteFile(ctx, name, strings.NewReader("a b a c"), 0o600))
		_, err := c.Edit(ctx, name, "a", "x", false)
		var nu *sbxd.NotUniqueError
		require.ErrorAs(t, err, &nu)
		assert.Equal(t, 2, nu.Count)
		_, err = c.Edit(ctx, name, "zzz", "x", false)
		assert.ErrorIs(t, err, sbxd.ErrEditNoMatch)
		n, err := c.Edit(ctx, name, "b", "B", false)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		n, err = c.Edit(ctx, name, "a", "x", true)
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		assert.Equal(t, "x B x c", rd(c.ReadFile(ctx, name)))
		fi, err := c.Stat(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o600), fi.Mode().Perm(), "edit keeps the mode")
		_, err = c.Edit(ctx, p("missing"), "a", "b", false)
		assert.ErrorIs(t, err, fs.ErrNotExist)
		assert.False(t, errors.Is(err, sbxd.ErrEditNoMatch))
	})
}

// The bulk path keeps WriteFile's rules: atomic, mode, symlinks followed,
// no temporary file left, the same errors.
func TestBulkWriteLocal(t *testing.T) {
	c, _ := createLocal(t, sbxd.WithBulkThreshold(1))
	ctx := t.Context()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "target"), []byte("old"), 0o644))
	require.NoError(t, os.Symlink("target", filepath.Join(dir, "link")))
	data := strings.Repeat("0123456789", 100_000)
	require.NoError(t, c.WriteFile(ctx, filepath.Join(dir, "link"), strings.NewReader(data), 0o640))
	got, err := os.ReadFile(filepath.Join(dir, "target"))
	require.NoError(t, err)
	assert.Equal(t, data, string(got))
	fi, err := os.Lstat(filepath.Join(dir, "link"))
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type(), "the link is kept")
	fi, err = os.Stat(filepath.Join(dir, "target"))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o640), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temporary file left")

	require.NoError(t, c.WriteFile(ctx, filepath.Join(dir, "a/b/new"), strings.NewReader("x"), 0o644))
	assert.ErrorIs(t, c.WriteFile(ctx, dir, strings.NewReader("x"), 0o644), syscall.EISDIR)
	assert.ErrorIs(t, c.WriteFile(ctx, filepath.Join(dir, "target/x"), strings.NewReader("x"), 0o644), syscall.ENOTDIR)
	rc, err := c.ReadFile(ctx, filepath.Join(dir, "link"))
	assert.Equal(t, data, readAll(t, rc, err))
}
