package fileopstest

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/fileops"
)

// fixedTime is the modification time the cases give files:
// 2023-11-14T22:13:20Z.
const fixedTime = 1700000000

var lsCases = []testCase{
	{"ls/entries", func(t *testing.T, e *env) {
		e.write("b.txt", "hello\n")
		e.write(".hidden", "")
		e.write("big.bin", strings.Repeat("x", 1234567))
		e.sh(`mkdir sub && ln -s b.txt link`)
		e.touch(fixedTime, "b.txt", ".hidden", "big.bin", "sub")
		out, err := e.tools.Ls(e.ctx, e.dir)
		require.NoError(t, err)
		got := strings.Split(out, "\n")
		require.Len(t, got, 5, out)
		assert.Equal(t, "file             0  2023-11-14T22:13:20Z  .hidden", got[0])
		assert.Equal(t, "file             6  2023-11-14T22:13:20Z  b.txt", got[1])
		assert.Equal(t, "file       1234567  2023-11-14T22:13:20Z  big.bin", got[2])
		// A symlink's own mtime cannot be set portably; check the rest.
		assert.Regexp(t, `^symlink          5  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  link$`, got[3])
		assert.Equal(t, "dir              -  2023-11-14T22:13:20Z  sub/", got[4])
	}},
	{"ls/relative", func(t *testing.T, e *env) {
		// A relative path resolves against the sandbox's working
		// directory, as Exec's do.
		name := e.inWorkDir()
		e.shWorkDir(fmt.Sprintf(`mkdir %s/d && : > %s/d/f && touch -d @%d %s/d/f`, name, name, fixedTime, name))
		out, err := e.tools.Ls(e.ctx, name+"/d")
		require.NoError(t, err)
		assert.Equal(t, "file             0  2023-11-14T22:13:20Z  f", out)
	}},
	{"ls/empty", func(t *testing.T, e *env) {
		e.sh(`mkdir empty`)
		out, err := e.tools.Ls(e.ctx, e.p("empty"))
		require.NoError(t, err)
		assert.Equal(t, "Directory '"+e.p("empty")+"' is empty.", out)
	}},
	{"ls/missing", func(t *testing.T, e *env) {
		_, err := e.tools.Ls(e.ctx, e.p("nope"))
		toolError(t, err, "Error: Path not found: '"+e.p("nope")+"'")
		assert.True(t, errors.Is(err, fs.ErrNotExist))
	}},
	{"ls/file", func(t *testing.T, e *env) {
		e.write("f.txt", "x")
		_, err := e.tools.Ls(e.ctx, e.p("f.txt"))
		toolError(t, err, "Error: '"+e.p("f.txt")+"' is not a directory. Use read_file to read a file.")
	}},
}

