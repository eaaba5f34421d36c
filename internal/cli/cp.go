package cli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sandboxkit/sandboxkit/backend"
	"github.com/sandboxkit/sandboxkit/backendkit/sbfiles"
	"github.com/sandboxkit/sandboxkit/internal/tartree"
)

func (a *app) cpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories between the host and a sandbox",
		Long: `Cp copies like docker cp. One of SRC and DST is ID:PATH (or NAME:PATH) in a
sandbox; a relative PATH there is relative to the sandbox's working directory.

A file is copied to DST, or into DST when DST is a directory. A directory is
copied into DST when DST is an existing directory, and otherwise becomes DST;
SRC ending in /. copies the directory's contents instead. SRC - reads a tar
stream from stdin and extracts it into the directory DST; DST - writes SRC as a
tar stream to stdout.

Symlinks are copied as links, on every backend. A symlink at DST is followed,
a dangling one too (the copy creates its target), as docker cp does.`,
		Example: `  sbx cp ./src main:/work
  sbx cp main:/work/out.txt .
  sbx cp 3f9c2a:/var/log - | tar t`,
		Args: exactArgs(2, "SRC DST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.cp(cmd.Context(), args[0], args[1])
		},
	}
}

// location is one end of a copy as typed: a sandbox path, a host path or
// "-" (a tar stream on stdin or stdout).
type location struct {
	ref  string // sandbox ID or name; "" for the host
	path string
}

