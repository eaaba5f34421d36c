package fileopstest

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/fileops"
)

// globTree makes files with distinct modification times:
//
//	a.go          t+1000
//	sub/b.go      t+3000
//	sub/x.txt     t+4000
//	sub/deep/c.go t+2000
//	.dot/d.go     t+500
func globTree(e *env) {
	e.write("a.go", "package a\n")
	e.write("sub/b.go", "package b\n")
	e.write("sub/x.txt", "x\n")
	e.write("sub/deep/c.go", "package c\n")
	e.write(".dot/d.go", "package d\n")
	e.touch(fixedTime+1000, "a.go")
	e.touch(fixedTime+3000, "sub/b.go")
	e.touch(fixedTime+4000, "sub/x.txt")
	e.touch(fixedTime+2000, "sub/deep/c.go")
	e.touch(fixedTime+500, ".dot/d.go")
}

var globCases = []testCase{
	{"glob/doublestar_newest_first", func(t *testing.T, e *env) {
		globTree(e)
		out, err := e.tools.Glob(e.ctx, "**/*.go", e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(e.p("sub/b.go"), e.p("sub/deep/c.go"), e.p("a.go"), e.p(".dot/d.go")), out)
	}},
	{"glob/one_level", func(t *testing.T, e *env) {
		globTree(e)
		out, err := e.tools.Glob(e.ctx, "*.go", e.dir)
		require.NoError(t, err)
		assert.Equal(t, e.p("a.go"), out)
		out, err = e.tools.Glob(e.ctx, "*/*", e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(e.p("sub/x.txt"), e.p("sub/b.go"), e.p(".dot/d.go")), out)
	}},
	{"glob/fixed_prefix", func(t *testing.T, e *env) {
		globTree(e)
		out, err := e.tools.Glob(e.ctx, "sub/**/*.go", e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(e.p("sub/b.go"), e.p("sub/deep/c.go")), out)
		out, err = e.tools.Glob(e.ctx, "./sub/deep/c.go", e.dir)
		require.NoError(t, err)
		assert.Equal(t, e.p("sub/deep/c.go"), out)
	}},
	{"glob/braces", func(t *testing.T, e *env) {
		globTree(e)
		out, err := e.tools.Glob(e.ctx, "sub/**/*.{go,txt}", e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(e.p("sub/x.txt"), e.p("sub/b.go"), e.p("sub/deep/c.go")), out)
	}},
	{"glob/absolute_pattern", func(t *testing.T, e *env) {
		globTree(e)
		out, err := e.tools.Glob(e.ctx, e.p("sub/*.go"), "")
		require.NoError(t, err)
		assert.Equal(t, e.p("sub/b.go"), out)
	}},
	{"glob/relative_path", func(t *testing.T, e *env) {
		name := e.inWorkDir()
		e.shWorkDir(fmt.Sprintf(`mkdir -p %s/s && : > %s/s/f.md`, name, name))
		wd := strings.TrimSpace(e.shWorkDir(`pwd`))
		out, err := e.tools.Glob(e.ctx, "**/*.md", name)
		require.NoError(t, err)
		assert.Equal(t, path.Join(wd, name, "s/f.md"), out, "glob prints absolute paths")
	}},
	{"glob/symlinked_dir", func(t *testing.T, e *env) {
		globTree(e)
		e.sh(`ln -s sub link`)
		out, err := e.tools.Glob(e.ctx, "*.go", e.p("link"))
		require.NoError(t, err)
		assert.Equal(t, e.p("link/b.go"), out, "a symlink given as the path is followed")
		out, err = e.tools.Glob(e.ctx, "**/c.go", e.dir)
		require.NoError(t, err)
		assert.Equal(t, e.p("sub/deep/c.go"), out, "symlinks below the path are not followed")
	}},
	{"glob/ties_by_path", func(t *testing.T, e *env) {
		e.write("b", "")
		e.write("a", "")
		e.write("c", "")
		e.touch(fixedTime, "a", "b", "c")
		out, err := e.tools.Glob(e.ctx, "*", e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(e.p("a"), e.p("b"), e.p("c")), out)
	}},
	{"glob/files_only", func(t *testing.T, e *env) {
		e.sh(`mkdir -p d1/d2 && : > d1/f`)
		out, err := e.tools.Glob(e.ctx, "**", e.dir)
		require.NoError(t, err)
		assert.Equal(t, e.p("d1/f"), out)
	}},
	{"glob/no_match", func(t *testing.T, e *env) {
		globTree(e)
		for _, pat := range []string{"*.rs", "nope/**/*.go", "sub/*/x.txt"} {
			out, err := e.tools.Glob(e.ctx, pat, e.dir)
			require.NoError(t, err)
			assert.Equal(t, "No files match '"+pat+"' in '"+e.dir+"'.", out)
		}
	}},
	{"glob/missing_dir", func(t *testing.T, e *env) {
		_, err := e.tools.Glob(e.ctx, "*", e.p("nope"))
		toolError(t, err, "Error: Path not found: '"+e.p("nope")+"'")
		assert.True(t, errors.Is(err, fs.ErrNotExist))
	}},
	{"glob/bad_pattern", func(t *testing.T, e *env) {
		_, err := e.tools.Glob(e.ctx, "a[", e.dir)
		var te *fileops.ToolError
		require.ErrorAs(t, err, &te)
		assert.True(t, strings.HasPrefix(te.Error(), "Error: Invalid glob pattern 'a[': "), te.Error())
	}},
}

