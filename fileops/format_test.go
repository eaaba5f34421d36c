package fileops

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxkit/sandboxkit/backend"
)

func TestAppendNumbered(t *testing.T) {
	assert.Equal(t, []string{"     7\thello"}, appendNumbered(nil, 7, "hello"))
	assert.Equal(t, []string{"     1\t"}, appendNumbered(nil, 1, ""))
	assert.Equal(t, []string{"1234567\tx"}, appendNumbered(nil, 1234567, "x"))
	assert.Equal(t, []string{"     1\tbad \uFFFD"}, appendNumbered(nil, 1, "bad \xff"))

	exact := strings.Repeat("a", MaxLineLength)
	assert.Equal(t, []string{"     3\t" + exact}, appendNumbered(nil, 3, exact))

	long := strings.Repeat("a", MaxLineLength) + strings.Repeat("b", MaxLineLength) + "c"
	assert.Equal(t, []string{
		"  42.1\t" + strings.Repeat("a", MaxLineLength),
		"  42.2\t" + strings.Repeat("b", MaxLineLength),
		"  42.3\tc",
	}, appendNumbered(nil, 42, long))

	// Pieces count characters, not bytes.
	wide := strings.Repeat("日", MaxLineLength+2)
	assert.Equal(t, []string{
		"   1.1\t" + strings.Repeat("日", MaxLineLength),
		"   1.2\t日日",
	}, appendNumbered(nil, 1, wide))
	assert.Equal(t, "123456.1", strings.SplitN(appendNumbered(nil, 123456, long)[0], "\t", 2)[0])
}

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	br := bufio.NewReaderSize(strings.NewReader("a\r\n"+long+"\n\nlast"), 16)
	var got []string
	for {
		l, ok, cut, err := readLine(br, 1000)
		require.NoError(t, err)
		require.False(t, cut)
		if !ok {
			break
		}
		got = append(got, l)
	}
	assert.Equal(t, []string{"a", long, "", "last"}, got)

	br = bufio.NewReaderSize(strings.NewReader(long+"\nnext\n"), 16)
	l, ok, _, err := readLine(br, 0)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Empty(t, l, "skipped lines are not kept")
	l, _, _, _ = readLine(br, 1000)
	assert.Equal(t, "next", l)

	for _, keep := range []int{10, 40} {
		br = bufio.NewReaderSize(strings.NewReader(long+"\nnext\n"), 16)
		l, ok, cut, err := readLine(br, keep)
		require.NoError(t, err)
		assert.True(t, ok && cut)
		assert.Equal(t, long[:keep], l)
	}
	br = bufio.NewReaderSize(strings.NewReader("ab日本\n"), 16)
	l, _, cut, _ := readLine(br, 4) // "ab" and 2 of 日's 3 bytes
	assert.True(t, cut)
	assert.Equal(t, "ab", l)
	br = bufio.NewReaderSize(strings.NewReader("abcd\r\n"), 16)
	l, _, cut, _ = readLine(br, 4)
	assert.False(t, cut, "the line ending does not count")
	assert.Equal(t, "abcd", l)
}

func TestLooksBinary(t *testing.T) {
	tests := []struct {
		name   string
		sample string
		atEOF  bool
		want   bool
	}{
		{"text", "hello\nworld\n", true, false},
		{"utf8", "héllo wörld ✓\n", true, false},
		{"ansi colours and tabs", "\x1b[31mred\x1b[0m\tx\r\n\f", true, false},
		{"nul", "abc\x00def", true, true},
		{"invalid utf8", "\xff\xfe\xfd\xfc\x80abc", true, true},
		{"some latin-1", "a fairly long line of text with one caf\xe9", true, false},
		{"control chars", "\x01\x02\x03\x04abc", true, true},
		{"rune cut at sample end", strings.Repeat("a", 20) + "\xe6\x97", false, false},
		{"rune cut at file end", "ab\xe6\x97", true, true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, looksBinary([]byte(tt.sample), tt.atEOF), tt.name)
	}
}

func TestFormatEntry(t *testing.T) {
	mt := time.Date(2024, 5, 1, 12, 0, 0, 0, time.FixedZone("X", 3600))
	tests := []struct {
		fi   fs.FileInfo
		want string
	}{
		{backend.NewFileInfo("a.txt", 12, 0o644, mt), "file            12  2024-05-01T11:00:00Z  a.txt"},
		{backend.NewFileInfo("src", 4096, fs.ModeDir|0o755, mt), "dir              -  2024-05-01T11:00:00Z  src/"},
		{backend.NewFileInfo("l", 3, fs.ModeSymlink|0o777, mt), "symlink          3  2024-05-01T11:00:00Z  l"},
		{backend.NewFileInfo("p", 0, fs.ModeNamedPipe, mt), "fifo             0  2024-05-01T11:00:00Z  p"},
		{backend.NewFileInfo("s", 0, fs.ModeSocket, mt), "socket           0  2024-05-01T11:00:00Z  s"},
		{backend.NewFileInfo("null", 0, fs.ModeDevice|fs.ModeCharDevice, mt), "device           0  2024-05-01T11:00:00Z  null"},
		{backend.NewFileInfo("huge", 123456789012, 0o600, mt), "file    123456789012  2024-05-01T11:00:00Z  huge"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, formatEntry(tt.fi))
	}
}