var readCases = []testCase{
	{"read/basic", func(t *testing.T, e *env) {
		e.write("a.txt", "alpha\n\n\tindented\nlast\n")
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 0)
		require.NoError(t, err)
		assert.Equal(t, "     1\talpha\n     2\t\n     3\t\tindented\n     4\tlast", out)
	}},
	{"read/no_trailing_newline", func(t *testing.T, e *env) {
		e.write("a.txt", "a\nb")
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 0)
		require.NoError(t, err)
		assert.Equal(t, "     1\ta\n     2\tb", out)
	}},
	{"read/crlf", func(t *testing.T, e *env) {
		e.write("a.txt", "a\r\nb\r\n")
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 0)
		require.NoError(t, err)
		assert.Equal(t, "     1\ta\n     2\tb", out)
	}},
	{"read/offset_limit", func(t *testing.T, e *env) {
		e.sh(`seq 1 10 > a.txt`)
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 2, 3)
		require.NoError(t, err)
		assert.Equal(t, lines(
			"     3\t3",
			"     4\t4",
			"     5\t5",
			"[showing lines 3-5; more lines follow: pass offset=5 to read on]"), out)
		out, err = e.tools.ReadFile(e.ctx, e.p("a.txt"), 8, 5)
		require.NoError(t, err)
		assert.Equal(t, "     9\t9\n    10\t10", out)
		out, err = e.tools.ReadFile(e.ctx, e.p("a.txt"), 7, 3)
		require.NoError(t, err)
		assert.Equal(t, "     8\t8\n     9\t9\n    10\t10", out, "no note when the last line is printed")
	}},
	{"read/default_limit", func(t *testing.T, e *env) {
		e.sh(`seq 1 2500 > a.txt`)
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 0)
		require.NoError(t, err)
		got := strings.Split(out, "\n")
		require.Len(t, got, 2001)
		assert.Equal(t, "  2000\t2000", got[1999])
		assert.Equal(t, "[showing lines 1-2000; more lines follow: pass offset=2000 to read on]", got[2000])
	}},
	{"read/wide_numbers", func(t *testing.T, e *env) {
		e.sh(`yes y | head -n 1000001 > a.txt`)
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 999998, 5)
		require.NoError(t, err)
		assert.Equal(t, "999999\ty\n1000000\ty\n1000001\ty", out)
	}},
	{"read/long_lines", func(t *testing.T, e *env) {
		long := strings.Repeat("x", 5000) + strings.Repeat("y", 5000) + "zz"
		exact := strings.Repeat("e", 5000)
		wide := strings.Repeat("é", 5001) // characters, not bytes
		e.write("a.txt", "short\n"+long+"\n"+exact+"\n"+wide+"\n")
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 0)
		require.NoError(t, err)
		assert.Equal(t, lines(
			"     1\tshort",
			"   2.1\t"+strings.Repeat("x", 5000),
			"   2.2\t"+strings.Repeat("y", 5000),
			"   2.3\tzz",
			"     3\t"+exact,
			"   4.1\t"+strings.Repeat("é", 5000),
			"   4.2\té"), out)
	}},
	{"read/output_cap", func(t *testing.T, e *env) {
		// A 2 MiB line: the answer stops inside it, at most
		// fileops.MaxReadOutput (1 MiB) long, and says how to go on.
		e.sh(`{ echo short; head -c 2097152 /dev/zero | tr '\0' x; echo; echo after; } > a.txt`)
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 0)
		require.NoError(t, err)
		require.LessOrEqual(t, len(out), fileops.MaxReadOutput)
		require.Greater(t, len(out), fileops.MaxReadOutput-1024, "the answer uses its room")
		got := strings.Split(out, "\n")
		require.Greater(t, len(got), 3)
		assert.Equal(t, "     1\tshort", got[0])
		assert.True(t, got[1] == "   2.1\t"+strings.Repeat("x", 5000), "piece 2.1 is 5000 x")
		last := got[len(got)-2]
		label, text, _ := strings.Cut(last, "\t")
		assert.Equal(t, fmt.Sprintf("%6s", fmt.Sprintf("2.%d", len(got)-2)), label)
		assert.True(t, text != "" && strings.Trim(text, "x") == "", "the last piece is x only")
		assert.Equal(t, "[output cut at 1 MiB inside line 2; pass offset=2 to read on after it, or use execute (e.g. head -c or cut -c) for the rest of the line]", got[len(got)-1])
		out, err = e.tools.ReadFile(e.ctx, e.p("a.txt"), 2, 0)
		require.NoError(t, err)
		assert.Equal(t, "     3\tafter", out)
	}},
	{"read/offset_past_end", func(t *testing.T, e *env) {
		e.write("a.txt", "1\n2\n3\n")
		e.write("one.txt", "only")
		for _, off := range []int{3, 10} {
			_, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), off, 0)
			toolError(t, err, fmt.Sprintf("Error: Line offset %d is past the end of '%s' (the file has 3 lines).", off, e.p("a.txt")))
		}
		_, err := e.tools.ReadFile(e.ctx, e.p("one.txt"), 1, 0)
		toolError(t, err, "Error: Line offset 1 is past the end of '"+e.p("one.txt")+"' (the file has 1 line).")
	}},
	{"read/empty", func(t *testing.T, e *env) {
		e.write("empty.txt", "")
		for _, off := range []int{0, 5} {
			out, err := e.tools.ReadFile(e.ctx, e.p("empty.txt"), off, 0)
			require.NoError(t, err)
			assert.Equal(t, "File '"+e.p("empty.txt")+"' exists but is empty.", out)
		}
	}},
	{"read/binary", func(t *testing.T, e *env) {
		e.write("nul.bin", "ELF\x00\x01\x02 some text")
		e.write("junk.bin", "\xff\xfe\xfd\xfc\x80\x81 mostly invalid")
		for _, name := range []string{"nul.bin", "junk.bin"} {
			_, err := e.tools.ReadFile(e.ctx, e.p(name), 0, 0)
			toolError(t, err, "Error: '"+e.p(name)+"' is a binary file; read_file shows text files only.")
		}
	}},
	{"read/invalid_utf8_text", func(t *testing.T, e *env) {
		e.write("latin1.txt", "this is mostly text, caf\xe9 au lait\n")
		out, err := e.tools.ReadFile(e.ctx, e.p("latin1.txt"), 0, 0)
		require.NoError(t, err)
		assert.Equal(t, "     1\tthis is mostly text, caf\uFFFD au lait", out)
	}},
	{"read/missing", func(t *testing.T, e *env) {
		_, err := e.tools.ReadFile(e.ctx, e.p("nope.txt"), 0, 0)
		toolError(t, err, "Error: File not found: '"+e.p("nope.txt")+"'")
		assert.True(t, errors.Is(err, fs.ErrNotExist), "errors.Is(%v, fs.ErrNotExist)", err)
	}},
	{"read/directory", func(t *testing.T, e *env) {
		_, err := e.tools.ReadFile(e.ctx, e.dir, 0, 0)
		toolError(t, err, "Error: '"+e.dir+"' is a directory, not a file. Use ls to list it.")
	}},
	{"read/bad_arguments", func(t *testing.T, e *env) {
		e.write("a.txt", "a\n")
		_, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), -1, 0)
		toolError(t, err, "Error: offset must not be negative (got -1)")
		_, err = e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, -2)
		toolError(t, err, "Error: limit must not be negative (got -2)")
		_, err = e.tools.ReadFile(e.ctx, "", 0, 0)
		toolError(t, err, "Error: path is empty")
		_, err = e.tools.WriteFile(e.ctx, "", "x")
		toolError(t, err, "Error: path is empty")
		_, err = e.tools.EditFile(e.ctx, "", "x", "y", false)
		toolError(t, err, "Error: path is empty")
	}},
}

