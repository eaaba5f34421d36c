package cli

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backend/backendtest"
)

// tarArchiver is a test-only Archiver over a local sandbox, built on the
// host's tar(1), so the Archiver path of cp runs without a Docker daemon.
type tarArchiver struct{ backend.Sandbox }

func (a tarArchiver) Unwrap() backend.Sandbox { return a.Sandbox }

func (a tarArchiver) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	if _, err := os.Lstat(p); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "tar", "cf", "-", "-C", filepath.Dir(p), filepath.Base(p))
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	return io.NopCloser(strings.NewReader(string(out))), nil
}

func (a tarArchiver) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	cmd := exec.CommandContext(ctx, "tar", "xf", "-", "-C", dir)
	cmd.Stdin = r
	if out, err := cmd.CombinedOutput(); err != nil {
		return errors.New(string(out))
	}
	return nil
}

// TestCopyPaths copies a tree into a sandbox and back through each way a
// sandbox can offer file access: native (local's FileSystem), an Archiver,
// and the plain Exec fallback.
func TestCopyPaths(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar(1)")
	}
	for _, c := range []struct {
		name string
		wrap func(backend.Sandbox) backend.Sandbox
	}{
		{"filesystem", func(sb backend.Sandbox) backend.Sandbox { return sb }},
		{"archiver", func(sb backend.Sandbox) backend.Sandbox {
			return tarArchiver{backendtest.HideCapabilities(sb)}
		}},
		{"exec", backendtest.HideCapabilities},
	} {
		t.Run(c.name, func(t *testing.T) {
			setup(t)
			ctx := context.Background()
			b := openBackend(t)
			raw, err := b.Create(ctx, backend.Spec{Name: "cp"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { raw.Destroy(context.Background()) })
			a := &app{logger: slog.New(slog.DiscardHandler)}
			sbTree, err := newSandboxTree(ctx, c.wrap(raw), a)
			if err != nil {
				t.Fatal(err)
			}

			src := t.TempDir()
			files := map[string]string{"a": "alpha\n", "d/b": "", "d/e/c": strings.Repeat("x", 100000)}
			for name, content := range files {
				p := filepath.Join(src, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			os.Mkdir(filepath.Join(src, "empty"), 0o755)

			if err := copyTree(ctx, hostTree{}, src, sbTree, "in"); err != nil {
				t.Fatalf("copy in: %v", err)
			}
			// Links in the sandbox come out as links: to a folder, to a
			// file, dangling.
			inSandbox := func(script string) {
				t.Helper()
				res, err := raw.Exec(ctx, backend.ExecRequest{Cmd: []string{"sh", "-c", script}, WorkDir: sbTree.Abs("in")})
				if err != nil || res.ExitCode != 0 {
					t.Fatalf("%s: %v, %d %s", script, err, res.ExitCode, res.Stderr)
				}
			}
			inSandbox(`ln -s d/e linkdir && ln -s a linkfile && ln -s nowhere dangling`)
			back := filepath.Join(t.TempDir(), "back")
			if err := copyTree(ctx, sbTree, "in", hostTree{}, back); err != nil {
				t.Fatalf("copy out: %v", err)
			}
			for name, want := range map[string]string{"linkdir": "d/e", "linkfile": "a", "dangling": "nowhere"} {
				if got, err := os.Readlink(filepath.Join(back, name)); err != nil || got != want {
					t.Errorf("%s copied out: link to %q, %v; want a link to %q", name, got, err, want)
				}
			}
			// Onto a dangling link: written through it, as the
			// FileSystem contract and docker cp have it.
			inSandbox(`ln -s made.txt onto`)
			if err := copyTree(ctx, hostTree{}, filepath.Join(src, "a"), sbTree, "in/onto"); err != nil {
				t.Fatalf("copy onto a dangling link: %v", err)
			}
			inSandbox(`[ -L onto ] && [ "$(readlink onto)" = made.txt ] && [ "$(cat made.txt)" = alpha ]`)
			for name, content := range files {
				data, err := os.ReadFile(filepath.Join(back, name))
				if err != nil || string(data) != content {
					t.Errorf("%s: %d bytes, %v", name, len(data), err)
				}
				fi, err := os.Stat(filepath.Join(back, name))
				if err == nil && fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
				}
			}
			if fi, err := os.Stat(filepath.Join(back, "empty")); err != nil || !fi.IsDir() {
				t.Errorf("empty directory: %v", err)
			}
			if _, err := sbTree.Stat(ctx, "nope"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stat of a missing file: %v", err)
			}
		})
	}
}
