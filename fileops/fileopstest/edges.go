package fileopstest

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/fileops"
)

// Names that must neither split an entry nor forge one: a newline in a
// file name (followed by what looks like a listing line of a directory
// that does not exist) and in a directory name.
const (
	evilName = "evil\n41ed 0 0 FAKE_DIR"
	nlDir    = "n\nd"
)

// makeEvilNames makes evilName (a file holding "needle") and nlDir/x (a
// file holding "needle") in the case's directory.
func makeEvilNames(e *env) {
	e.sh(`f=$(printf 'evil\n41ed 0 0 FAKE_DIR') && echo needle > "$f" && d=$(printf 'n\nd') && mkdir "$d" && echo needle > "$d/x"` +
		fmt.Sprintf(` && touch -d @%d "$f" "$d" "$d/x"`, fixedTime))
}

// noBlock runs fn and fails the test when it does not return within 20
// seconds (reading a named pipe blocks until a writer comes); unblock is
// then run to let fn go.
func noBlock(t *testing.T, fn func(), unblock func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		unblock()
		<-done
		t.Fatal("the call blocked on a named pipe")
	}
}

var edgeCases = []testCase{
	{"read/output_cap_counts_everything", func(t *testing.T, e *env) {
		// 400,000 short lines and a limit past them: the numbers and the
		// newlines count against the 1 MiB too, not just the text.
		e.sh(`seq 1 400000 > a.txt`)
		out, err := e.tools.ReadFile(e.ctx, e.p("a.txt"), 0, 1000000)
		require.NoError(t, err)
		require.LessOrEqual(t, len(out), fileops.MaxReadOutput)
		got := strings.Split(out, "\n")
		last := len(got) - 2 // the last numbered line, before the note
		n := last + 1
		assert.Equal(t, fmt.Sprintf("%6d\t%d", n, n), got[last])
		assert.Equal(t, fmt.Sprintf("[output cut at 1 MiB after line %d; pass offset=%d to read on]", n, n), got[last+1])
		assert.Greater(t, len(out), fileops.MaxReadOutput-1024, "the answer uses its room")
		out, err = e.tools.ReadFile(e.ctx, e.p("a.txt"), n, 1)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("%6d\t%d\n[showing lines %d-%d; more lines follow: pass offset=%d to read on]", n+1, n+1, n+1, n+1, n+1), out)
	}},
	{"read/named_pipe", func(t *testing.T, e *env) {
		e.sh(`mkfifo fifo`)
		unblock := func() { e.sh(`echo x > fifo`) }
		want := "Error: '" + e.p("fifo") + "' is a named pipe, not a regular file; the file tools read regular files only."
		noBlock(t, func() {
			_, err := e.tools.ReadFile(e.ctx, e.p("fifo"), 0, 0)
			toolError(t, err, want)
			assert.ErrorIs(t, err, backend.ErrNotRegular)
		}, unblock)
		noBlock(t, func() {
			_, err := e.tools.EditFile(e.ctx, e.p("fifo"), "a", "b", false)
			toolError(t, err, want)
		}, unblock)
		noBlock(t, func() {
			out, err := e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "x", Path: e.p("fifo")})
			require.NoError(t, err)
			assert.Equal(t, "No matches for 'x' in '"+e.p("fifo")+"'.", out)
			out, err = e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "x", Path: e.dir})
			require.NoError(t, err)
			assert.Equal(t, "No matches for 'x' in '"+e.dir+"'.", out)
		}, unblock)
		noBlock(t, func() {
			_, err := sbfiles.ReadFile(e.ctx, e.sb, e.p("fifo"))
			assert.ErrorIs(t, err, backend.ErrNotRegular)
		}, unblock)
	}},
	{"read/device", func(t *testing.T, e *env) {
		_, err := e.tools.ReadFile(e.ctx, "/dev/null", 0, 0)
		toolError(t, err, "Error: '/dev/null' is a device, not a regular file; the file tools read regular files only.")
	}},
	{"read/proc", func(t *testing.T, e *env) {
		// /proc files report a size of 0; they are read to their end.
		out, err := e.tools.ReadFile(e.ctx, "/proc/version", 0, 0)
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(out, "     1\tLinux version "), "%q", out)
		out, err = e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "Linux version", Path: "/proc/version", Mode: fileops.GrepCount})
		require.NoError(t, err)
		assert.Equal(t, "/proc/version:1", out)
	}},
	{"read/symlink_loop", func(t *testing.T, e *env) {
		e.sh(`ln -s loop loop && ln -s b a && ln -s a b`)
		for _, name := range []string{"loop", "a"} {
			_, err := e.tools.ReadFile(e.ctx, e.p(name), 0, 0)
			toolError(t, err, "Error: '"+e.p(name)+"': too many levels of symbolic links (a symlink loop).")
			assert.ErrorIs(t, err, syscall.ELOOP)
			_, err = sbfiles.Stat(e.ctx, e.sb, e.p(name))
			assert.ErrorIs(t, err, syscall.ELOOP, "Stat")
		}
		_, err := e.tools.Ls(e.ctx, e.p("loop"))
		toolError(t, err, "Error: '"+e.p("loop")+"': too many levels of symbolic links (a symlink loop).")
		_, err = e.tools.EditFile(e.ctx, e.p("loop"), "a", "b", false)
		toolError(t, err, "Error: '"+e.p("loop")+"': too many levels of symbolic links (a symlink loop).")
	}},
	{"write/dangling_symlink", func(t *testing.T, e *env) {
		// A symlink at the name is followed, a dangling one too: its
		// target is created and the link stays (FileSystem.WriteFile).
		e.sh(`ln -s made.txt link.txt && mkdir d && ln -s ../d/abs.txt d/rel-link`)
		out, err := e.tools.WriteFile(e.ctx, e.p("link.txt"), "through\n")
		require.NoError(t, err)
		assert.Equal(t, "Created file '"+e.p("link.txt")+"' (8 bytes).", out)
		require.NoError(t, sbfiles.WriteFile(e.ctx, e.sb, e.p("d/rel-link"), strings.NewReader("rel\n"), 0o644))
		assert.Equal(t, "through\n", e.cat("made.txt"))
		assert.Equal(t, "rel\n", e.cat("d/abs.txt"))
		assert.Equal(t, "made.txt\n../d/abs.txt\n", e.sh(`readlink link.txt; readlink d/rel-link`), "the links stay links")
	}},
	{"files/readlink", func(t *testing.T, e *env) {
		e.write("f", "x")
		e.sh(`ln -s "target with space" link && ln -s "$(printf 'a\nb')" nl-link`)
		got, err := sbfiles.Readlink(e.ctx, e.sb, e.p("link"))
		require.NoError(t, err)
		assert.Equal(t, "target with space", got)
		got, err = sbfiles.Readlink(e.ctx, e.sb, e.p("nl-link"))
		require.NoError(t, err)
		assert.Equal(t, "a\nb", got)
		_, err = sbfiles.Readlink(e.ctx, e.sb, e.p("f"))
		assert.ErrorIs(t, err, syscall.EINVAL, "a regular file")
		_, err = sbfiles.Readlink(e.ctx, e.sb, e.p("nope"))
		assert.ErrorIs(t, err, fs.ErrNotExist)
	}},
	{"ls/newline_names", func(t *testing.T, e *env) {
		makeEvilNames(e)
		out, err := e.tools.Ls(e.ctx, e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(
			"file             7  2023-11-14T22:13:20Z  "+strconv.Quote(evilName),
			"dir              -  2023-11-14T22:13:20Z  "+strconv.Quote(nlDir)+"/"), out)
		fis, err := sbfiles.ReadDir(e.ctx, e.sb, e.dir)
		require.NoError(t, err)
		require.Len(t, fis, 2)
		assert.Equal(t, evilName, fis[0].Name())
		assert.True(t, fis[0].Mode().IsRegular())
		assert.Equal(t, nlDir, fis[1].Name())
		assert.True(t, fis[1].IsDir())
		out, err = e.tools.Ls(e.ctx, e.p(nlDir))
		require.NoError(t, err)
		assert.Equal(t, "file             7  2023-11-14T22:13:20Z  x", out)
	}},
	{"ls/quoted_lookalike", func(t *testing.T, e *env) {
		// A name that looks like a quoted one is quoted too.
		e.write(`"a\nb"`, "")
		e.touch(fixedTime, `"a\nb"`)
		out, err := e.tools.Ls(e.ctx, e.dir)
		require.NoError(t, err)
		assert.Equal(t, `file             0  2023-11-14T22:13:20Z  "\"a\\nb\""`, out)
	}},
	{"glob/newline_names", func(t *testing.T, e *env) {
		makeEvilNames(e)
		out, err := e.tools.Glob(e.ctx, "**", e.dir)
		require.NoError(t, err)
		assert.Equal(t, lines(strconv.Quote(e.p(evilName)), strconv.Quote(e.p(nlDir+"/x"))), out)
		out, err = e.tools.Glob(e.ctx, "n*/*", e.dir)
		require.NoError(t, err)
		assert.Equal(t, strconv.Quote(e.p(nlDir+"/x")), out)
	}},
	{"grep/newline_names", func(t *testing.T, e *env) {
		makeEvilNames(e)
		out, err := e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "needle", Path: e.dir})
		require.NoError(t, err)
		assert.Equal(t, lines(strconv.Quote(e.p(evilName)), strconv.Quote(e.p(nlDir+"/x"))), out)
		out, err = e.tools.Grep(e.ctx, fileops.GrepRequest{Pattern: "needle", Path: e.dir, Mode: fileops.GrepContent})
		require.NoError(t, err)
		assert.Equal(t, lines(strconv.Quote(e.p(evilName))+":1:needle", strconv.Quote(e.p(nlDir+"/x"))+":1:needle"), out)
	}},
}