func TestMatchEdit(t *testing.T) {
	tests := []struct {
		name, content, old, new string
		wantOld, wantNew        string
		n                       int
	}{
		{"lf", "a\nb\n", "a\nb", "c\nd", "a\nb", "c\nd", 1},
		{"crlf file, lf strings", "a\r\nb\r\n", "a\nb", "c\nd", "a\r\nb", "c\r\nd", 1},
		{"crlf file, crlf strings", "a\r\nb\r\n", "a\r\nb", "c\r\nd", "a\r\nb", "c\r\nd", 1},
		{"crlf file, one-line old", "a\r\nb\r\n", "b", "x\ny", "b", "x\r\ny", 1},
		{"mixed file, lf match only", "a\r\nb\nc\r\n", "b\nc", "x", "b\nc", "x", 1},
		{"not found", "abc", "x", "y", "x", "y", 0},
		{"count", "xx xx xx", "xx", "y", "xx", "y", 3},
	}
	for _, tt := range tests {
		o, n, c := matchEdit(tt.content, tt.old, tt.new)
		assert.Equal(t, tt.wantOld, o, tt.name)
		assert.Equal(t, tt.wantNew, n, tt.name)
		assert.Equal(t, tt.n, c, tt.name)
	}
}

func TestGrepperSearch(t *testing.T) {
	data := []byte("one\ntwo\nthree\r\nfour\nfive\nsix\n")
	g := func(expr string, mode GrepMode, b, a int) []string {
		return (&grepper{re: regexp.MustCompile(expr), mode: mode, before: b, after: a}).search("/f", data)
	}
	assert.Equal(t, []string{"/f"}, g("o", GrepFilesWithMatches, 0, 0))
	assert.Equal(t, []string{"/f:3"}, g("o", GrepCount, 0, 0))
	assert.Nil(t, g("zzz", GrepCount, 0, 0))
	assert.Equal(t, []string{"/f:3:three"}, g("three$", GrepContent, 0, 0), "CR is not part of the line")
	assert.Equal(t, []string{"/f:1:one", "/f:6:six"}, g("one|six", GrepContent, 0, 0))
	assert.Equal(t, []string{"/f:1:one", "/f-2-two", "--", "/f-5-five", "/f:6:six"}, g("one|six", GrepContent, 1, 1))
	assert.Equal(t, []string{"/f-1-one", "/f:2:two", "/f-3-three", "/f-4-four", "/f:5:five", "/f-6-six"}, g("two|five", GrepContent, 2, 2))
}

func TestContentLine(t *testing.T) {
	assert.Equal(t, "/a:3:x", contentLine("/a", 3, ':', "x"))
	assert.Equal(t, "/a-4-\uFFFD", contentLine("/a", 4, '-', "\xff"))
	long := strings.Repeat("é", MaxGrepLineLength+1)
	assert.Equal(t, "/a:1:"+strings.Repeat("é", MaxGrepLineLength)+" [line cut]", contentLine("/a", 1, ':', long))
}

func TestFormatSeconds(t *testing.T) {
	assert.Equal(t, "1800", formatSeconds(1800*time.Second))
	assert.Equal(t, "0.5", formatSeconds(500*time.Millisecond))
	assert.Equal(t, "90.25", formatSeconds(90250*time.Millisecond))
}

func TestExecuteResultString(t *testing.T) {
	tests := []struct {
		r    ExecuteResult
		want string
	}{
		{ExecuteResult{}, "Exit code: 0"},
		{ExecuteResult{Output: "hi\n", ExitCode: 2}, "hi\nExit code: 2"},
		{ExecuteResult{Output: "no newline"}, "no newline\nExit code: 0"},
		{ExecuteResult{Output: "so far\n", ExitCode: 124, TimedOut: true, Timeout: 30 * time.Second},
			"so far\nCommand timed out after 30 seconds\nExit code: 124"},
		{ExecuteResult{ExitCode: 124, TimedOut: true}, "Command timed out\nExit code: 124"},
		{ExecuteResult{Output: "bad \xff"}, "bad \uFFFD\nExit code: 0"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.r.String())
	}
}