// grepTree makes:
//
//	a.txt         alpha beta gamma delta epsilon zeta eta (a line each)
//	b.txt         beta
//	sub/c.go      package x // beta
//	bin.dat       beta\0 (binary: skipped)
//	.git/config   beta (not searched)
func grepTree(e *env) {
	e.write("a.txt", "alpha\nbeta\ngamma\ndelta\nepsilon\nzeta\neta\n")
	e.write("b.txt", "beta\n")
	e.write("sub/c.go", "package x // beta\n")
	e.write("bin.dat", "beta\x00\x01\x02")
	e.write(".git/config", "beta\n")
}

func grep(t *testing.T, e *env, req fileops.GrepRequest) string {
	t.Helper()
	out, err := e.tools.Grep(e.ctx, req)
	require.NoError(t, err)
	return out
}

var grepCases = []testCase{
	{"grep/files_with_matches", func(t *testing.T, e *env) {
		grepTree(e)
		want := lines(e.p("a.txt"), e.p("b.txt"), e.p("sub/c.go"))
		assert.Equal(t, want, grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.dir}))
		assert.Equal(t, want, grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.dir, Mode: fileops.GrepFilesWithMatches}))
	}},
	{"grep/count", func(t *testing.T, e *env) {
		grepTree(e)
		out := grep(t, e, fileops.GrepRequest{Pattern: "a", Path: e.dir, Mode: fileops.GrepCount})
		assert.Equal(t, lines(e.p("a.txt")+":6", e.p("b.txt")+":1", e.p("sub/c.go")+":1"), out)
	}},
	{"grep/content", func(t *testing.T, e *env) {
		grepTree(e)
		out := grep(t, e, fileops.GrepRequest{Pattern: "^.eta", Path: e.dir, Mode: fileops.GrepContent})
		assert.Equal(t, lines(e.p("a.txt")+":2:beta", e.p("a.txt")+":6:zeta", e.p("b.txt")+":1:beta"), out)
	}},
	{"grep/context", func(t *testing.T, e *env) {
		e.write("n.txt", "one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n")
		p := e.p("n.txt")
		req := fileops.GrepRequest{Pattern: "two|eight", Path: p, Mode: fileops.GrepContent}
		req.Context = 1
		assert.Equal(t, lines(p+"-1-one", p+":2:two", p+"-3-three", "--", p+"-7-seven", p+":8:eight", p+"-9-nine"), grep(t, e, req))
		req.Context, req.After = 0, 1
		assert.Equal(t, lines(p+":2:two", p+"-3-three", "--", p+":8:eight", p+"-9-nine"), grep(t, e, req))
		req.After, req.Before = 0, 2
		assert.Equal(t, lines(p+"-1-one", p+":2:two", "--", p+"-6-six", p+"-7-seven", p+":8:eight"), grep(t, e, req))
		// Adjacent and overlapping groups merge; Before wins over Context.
		req = fileops.GrepRequest{Pattern: "three|five", Path: p, Mode: fileops.GrepContent, Context: 1, Before: 0}
		assert.Equal(t, lines(p+"-2-two", p+":3:three", p+"-4-four", p+":5:five", p+"-6-six"), grep(t, e, req))
	}},
	{"grep/context_across_files", func(t *testing.T, e *env) {
		e.write("a.txt", "x\nhit\ny\n")
		e.write("b.txt", "hit\n")
		out := grep(t, e, fileops.GrepRequest{Pattern: "hit", Path: e.dir, Mode: fileops.GrepContent, After: 1})
		assert.Equal(t, lines(e.p("a.txt")+":2:hit", e.p("a.txt")+"-3-y", "--", e.p("b.txt")+":1:hit"), out)
		out = grep(t, e, fileops.GrepRequest{Pattern: "hit", Path: e.dir, Mode: fileops.GrepContent})
		assert.Equal(t, lines(e.p("a.txt")+":2:hit", e.p("b.txt")+":1:hit"), out, "no separators without context")
	}},
	{"grep/literal_and_regex", func(t *testing.T, e *env) {
		e.write("a.txt", "call f(x)\ncall fax\nid 123\n")
		p := e.p("a.txt")
		assert.Equal(t, p+":1:call f(x)", grep(t, e, fileops.GrepRequest{Pattern: "f(x)", Path: p, Mode: fileops.GrepContent, Literal: true}))
		assert.Equal(t, lines(p+":1:call f(x)", p+":2:call fax"), grep(t, e, fileops.GrepRequest{Pattern: `f.x`, Path: p, Mode: fileops.GrepContent}))
		assert.Equal(t, p+":3:id 123", grep(t, e, fileops.GrepRequest{Pattern: `\d{3}$`, Path: p, Mode: fileops.GrepContent}))
		_, err := e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "f(x", Path: p})
		var te *fileops.ToolError
		require.ErrorAs(t, err, &te)
		assert.True(t, strings.HasPrefix(te.Error(), "Error: Invalid regular expression 'f(x': "), te.Error())
		assert.True(t, strings.HasSuffix(te.Error(), ". Pass literal=true to search for the text as it is."), te.Error())
	}},
	{"grep/ignore_case", func(t *testing.T, e *env) {
		e.write("a.txt", "Hello\nHELLO\nhelp\n")
		p := e.p("a.txt")
		assert.Equal(t, p+":1", grep(t, e, fileops.GrepRequest{Pattern: "HELLO", Path: p, Mode: fileops.GrepCount}))
		assert.Equal(t, p+":2", grep(t, e, fileops.GrepRequest{Pattern: "hello", Path: p, Mode: fileops.GrepCount, IgnoreCase: true}))
		assert.Equal(t, lines(p+":1:Hello", p+":2:HELLO"), grep(t, e, fileops.GrepRequest{Pattern: "hello", Path: p, Mode: fileops.GrepContent, IgnoreCase: true, Literal: true}))
	}},
	{"grep/glob", func(t *testing.T, e *env) {
		grepTree(e)
		e.write("sub/deep/d.go", "beta\n")
		assert.Equal(t, lines(e.p("sub/c.go"), e.p("sub/deep/d.go")), grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.dir, Glob: "*.go"}))
		assert.Equal(t, e.p("sub/c.go"), grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.dir, Glob: "sub/*.go"}))
		assert.Equal(t, lines(e.p("a.txt"), e.p("b.txt"), e.p("sub/c.go"), e.p("sub/deep/d.go")), grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.dir, Glob: "*.{txt,go}"}))
		assert.Equal(t, e.p("sub/deep/d.go"), grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.dir, Glob: "**/deep/*"}))
	}},
	{"grep/symlinked_dir", func(t *testing.T, e *env) {
		grepTree(e)
		e.sh(`ln -s sub link`)
		assert.Equal(t, e.p("link/c.go"), grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.p("link")}))
	}},
	{"grep/single_file", func(t *testing.T, e *env) {
		grepTree(e)
		assert.Equal(t, e.p("b.txt")+":1:beta", grep(t, e, fileops.GrepRequest{Pattern: "beta", Path: e.p("b.txt"), Mode: fileops.GrepContent}))
	}},
	{"grep/relative_default_path", func(t *testing.T, e *env) {
		name := e.inWorkDir()
		e.shWorkDir(fmt.Sprintf(`printf 'needle-%s\n' > %s/f.txt`, name, name))
		wd := strings.TrimSpace(e.shWorkDir(`pwd`))
		out := grep(t, e, fileops.GrepRequest{Pattern: "needle-" + name, Path: name, Mode: fileops.GrepContent})
		assert.Equal(t, path.Join(wd, name, "f.txt")+":1:needle-"+name, out)
	}},
	{"grep/no_match", func(t *testing.T, e *env) {
		grepTree(e)
		assert.Equal(t, "No matches for 'omega' in '"+e.dir+"'.", grep(t, e, fileops.GrepRequest{Pattern: "omega", Path: e.dir}))
	}},
	{"grep/missing_path", func(t *testing.T, e *env) {
		_, err := e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "x", Path: e.p("nope")})
		toolError(t, err, "Error: Path not found: '"+e.p("nope")+"'")
		assert.True(t, errors.Is(err, fs.ErrNotExist))
	}},
	{"grep/bad_arguments", func(t *testing.T, e *env) {
		_, err := e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "x", Path: e.dir, Mode: "lines"})
		toolError(t, err, "Error: Unknown grep mode 'lines' (use files_with_matches, content or count)")
		_, err = e.tools.Grep(e.ctx, fileops.GrepRequest{Path: e.dir})
		toolError(t, err, "Error: pattern is empty")
		_, err = e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "x", Path: e.dir, Context: -1})
		toolError(t, err, "Error: context line counts must not be negative")
	}},
	{"grep/output_cut", func(t *testing.T, e *env) {
		e.sh(`seq 1 1500 > n.txt`)
		out := grep(t, e, fileops.GrepRequest{Pattern: "^[0-9]+$", Path: e.dir, Mode: fileops.GrepContent})
		got := strings.Split(out, "\n")
		require.Len(t, got, 1001)
		assert.Equal(t, e.p("n.txt")+":1000:1000", got[999])
		assert.Equal(t, "[output cut at 1000 lines; narrow the search with path, glob or a more specific pattern]", got[1000])
	}},
	{"grep/large_file_skipped", func(t *testing.T, e *env) {
		e.sh(`{ echo needle; head -c 11000000 /dev/zero | tr '\0' a; echo; } > big.txt && echo needle > small.txt`)
		out := grep(t, e, fileops.GrepRequest{Pattern: "needle", Path: e.dir})
		assert.Equal(t, lines(e.p("small.txt"), "[1 file over 10 MiB not searched]"), out)
	}},
	{"grep/long_line", func(t *testing.T, e *env) {
		e.write("a.txt", "x"+strings.Repeat("é", 1500)+"\n")
		out := grep(t, e, fileops.GrepRequest{Pattern: "x", Path: e.p("a.txt"), Mode: fileops.GrepContent})
		assert.Equal(t, e.p("a.txt")+":1:x"+strings.Repeat("é", 999)+" [line cut]", out)
	}},
}