var writeCases = []testCase{
	{"write/creates_parents", func(t *testing.T, e *env) {
		out, err := e.tools.WriteFile(e.ctx, e.p("a/b/c.txt"), "hello\nworld\n")
		require.NoError(t, err)
		assert.Equal(t, "Created file '"+e.p("a/b/c.txt")+"' (12 bytes).", out)
		assert.Equal(t, "hello\nworld\n", e.cat("a/b/c.txt"))
		assert.Equal(t, "644\n", e.sh(`stat -c %a a/b/c.txt`))
	}},
	{"write/empty", func(t *testing.T, e *env) {
		out, err := e.tools.WriteFile(e.ctx, e.p("e.txt"), "")
		require.NoError(t, err)
		assert.Equal(t, "Created file '"+e.p("e.txt")+"' (0 bytes).", out)
		assert.Equal(t, "0\n", e.sh(`wc -c < e.txt | tr -d ' '`))
	}},
	{"write/exists", func(t *testing.T, e *env) {
		e.write("a.txt", "original")
		_, err := e.tools.WriteFile(e.ctx, e.p("a.txt"), "new")
		toolError(t, err, "Error: File already exists: '"+e.p("a.txt")+"'. Use edit_file to change an existing file.")
		assert.True(t, errors.Is(err, fs.ErrExist))
		assert.Equal(t, "original", e.cat("a.txt"))
	}},
	{"write/directory", func(t *testing.T, e *env) {
		_, err := e.tools.WriteFile(e.ctx, e.dir, "x")
		toolError(t, err, "Error: '"+e.dir+"' is a directory, not a file.")
	}},
	{"write/parent_is_file", func(t *testing.T, e *env) {
		e.write("f", "x")
		_, err := e.tools.WriteFile(e.ctx, e.p("f/g.txt"), "y")
		toolError(t, err, "Error: Cannot create '"+e.p("f/g.txt")+"': a parent path is not a directory.")
	}},
}