func TestOutputBuffer(t *testing.T) {
	write := func(b *outputBuffer, chunks ...string) {
		for _, c := range chunks {
			n, err := b.Write([]byte(c))
			require.NoError(t, err)
			require.Equal(t, len(c), n)
		}
	}
	t.Run("under the limit", func(t *testing.T) {
		b := newOutputBuffer(10)
		write(b, "abc", "defg", "hij")
		out, cut := b.result()
		assert.Equal(t, "abcdefghij", out)
		assert.False(t, cut)
	})
	t.Run("head and tail", func(t *testing.T) {
		b := newOutputBuffer(10)
		write(b, "abcd", "efgh", "ijkl", "mnop", "qrst", "u")
		out, cut := b.result()
		assert.Equal(t, "abcde\n[... output truncated: 11 bytes omitted ...]\nqrstu", out)
		assert.True(t, cut)
	})
	t.Run("one big write", func(t *testing.T) {
		b := newOutputBuffer(10)
		write(b, "line1\nline2\nline3\nline4\n")
		out, _ := b.result()
		assert.Equal(t, "line1\n[... output truncated: 14 bytes omitted ...]\nine4\n", out)
	})
	t.Run("many small writes", func(t *testing.T) {
		b := newOutputBuffer(6)
		for i := range 1000 {
			write(b, fmt.Sprint(i%10))
		}
		out, _ := b.result()
		assert.Equal(t, "012\n[... output truncated: 994 bytes omitted ...]\n789", out)
		assert.LessOrEqual(t, cap(b.tail), 16, "the tail stays small")
	})
	t.Run("runes are not cut", func(t *testing.T) {
		b := newOutputBuffer(8)
		write(b, "ab日本語の文字cd") // 日本語の文字 are 3 bytes each
		out, _ := b.result()
		assert.Equal(t, "ab\n[... output truncated: 18 bytes omitted ...]\ncd", out)
	})
	t.Run("no limit", func(t *testing.T) {
		b := newOutputBuffer(-1)
		big := strings.Repeat("x", 1<<20)
		write(b, big, big)
		out, cut := b.result()
		assert.Len(t, out, 2<<20)
		assert.False(t, cut)
	})
	t.Run("concurrent writers", func(t *testing.T) {
		b := newOutputBuffer(1000)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 1000 {
					b.Write([]byte("0123456789"))
				}
			})
		}
		wg.Wait()
		out, cut := b.result()
		assert.True(t, cut)
		assert.Contains(t, out, "[... output truncated: 79000 bytes omitted ...]")
	})
}

func TestErrorMapping(t *testing.T) {
	ctx := t.Context()
	tools := New(nil, Options{}) // the errors below need no Stat
	pe := func(err error) error { return &fs.PathError{Op: "open", Path: "/x", Err: err} }
	wrapped := func(err error) error { return &backend.OpError{Op: "read", Backend: "b", Err: pe(err)} }
	tests := []struct {
		got  error
		want string
	}{
		{tools.fileError(ctx, "/x", wrapped(fs.ErrNotExist)), "Error: File not found: '/x'"},
		{tools.fileError(ctx, "/x", pe(syscall.ENOTDIR)), "Error: File not found: '/x'"},
		{tools.fileError(ctx, "/x", pe(syscall.EACCES)), "Error: Permission denied: '/x'"},
		{tools.fileError(ctx, "/x", pe(syscall.EISDIR)), "Error: '/x' is a directory, not a file. Use ls to list it."},
		{tools.dirError(ctx, "/x", pe(syscall.ENOENT)), "Error: Path not found: '/x'"},
		{tools.dirError(ctx, "/x", pe(fs.ErrPermission)), "Error: Permission denied: '/x'"},
		{tools.dirError(ctx, "/x", pe(syscall.ENOTDIR)), "Error: '/x' is not a directory. Use read_file to read a file."},
		{tools.writeError("/x", pe(syscall.EACCES)), "Error: Permission denied: '/x'"},
		{tools.writeError("/x", pe(syscall.ENOTDIR)), "Error: Cannot create '/x': a parent path is not a directory."},
		{tools.writeError("/x", pe(syscall.EISDIR)), "Error: '/x' is a directory, not a file."},
	}
	for _, tt := range tests {
		var te *ToolError
		require.ErrorAs(t, tt.got, &te)
		assert.Equal(t, tt.want, te.Error())
		assert.NotNil(t, te.Unwrap())
	}
	assert.ErrorIs(t, tools.fileError(ctx, "/x", wrapped(fs.ErrNotExist)), fs.ErrNotExist)

	// Infrastructure errors pass through unchanged.
	infra := &backend.OpError{Op: "exec", Backend: "b", Err: backend.ErrUnavailable}
	assert.Same(t, infra, tools.fileError(ctx, "/x", infra))
	assert.Same(t, infra, tools.dirError(ctx, "/x", infra))
	assert.Equal(t, error(infra), tools.writeError("/x", infra))
	assert.Equal(t, context.Canceled, skipFileError(ctx, context.Canceled))
	assert.NoError(t, skipFileError(ctx, pe(fs.ErrNotExist)), "a file that vanished is skipped")
	assert.Same(t, infra, skipFileError(ctx, infra))
}
