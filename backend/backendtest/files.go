package backendtest

import (
	"context"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
)

// fileEnv is where one file case works: its own directory (not yet
// created) in the files sandbox.
type fileEnv struct {
	sb   backend.Sandbox
	info backend.Info
	dir  string // absolute
	rel  string // the same directory relative to info.WorkDir
}

func (e fileEnv) path(name string) string { return path.Join(e.dir, name) }

// fileCases use sbfiles.ReadFile, WriteFile, Stat and ReadDir, which take the
// sandbox's FileSystem, then its Archiver, then the Exec-based fallback.
var fileCases = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, e fileEnv)
}{
	{"binary round trip", func(t *testing.T, ctx context.Context, e fileEnv) {
		data := make([]byte, 0, 256+64<<10)
		for i := range 256 {
			data = append(data, byte(i))
		}
		data = append(data, randomBytes(64<<10, 2)...)
		name := e.path("binary")
		writeFile(t, ctx, e.sb, name, data, 0o644)
		checkBytes(t, "read back", readFile(t, ctx, e.sb, name), data)
		fi := stat(t, ctx, e.sb, name)
		if fi.Name() != "binary" || fi.Size() != int64(len(data)) || !fi.Mode().IsRegular() || fi.ModTime().IsZero() {
			t.Errorf("Stat = name %q, size %d, mode %v, mtime %v; want %q, %d, a regular file, an mtime",
				fi.Name(), fi.Size(), fi.Mode(), fi.ModTime(), "binary", len(data))
		}
	}},
	{"empty file", func(t *testing.T, ctx context.Context, e fileEnv) {
		name := e.path("empty")
		writeFile(t, ctx, e.sb, name, nil, 0o644)
		if data := readFile(t, ctx, e.sb, name); len(data) != 0 {
			t.Errorf("read back %s, want nothing", quote(data))
		}
		if fi := stat(t, ctx, e.sb, name); fi.Size() != 0 || !fi.Mode().IsRegular() {
			t.Errorf("Stat = size %d, mode %v; want 0, a regular file", fi.Size(), fi.Mode())
		}
	}},
	{"large file", func(t *testing.T, ctx context.Context, e fileEnv) {
		data := randomBytes(16<<20, 3)
		name := e.path("large")
		writeFile(t, ctx, e.sb, name, data, 0o644)
		checkBytes(t, "read back", readFile(t, ctx, e.sb, name), data)
		if fi := stat(t, ctx, e.sb, name); fi.Size() != int64(len(data)) {
			t.Errorf("Stat size = %d, want %d", fi.Size(), len(data))
		}
	}},
	{"missing parents are created", func(t *testing.T, ctx context.Context, e fileEnv) {
		name := e.path("a/b/c/nested.txt")
		writeFile(t, ctx, e.sb, name, []byte("nested"), 0o644)
		checkOutput(t, "read back", readFile(t, ctx, e.sb, name), "nested")
		if fi := stat(t, ctx, e.sb, e.path("a/b")); !fi.IsDir() {
			t.Errorf("Stat(a/b) mode = %v, want a directory", fi.Mode())
		}
	}},
	{"permissions kept", func(t *testing.T, ctx context.Context, e fileEnv) {
		for _, perm := range []fs.FileMode{0o600, 0o755, 0o640} {
			name := e.path(perm.String())
			writeFile(t, ctx, e.sb, name, []byte("x"), perm)
			if got := stat(t, ctx, e.sb, name).Mode().Perm(); got != perm {
				t.Errorf("written with %v, Stat says %v", perm, got)
			}
		}
	}},
	{"overwrite replaces content and mode", func(t *testing.T, ctx context.Context, e fileEnv) {
		name := e.path("over")
		writeFile(t, ctx, e.sb, name, []byte("a long first version of the file\n"), 0o600)
		writeFile(t, ctx, e.sb, name, []byte("short\n"), 0o644)
		checkOutput(t, "read back", readFile(t, ctx, e.sb, name), "short\n")
		if fi := stat(t, ctx, e.sb, name); fi.Size() != 6 || fi.Mode().Perm() != 0o644 {
			t.Errorf("Stat = size %d, mode %v; want 6, %v", fi.Size(), fi.Mode().Perm(), fs.FileMode(0o644))
		}
	}},
	{"relative paths agree with exec", func(t *testing.T, ctx context.Context, e fileEnv) {
		// Written relative, read by a command in the default workdir.
		rel := path.Join(e.rel, "from-helper.txt")
		writeFile(t, ctx, e.sb, rel, []byte("written by WriteFile\n"), 0o644)
		res := mustExec(t, ctx, e.sb, backend.ExecRequest{Cmd: []string{"cat", "--", rel}})
		checkOutput(t, "cat of a relative path", res.Stdout, "written by WriteFile\n")
		if fi := stat(t, ctx, e.sb, path.Join(e.info.WorkDir, rel)); fi.Size() != 21 {
			t.Errorf("Stat of the absolute path: size %d, want 21", fi.Size())
		}
		// Written by a command, read relative.
		rel = path.Join(e.rel, "from-exec.txt")
		mustExec(t, ctx, e.sb, backend.ExecRequest{Cmd: []string{"sh", "-c", `printf 'written by exec' > "$1"`, "sh", rel}})
		checkOutput(t, "ReadFile of a relative path", readFile(t, ctx, e.sb, rel), "written by exec")
	}},
	{"absolute paths agree with exec", func(t *testing.T, ctx context.Context, e fileEnv) {
		name := e.path("abs.txt")
		writeFile(t, ctx, e.sb, name, []byte("absolute\n"), 0o644)
		res := mustExec(t, ctx, e.sb, backend.ExecRequest{Cmd: []string{"cat", "--", name}, WorkDir: "/"})
		checkOutput(t, "cat", res.Stdout, "absolute\n")
	}},
	{"read dir sorted with types and sizes", func(t *testing.T, ctx context.Context, e fileEnv) {
		for name, content := range map[string]string{"b": "bbb", "a": "a", "C": "cc", "sub/x": "x"} {
			writeFile(t, ctx, e.sb, e.path(name), []byte(content), 0o644)
		}
		mustExec(t, ctx, e.sb, backend.ExecRequest{Cmd: []string{"ln", "-s", "a", "link"}, WorkDir: e.dir})

		fis, err := sbfiles.ReadDir(ctx, e.sb, e.dir)
		if err != nil {
			t.Fatalf("ReadDir: %v", err)
		}
		type entry struct {
			name string
			size int64 // -1: not checked
			typ  fs.FileMode
		}
		want := []entry{{"C", 2, 0}, {"a", 1, 0}, {"b", 3, 0}, {"link", -1, fs.ModeSymlink}, {"sub", -1, fs.ModeDir}}
		var got []entry
		for _, fi := range fis {
			e := entry{fi.Name(), fi.Size(), fi.Mode().Type()}
			if e.typ != 0 {
				e.size = -1
			}
			got = append(got, e)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ReadDir = %v, want %v (name, size, type)", got, want)
		}
		// Stat follows the symlink.
		if fi := stat(t, ctx, e.sb, e.path("link")); !fi.Mode().IsRegular() || fi.Size() != 1 {
			t.Errorf("Stat(link) = mode %v, size %d; want its target's (a regular file of 1 byte)", fi.Mode(), fi.Size())
		}
	}},
	{"missing file is fs.ErrNotExist", func(t *testing.T, ctx context.Context, e fileEnv) {
		writeFile(t, ctx, e.sb, e.path("present"), []byte("x"), 0o644)
		for _, name := range []string{e.path("missing"), e.path("missing-dir/missing")} {
			_, err := readAll(ctx, e.sb, name)
			checkPathErr(t, "ReadFile("+name+")", err, fs.ErrNotExist)
			_, err = sbfiles.Stat(ctx, e.sb, name)
			checkPathErr(t, "Stat("+name+")", err, fs.ErrNotExist)
			_, err = sbfiles.ReadDir(ctx, e.sb, name)
			checkPathErr(t, "ReadDir("+name+")", err, fs.ErrNotExist)
		}
	}},
	{"reading a directory fails", func(t *testing.T, ctx context.Context, e fileEnv) {
		writeFile(t, ctx, e.sb, e.path("sub/x"), []byte("x"), 0o644)
		_, err := readAll(ctx, e.sb, e.path("sub"))
		checkPathErr(t, "ReadFile of a directory", err, nil)
	}},
	{"writing over a directory fails", func(t *testing.T, ctx context.Context, e fileEnv) {
		writeFile(t, ctx, e.sb, e.path("sub/x"), []byte("x"), 0o644)
		err := sbfiles.WriteFile(ctx, e.sb, e.path("sub"), strings.NewReader("y"), 0o644)
		checkPathErr(t, "WriteFile over a directory", err, nil)
		if fi := stat(t, ctx, e.sb, e.path("sub")); !fi.IsDir() {
			t.Errorf("after the failed write, sub has mode %v, want a directory", fi.Mode())
		}
	}},
	{"writing under a file fails", func(t *testing.T, ctx context.Context, e fileEnv) {
		writeFile(t, ctx, e.sb, e.path("file"), []byte("x"), 0o644)
		err := sbfiles.WriteFile(ctx, e.sb, e.path("file/child"), strings.NewReader("y"), 0o644)
		checkPathErr(t, "WriteFile under a regular file", err, nil)
		checkOutput(t, "the file after the failed write", readFile(t, ctx, e.sb, e.path("file")), "x")
	}},
}

func (s *suite) testFiles(t *testing.T) {
	sb := s.create(t, s.spec("files"))
	info, err := sb.Info(testCtx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	variants := []struct {
		name string
		sb   backend.Sandbox
	}{{"as is", sb}}
	if s.cfg.rerunsHidden {
		variants = append(variants, struct {
			name string
			sb   backend.Sandbox
		}{"capabilities hidden", HideCapabilities(sb)})
	}
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			if i > 0 && !hasFileCapability(sb) {
				t.Skip("the sandbox has no FileSystem or Archiver: the generic path ran already")
			}
			for _, c := range fileCases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					rel := path.Join("bt-files", v.name, c.name)
					c.run(t, testCtx(t), fileEnv{sb: v.sb, info: info, dir: path.Join(info.WorkDir, rel), rel: rel})
				})
			}
		})
	}
}

func hasFileCapability(sb backend.Sandbox) bool {
	_, fsOK := backend.As[backend.FileSystem](sb)
	_, arOK := backend.As[backend.Archiver](sb)
	return fsOK || arOK
}