func parseLocation(s string) location {
	if s == "-" {
		return location{path: "-"}
	}
	// Like docker cp: "X:path" names a sandbox unless X looks like a path.
	if i := strings.IndexByte(s, ':'); i > 0 && !strings.ContainsAny(s[:i], `/\`) && !strings.HasPrefix(s, ".") {
		return location{ref: s[:i], path: s[i+1:]}
	}
	return location{path: s}
}

func (l location) stream() bool { return l.ref == "" && l.path == "-" }

func (a *app) cp(ctx context.Context, srcArg, dstArg string) error {
	src, dst := parseLocation(srcArg), parseLocation(dstArg)
	switch {
	case src.stream() && dst.stream():
		return errors.New("cp: SRC and DST cannot both be -")
	case src.ref == "" && dst.ref == "":
		return errors.New("cp: one of SRC and DST must be ID:PATH (a sandbox path)")
	}
	_, b, err := a.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	side := func(l location) (tree, error) {
		if l.ref == "" {
			return hostTree{}, nil
		}
		sb, err := resolve(ctx, b, l.ref)
		if err != nil {
			return nil, err
		}
		return newSandboxTree(ctx, sb, a)
	}
	var srcTree, dstTree tree
	if !src.stream() {
		if srcTree, err = side(src); err != nil {
			return err
		}
	}
	if !dst.stream() {
		if dstTree, err = side(dst); err != nil {
			return err
		}
	}
	switch {
	case src.stream():
		return untarInto(ctx, dstTree, dst.path, a.stdin)
	case dst.stream():
		if _, err := srcTree.Stat(ctx, src.path); err != nil {
			return err
		}
		return srcTree.Tar(ctx, srcTree.Abs(src.path), baseName(srcTree, src.path), a.stdout)
	}
	return copyTree(ctx, srcTree, src.path, dstTree, dst.path)
}

// tree is one side of a copy: the host's filesystem or a sandbox's. Names
// use the side's own separator; Abs makes them absolute.
type tree interface {
	Abs(name string) string
	Stat(ctx context.Context, name string) (fs.FileInfo, error)
	MkdirAll(ctx context.Context, dir string) error
	// Tar writes name as a tar stream whose entries are named as and
	// as/... ("" leaves out the top directory and names its contents
	// directly).
	Tar(ctx context.Context, name, as string, w io.Writer) error
	// Untar extracts a tar stream into the existing directory dir.
	Untar(ctx context.Context, dir string, r io.Reader) error
	Split(name string) (dir, file string)
	// Readlink returns the target of the symlink name; any error means
	// name is not one (or cannot be read as one).
	Readlink(ctx context.Context, name string) (string, error)
}

// followLinks returns what dst leads to when it is a symlink, followed to
// the end as docker cp does (a dangling link too: the copy creates its
// target), so that every backend writes through a link instead of some
// replacing it; otherwise dst itself.
func followLinks(ctx context.Context, t tree, dst string) (string, error) {
	if strings.HasSuffix(dst, "/") {
		return dst, nil // a directory is meant; Stat follows a link there
	}
	p := t.Abs(dst)
	for i := 0; ; i++ {
		target, err := t.Readlink(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			break
		}
		if i == 40 {
			return "", &fs.PathError{Op: "cp", Path: dst, Err: syscall.ELOOP}
		}
		dir, _ := t.Split(p)
		p = t.Abs(joinIfRelative(t, dir, target))
	}
	if p == t.Abs(dst) {
		return dst, nil
	}
	return p, nil
}

// joinIfRelative is target, or target under dir when it is relative.
func joinIfRelative(t tree, dir, target string) string {
	if _, ok := t.(hostTree); ok {
		if filepath.IsAbs(target) {
			return target
		}
		return filepath.Join(dir, target)
	}
	if path.IsAbs(target) {
		return target
	}
	return path.Join(dir, target)
}

// copyTree copies src to dst with docker cp's rules.
func copyTree(ctx context.Context, srcTree tree, src string, dstTree tree, dst string) error {
	srcInfo, err := srcTree.Stat(ctx, src)
	if err != nil {
		return err
	}
	// "dir/." copies the directory's contents rather than the directory.
	contents := srcInfo.IsDir() && (strings.HasSuffix(src, "/.") || src == "." || baseName(srcTree, src) == "")
	if dst, err = followLinks(ctx, dstTree, dst); err != nil {
		return err
	}
	var dir, as string
	dstInfo, err := dstTree.Stat(ctx, dst)
	switch {
	case err == nil && dstInfo.IsDir():
		dir, as = dstTree.Abs(dst), baseName(srcTree, src)
		if contents {
			as = ""
		}
	case err == nil:
		if srcInfo.IsDir() {
			return fmt.Errorf("cannot copy directory %s onto file %s", src, dst)
		}
		dir, as = dstTree.Split(dstTree.Abs(dst))
	case errors.Is(err, fs.ErrNotExist):
		if !srcInfo.IsDir() && strings.HasSuffix(dst, "/") {
			return fmt.Errorf("destination directory %s does not exist", dst)
		}
		dir, as = dstTree.Split(dstTree.Abs(dst))
		if err := dstTree.MkdirAll(ctx, dir); err != nil {
			return err
		}
	default:
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := srcTree.Tar(ctx, srcTree.Abs(src), as, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	err = dstTree.Untar(ctx, dir, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	if srcErr := <-done; srcErr != nil && !errors.Is(srcErr, io.ErrClosedPipe) {
		return srcErr
	}
	return err
}

func untarInto(ctx context.Context, t tree, dir string, r io.Reader) error {
	fi, err := t.Stat(ctx, dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (a tar stream on stdin is extracted into a directory)", dir)
	}
	return t.Untar(ctx, t.Abs(dir), r)
}

// baseName is the name a copy of name gets: its last element, or "" for a
// root or ".".
func baseName(t tree, name string) string {
	_, base := t.Split(strings.TrimRight(t.Abs(name), "/"))
	if base == "." {
		return ""
	}
	return base
}

// rebase renames a tar entry of the tree below top ("." for top itself)
// under as; ok is false for top itself when as is "".
func rebase(as, rel string) (string, bool) {
	rel = path.Clean(rel)
	switch {
	case rel == "." && as == "":
		return "", false
	case rel == ".":
		return as, true
	case as == "":
		return rel, true
	}
	return as + "/" + rel, true
}

// safeEntry cleans a tar entry name (relative to the extraction directory,
// a leading "/" ignored) and refuses names that leave that directory.
func safeEntry(name string) (string, error) {
	clean := path.Clean(strings.TrimLeft(name, "/"))
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("tar entry %q leaves the destination directory", name)
	}
	return clean, nil
}

// hostTree is the host's filesystem.
type hostTree struct{}

func (hostTree) Abs(name string) string {
	if abs, err := filepath.Abs(name); err == nil {
		return abs
	}
	return name
}

func (hostTree) Stat(_ context.Context, name string) (fs.FileInfo, error) { return os.Stat(name) }

func (hostTree) MkdirAll(_ context.Context, dir string) error { return os.MkdirAll(dir, 0o755) }

func (hostTree) Readlink(_ context.Context, name string) (string, error) { return os.Readlink(name) }

func (hostTree) Split(name string) (string, string) {
	name = filepath.Clean(name)
	return filepath.Dir(name), filepath.Base(name)
}

func (hostTree) Tar(ctx context.Context, name, as string, w io.Writer) error {
	root, err := filepath.EvalSymlinks(name)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		entry, ok := rebase(as, filepath.ToSlash(rel))
		if !ok {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return tartree.Entry(tw, p, entry, fi, true)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Untar extracts through an os.Root, so entries cannot leave dir, by ".."
// or by symlinks, whatever the sandbox put in the stream.
func (hostTree) Untar(ctx context.Context, dir string, r io.Reader) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading tar stream: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name, err := safeEntry(hdr.Name)
		if err != nil {
			return err
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return err
			}
			if err := writeRootFile(root, name, mode, tr); err != nil {
				return err
			}
			_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
				return err
			}
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		default:
			// Devices, FIFOs, hard links: not copied.
			continue
		}
	}
}

func writeRootFile(root *os.Root, name string, mode fs.FileMode, r io.Reader) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(name, mode)
	}
	return err
}

// sandboxTree is a sandbox's filesystem, through its Archiver when it has
// one and otherwise file by file through the contract's file helpers.
type sandboxTree struct {
	sb      backend.Sandbox
	workDir string
	app     *app
}

func newSandboxTree(ctx context.Context, sb backend.Sandbox, a *app) (*sandboxTree, error) {
	info, err := sb.Info(ctx)
	if err != nil {
		return nil, err
	}
	wd := info.WorkDir
	if wd == "" {
		wd = "/"
	}
	return &sandboxTree{sb: sb, workDir: wd, app: a}, nil
}

func (t *sandboxTree) Abs(name string) string {
	if !path.IsAbs(name) {
		return path.Join(t.workDir, name)
	}
	return path.Clean(name)
}

func (t *sandboxTree) Stat(ctx context.Context, name string) (fs.FileInfo, error) {
	return sbfiles.Stat(ctx, t.sb, t.Abs(name))
}

func (t *sandboxTree) Readlink(ctx context.Context, name string) (string, error) {
	return sbfiles.Readlink(ctx, t.sb, t.Abs(name))
}

func (t *sandboxTree) Split(name string) (string, string) {
	name = path.Clean(name)
	return path.Dir(name), path.Base(name)
}

// MkdirAll runs mkdir -p: the contract has no call for making directories
// (WriteFile makes a file's parents, but not an empty directory).
func (t *sandboxTree) MkdirAll(ctx context.Context, dir string) error {
	return t.mkdirs(ctx, dir)
}

func (t *sandboxTree) mkdirs(ctx context.Context, dirs ...string) error {
	const batch = 200 // stay far below ARG_MAX
	for len(dirs) > 0 {
		n := min(batch, len(dirs))
		argv := append([]string{"mkdir", "-p", "--"}, dirs[:n]...)
		if err := t.run(ctx, argv); err != nil {
			return err
		}
		dirs = dirs[n:]
	}
	return nil
}

func (t *sandboxTree) run(ctx context.Context, argv []string) error {
	res, err := t.sb.Exec(ctx, backend.ExecRequest{Cmd: argv})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s: exit code %d: %s", strings.Join(argv[:2], " "), res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

func (t *sandboxTree) Tar(ctx context.Context, name, as string, w io.Writer) error {
	name = t.Abs(name)
	if ar, ok := backend.As[backend.Archiver](t.sb); ok {
		rc, err := ar.GetArchive(ctx, name)
		if err == nil {
			defer rc.Close()
			return rebaseArchive(rc, as, w)
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
	}
	tw := tar.NewWriter(w)
	fi, err := sbfiles.Stat(ctx, t.sb, name)
	if err != nil {
		return err
	}
	if as != "" {
		// A symlink is copied as a link, as the archive path copies it
		// (its target, when the contents of a directory are asked for).
		if _, err := sbfiles.Readlink(ctx, t.sb, name); err == nil {
			fi = backend.NewFileInfo(path.Base(name), 0, fs.ModeSymlink|0o777, fi.ModTime())
		}
	}
	if err := t.walk(ctx, tw, name, ".", as, fi); err != nil {
		return err
	}
	return tw.Close()
}

// rebaseArchive copies an Archiver's stream (entries named base, base/...)
// renaming the top entry as.
func rebaseArchive(r io.Reader, as string, w io.Writer) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("reading archive: %w", err)
		}
		name := strings.Trim(strings.TrimPrefix(hdr.Name, "./"), "/")
		rel := "."
		if _, after, ok := strings.Cut(name, "/"); ok {
			rel = after
		}
		entry, ok := rebase(as, rel)
		if !ok {
			continue
		}
		if hdr.Typeflag == tar.TypeDir {
			entry += "/"
		}
		hdr.Name = entry
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// walk writes name (described by fi, rel to the top) and what is under it.
func (t *sandboxTree) walk(ctx context.Context, tw *tar.Writer, name, rel, as string, fi fs.FileInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entry, ok := rebase(as, rel)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		// Kept as a link (to a directory, dangling or not), as the
		// archive path and docker cp keep it.
		target, err := sbfiles.Readlink(ctx, t.sb, name)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: entry, Linkname: target, Mode: 0o777, ModTime: fi.ModTime()})
	case fi.IsDir():
		if ok {
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: entry + "/", Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		}
		children, err := sbfiles.ReadDir(ctx, t.sb, name)
		if err != nil {
			return err
		}
		for _, c := range children {
			if err := t.walk(ctx, tw, path.Join(name, c.Name()), path.Join(rel, c.Name()), as, c); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		rc, err := sbfiles.ReadFile(ctx, t.sb, name)
		if err != nil {
			return err
		}
		defer rc.Close()
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: entry, Size: fi.Size(), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, rc, fi.Size()); err != nil {
			return fmt.Errorf("copying %s: %w (did it change during the copy?)", name, err)
		}
		return nil
	}
	t.app.logger.Warn("cp: skipping special file", "path", name, "mode", fi.Mode().String())
	return nil
}

func (t *sandboxTree) Untar(ctx context.Context, dir string, r io.Reader) error {
	if ar, ok := backend.As[backend.Archiver](t.sb); ok {
		cr := &countingReader{r: r}
		err := ar.PutArchive(ctx, dir, cr)
		if !errors.Is(err, errors.ErrUnsupported) || cr.n > 0 {
			return err
		}
	}
	tr := tar.NewReader(r)
	var dirs []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading tar stream: %w", err)
		}
		name, err := safeEntry(hdr.Name)
		if err != nil {
			return err
		}
		target := path.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			// Made together at the end: WriteFile makes the parents of
			// files anyway, so only empty directories need it.
			dirs = append(dirs, target)
		case tar.TypeReg:
			if err := sbfiles.WriteFile(ctx, t.sb, target, tr, fs.FileMode(hdr.Mode).Perm()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := t.MkdirAll(ctx, path.Dir(target)); err != nil {
				return err
			}
			if err := t.run(ctx, []string{"ln", "-sfn", "--", hdr.Linkname, target}); err != nil {
				return err
			}
		default:
			t.app.logger.Warn("cp: skipping tar entry", "name", hdr.Name, "type", string(hdr.Typeflag))
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	return t.mkdirs(ctx, dirs...)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