var editCases = []testCase{
	{"edit/single", func(t *testing.T, e *env) {
		e.write("a.txt", "foo bar baz\n")
		out, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "bar", "qux", false)
		require.NoError(t, err)
		assert.Equal(t, "Replaced 1 occurrence in '"+e.p("a.txt")+"'.", out)
		assert.Equal(t, "foo qux baz\n", e.cat("a.txt"))
	}},
	{"edit/multiline", func(t *testing.T, e *env) {
		e.write("a.go", "func a() {\n\treturn 1\n}\n")
		_, err := e.tools.EditFile(e.ctx, e.p("a.go"), "\treturn 1\n}", "\treturn 2\n}\n\nfunc b() {}", false)
		require.NoError(t, err)
		assert.Equal(t, "func a() {\n\treturn 2\n}\n\nfunc b() {}\n", e.cat("a.go"))
	}},
	{"edit/not_found", func(t *testing.T, e *env) {
		e.write("a.txt", "foo bar\n")
		_, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "  bar", "x", false)
		toolError(t, err, "Error: old_string not found in '"+e.p("a.txt")+"'. It must match the file's text exactly, including whitespace and indentation.")
		assert.Equal(t, "foo bar\n", e.cat("a.txt"))
	}},
	{"edit/not_unique", func(t *testing.T, e *env) {
		e.write("a.txt", "x = 1\nx = 1\nx = 1\n")
		_, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "x = 1", "x = 2", false)
		toolError(t, err, "Error: old_string occurs 3 times in '"+e.p("a.txt")+"'. Pass replace_all=true to replace all 3, or include more surrounding text to make it unique.")
		assert.Equal(t, "x = 1\nx = 1\nx = 1\n", e.cat("a.txt"))
	}},
	{"edit/replace_all", func(t *testing.T, e *env) {
		e.write("a.txt", "x = 1\nx = 1\nx = 1\n")
		out, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "x = 1", "x = 2", true)
		require.NoError(t, err)
		assert.Equal(t, "Replaced 3 occurrences in '"+e.p("a.txt")+"'.", out)
		assert.Equal(t, "x = 2\nx = 2\nx = 2\n", e.cat("a.txt"))
		out, err = e.tools.EditFile(e.ctx, e.p("a.txt"), "x = 2\nx", "y", true)
		require.NoError(t, err)
		assert.Equal(t, "Replaced 1 occurrence in '"+e.p("a.txt")+"'.", out)
	}},
	{"edit/identical", func(t *testing.T, e *env) {
		e.write("a.txt", "a\n")
		_, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "a", "a", false)
		toolError(t, err, "Error: old_string and new_string are identical; there is nothing to replace.")
		_, err = e.tools.EditFile(e.ctx, e.p("a.txt"), "", "b", false)
		toolError(t, err, "Error: old_string is empty. Use write_file to create a new file.")
	}},
	{"edit/crlf", func(t *testing.T, e *env) {
		e.write("a.txt", "one\r\ntwo\r\nthree\r\n")
		out, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "one\ntwo\n", "1\n2\n2.5\n", false)
		require.NoError(t, err)
		assert.Equal(t, "Replaced 1 occurrence in '"+e.p("a.txt")+"'.", out)
		assert.Equal(t, "1\r\n2\r\n2.5\r\nthree\r\n", e.cat("a.txt"))
		_, err = e.tools.EditFile(e.ctx, e.p("a.txt"), "three", "3\nfour", false)
		require.NoError(t, err)
		assert.Equal(t, "1\r\n2\r\n2.5\r\n3\r\nfour\r\n", e.cat("a.txt"))
	}},
	{"edit/lf_stays_lf", func(t *testing.T, e *env) {
		e.write("a.txt", "one\ntwo\n")
		_, err := e.tools.EditFile(e.ctx, e.p("a.txt"), "one\n", "1\n1.5\n", false)
		require.NoError(t, err)
		assert.Equal(t, "1\n1.5\ntwo\n", e.cat("a.txt"))
	}},
	{"edit/keeps_mode", func(t *testing.T, e *env) {
		e.write("run.sh", "#!/bin/sh\necho old\n")
		e.sh(`chmod 750 run.sh`)
		_, err := e.tools.EditFile(e.ctx, e.p("run.sh"), "old", "new", false)
		require.NoError(t, err)
		assert.Equal(t, "750\n", e.sh(`stat -c %a run.sh`))
		assert.Equal(t, "#!/bin/sh\necho new\n", e.cat("run.sh"))
	}},
	{"edit/through_symlink", func(t *testing.T, e *env) {
		e.write("target.txt", "hello\n")
		e.sh(`ln -s target.txt link.txt`)
		out, err := e.tools.EditFile(e.ctx, e.p("link.txt"), "hello", "bye", false)
		require.NoError(t, err)
		assert.Equal(t, "Replaced 1 occurrence in '"+e.p("link.txt")+"'.", out)
		assert.Equal(t, "bye\n", e.cat("target.txt"), "the edit goes to the link's target")
		assert.Equal(t, "target.txt\n", e.sh(`readlink link.txt`), "the link stays a link")
	}},
	{"edit/missing", func(t *testing.T, e *env) {
		_, err := e.tools.EditFile(e.ctx, e.p("nope.txt"), "a", "b", false)
		toolError(t, err, "Error: File not found: '"+e.p("nope.txt")+"'")
		assert.True(t, errors.Is(err, fs.ErrNotExist))
	}},
	{"edit/directory", func(t *testing.T, e *env) {
		_, err := e.tools.EditFile(e.ctx, e.dir, "a", "b", false)
		toolError(t, err, "Error: '"+e.dir+"' is a directory, not a file. Use ls to list it.")
	}},
	{"edit/binary", func(t *testing.T, e *env) {
		e.write("a.bin", "abc\x00def")
		_, err := e.tools.EditFile(e.ctx, e.p("a.bin"), "abc", "x", false)
		toolError(t, err, "Error: '"+e.p("a.bin")+"' is a binary file; edit_file edits text files only.")
	}},
}
